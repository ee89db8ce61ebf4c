"""The child's handler statistics (buckets, reports, the timed plugin) and stack dumps (every
thread, as log lines; which processes catch a signal)."""

from __future__ import annotations

import os
import signal
import threading

import pytest
import structlog
from structlog.testing import capture_logs

from marshal_workers.handler import Record
from marshal_workers.plugin import Plugin
from marshal_workers.stacks import STACK_DUMP_EVENT, catches_signal, log_stacks, thread_stacks
from marshal_workers.stats import LATENCY_BUCKETS, StatsTally

RECORD = Record("t", 0, 5, None, b"v", None, ())


class Clock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


class TestStatsTally:
    def test_latencies_fall_in_prometheus_buckets(self) -> None:
        """A latency equal to a bound counts in that bucket (le); beyond the last: +Inf."""
        tally = StatsTally()
        tally.observe(LATENCY_BUCKETS[0], 1)
        tally.observe(LATENCY_BUCKETS[0] * 1.5, 1)
        tally.observe(LATENCY_BUCKETS[-1] * 2, 0)
        stats = tally.report(high_watermark=None)
        assert stats.latency_counts[0] == 1 and stats.latency_counts[1] == 1
        assert stats.latency_counts[-1] == 1
        assert len(stats.latency_counts) == len(LATENCY_BUCKETS) + 1
        assert stats.handled == 2

    def test_a_report_is_due_each_interval_and_starts_afresh(self) -> None:
        """due() after the interval; report() carries errors and the watermark, then resets."""
        clock = Clock()
        tally = StatsTally(clock, interval_s=1.0)
        tally.observe(0.01, 3)
        tally.error("dlq")
        tally.error("dlq")
        assert not tally.due()
        clock.now += 1.0
        assert tally.due()
        stats = tally.report(high_watermark=77)
        assert (stats.handled, stats.errors, stats.high_watermark) == (3, (("dlq", 2),), 77)
        assert not tally.due()
        empty = tally.report(None)
        assert (empty.handled, sum(empty.latency_counts), empty.errors) == (0, 0, ())

    def test_instrument_times_handler_calls_and_counts_successes(self) -> None:
        """Each call is timed; a record counts as handled only if the call returned."""
        calls: list[int] = []

        def handle(record: Record, ctx: object) -> None:
            calls.append(record.offset)
            if len(calls) == 2:
                raise RuntimeError("boom")

        plugin = Plugin(handle)
        tally = StatsTally()
        tally.instrument(plugin)
        plugin.handle(RECORD, None)  # type: ignore[arg-type]
        with pytest.raises(RuntimeError):
            plugin.handle(RECORD, None)  # type: ignore[arg-type]
        stats = tally.report(None)
        assert (stats.handled, sum(stats.latency_counts)) == (1, 2)

    def test_instrument_counts_a_batch_as_one_call(self) -> None:
        """handle_batch: one latency per call, every record of it handled."""

        class Batcher:
            def handle_batch(self, records: list[Record], ctx: object) -> None:
                pass

        plugin = Plugin(Batcher)
        tally = StatsTally()
        tally.instrument(plugin)
        assert plugin.handle_batch is not None
        plugin.handle_batch([RECORD, RECORD, RECORD], None)  # type: ignore[arg-type]
        stats = tally.report(None)
        assert (stats.handled, sum(stats.latency_counts)) == (3, 1)


def _park(event: threading.Event) -> None:
    event.wait(10)


class TestStacks:
    def test_every_thread_is_dumped_main_first(self) -> None:
        """A parked thread shows up with its name and the function it waits in."""
        release = threading.Event()
        worker = threading.Thread(target=_park, args=(release,), name="parked-worker")
        worker.start()
        try:
            stacks = thread_stacks()
        finally:
            release.set()
            worker.join()
        assert stacks[0].name == threading.main_thread().name
        parked = next(s for s in stacks if s.name == "parked-worker")
        assert "_park" in parked.stack

    def test_log_stacks_writes_one_line_per_thread(self) -> None:
        """One 'stack dump' event per thread, with the stack as a field."""
        with capture_logs() as logs:
            count = log_stacks(structlog.get_logger())
        dumps = [e for e in logs if e["event"] == STACK_DUMP_EVENT]
        assert len(dumps) == count >= 1
        assert "test_log_stacks_writes_one_line_per_thread" in dumps[0]["stack"]

    def test_catches_signal_reads_the_process_signal_mask(self) -> None:
        """Python catches SIGINT; nobody caught SIGUSR2 here; a gone pid catches nothing."""
        assert catches_signal(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL
        assert not catches_signal(os.getpid(), signal.SIGUSR2)
        assert not catches_signal(2**22 + 12345, signal.SIGINT)
