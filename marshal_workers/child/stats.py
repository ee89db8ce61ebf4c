"""What a child counts about its handler and reports to its supervisor as `ipc.Stats`.

The child times every handler call (`observe_calls` for the per-record path, `timed` for
batches and retries) and counts the records handled, tallies handler errors by
the policy that dealt with them, and reads its partition's high watermark from its consumer's
cache (``get_watermark_offsets(cached=True)``: no broker round trip; librdkafka updates it
with every fetch response). About once a second, and once more at the end, it sends what
accumulated since the last report as one `ipc.Stats`; the supervisor's metrics add it up.

Latencies are counted per bucket here (the bounds are `ipc.messages.LATENCY_BUCKETS`, shared
with the supervisor's histogram), so a report stays small whatever the batch size. This module
runs in the child and imports neither prometheus-client nor anything of the supervisor.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from confluent_kafka import TopicPartition

from marshal_workers.ipc.messages import LATENCY_BUCKETS, Stats

REPORT_INTERVAL_S = 1.0

Clock = Callable[[], float]


class StatsTally:
    """Counts since the last report: records handled, handler latencies, errors by policy."""

    def __init__(self, clock: Clock = time.monotonic, interval_s: float = REPORT_INTERVAL_S):
        self.clock = clock
        self.interval_s = interval_s
        self._next_report = clock() + interval_s
        self._reset()

    def _reset(self) -> None:
        self.handled = 0
        self.latency_counts = [0] * (len(LATENCY_BUCKETS) + 1)  # the last one is +Inf
        self.latency_sum = 0.0
        self.errors: Counter[str] = Counter()

    def observe(self, seconds: float, handled: int) -> None:
        """One handler call took ``seconds`` and handled ``handled`` records (0: it raised)."""
        self.latency_counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.latency_sum += seconds
        self.handled += handled

    def error(self, policy: str) -> None:
        """A handler error was dealt with by ``policy`` (for example dlq, skip, stop)."""
        self.errors[policy] += 1

    def due(self) -> bool:
        """Whether a report is due (about once per interval)."""
        return self.clock() >= self._next_report

    def report(self, high_watermark: int | None, read_to: int | None = None) -> Stats:
        """What accumulated since the last report, as a message; then start afresh."""
        stats = Stats(
            handled=self.handled,
            latency_counts=tuple(self.latency_counts),
            latency_sum=self.latency_sum,
            errors=tuple(sorted(self.errors.items())),
            high_watermark=high_watermark,
            read_to=read_to,
        )
        self._reset()
        self._next_report = self.clock() + self.interval_s
        return stats

    def observe_calls(self, starts: list[float], ended: float, failed: bool = False) -> None:
        """Calls of ``handle`` one after another: each started at a time in ``starts`` (clock
        readings, in order) and ran until the next started; the last ran until ``ended``.
        Each handled one record, except the last if ``failed`` (it raised).

        A call's latency thus includes the loop's own step between two calls (a fraction of a
        microsecond). A run of calls that fits in the first bucket as a whole is counted there
        without looking at each call; a slower run is halved until its parts fit a bucket or are
        single calls. Exact, and cheap when most calls are fast."""
        calls = len(starts)
        if not calls:
            return
        bounds, counts = LATENCY_BUCKETS, self.latency_counts

        def edge(i: int) -> float:  # call i ran from edge(i) to edge(i + 1) (no copy of starts)
            return ended if i == calls else starts[i]

        runs = [(0, calls)]  # runs of calls not yet counted: split until each fits a bucket
        while runs:
            lo, hi = runs.pop()
            span = edge(hi) - edge(lo)
            if span <= bounds[0]:  # so is every call in it: the usual case, the whole run
                counts[0] += hi - lo
            elif hi - lo == 1:
                counts[bisect.bisect_left(bounds, span)] += 1
            else:  # a slow call is in there: halve (a few slow calls cost a few log2(n) steps)
                mid = (lo + hi) // 2
                runs += ((lo, mid), (mid, hi))
        self.latency_sum += ended - starts[0]
        self.handled += calls - 1 if failed else calls

    def timed(self, call: Callable[[], object], records: int) -> Callable[[], object]:
        """``call`` (a handler call over ``records`` records), timed into this tally each time
        it runs: its records count as handled only if it returned."""
        clock = time.perf_counter

        def timed_call() -> object:
            started, handled = clock(), 0
            try:
                result = call()
                handled = records
                return result
            finally:
                self.observe(clock() - started, handled)

        return timed_call


def cached_high_watermark(consumer: Any, topic: str, partition: int) -> int | None:
    """The partition's high watermark from the consumer's cache, None if not known yet."""
    try:
        marks = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
    except Exception:  # a cache miss or a closing consumer: no figure this time
        return None
    if marks is None or marks[1] < 0:
        return None
    return int(marks[1])
