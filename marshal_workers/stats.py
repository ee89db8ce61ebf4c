"""What a child counts about its handler and reports to its supervisor as `ipc.Stats`.

The child times every handler call and counts the records handled, tallies handler errors by
the policy that dealt with them, and reads its partition's high watermark from its consumer's
cache (``get_watermark_offsets(cached=True)``: no broker round trip; librdkafka updates it
with every fetch response). About once a second, and once more at the end, it sends what
accumulated since the last report as one `ipc.Stats`; the supervisor's metrics add it up.

Latencies are counted per bucket here (the bounds are `LATENCY_BUCKETS`, shared with the
supervisor's histogram), so a report stays small whatever the batch size. This module runs in
the child and imports neither prometheus-client nor anything of the supervisor.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import TopicPartition

from marshal_workers.handler import Context, Record
from marshal_workers.ipc import Stats
from marshal_workers.plugin import Plugin

LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
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

    def report(self, high_watermark: int | None) -> Stats:
        """What accumulated since the last report, as a message; then start afresh."""
        stats = Stats(
            handled=self.handled,
            latency_counts=tuple(self.latency_counts),
            latency_sum=self.latency_sum,
            errors=tuple(sorted(self.errors.items())),
            high_watermark=high_watermark,
        )
        self._reset()
        self._next_report = self.clock() + self.interval_s
        return stats

    def instrument(self, plugin: Plugin) -> None:
        """Time every call of the plugin's ``handle`` or ``handle_batch`` into this tally."""
        clock = time.perf_counter
        handle = plugin.handle

        def timed_handle(record: Record, ctx: Context) -> object:
            started, handled = clock(), 0
            try:
                result = handle(record, ctx)
                handled = 1
                return result
            finally:
                self.observe(clock() - started, handled)

        plugin.handle = timed_handle
        batch = plugin.handle_batch
        if batch is not None:

            def timed_batch(records: Sequence[Record], ctx: Context) -> object:
                started, handled = clock(), 0
                try:
                    result = batch(records, ctx)
                    handled = len(records)
                    return result
                finally:
                    self.observe(clock() - started, handled)

            plugin.handle_batch = timed_batch


def cached_high_watermark(consumer: Any, topic: str, partition: int) -> int | None:
    """The partition's high watermark from the consumer's cache, None if not known yet."""
    try:
        marks = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
    except Exception:  # a cache miss or a closing consumer: no figure this time
        return None
    if marks is None or marks[1] < 0:
        return None
    return int(marks[1])
