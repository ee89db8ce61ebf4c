"""The child's handler statistics (buckets, reports, timed calls) and stack dumps (every
thread, as log lines; which processes catch a signal)."""

from __future__ import annotations

import os
import signal
import threading

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from marshal_workers.child.stats import StatsTally
from marshal_workers.common.stacks import (
    STACK_DUMP_EVENT,
    catches_signal,
    log_stacks,
    thread_stacks,
)
from marshal_workers.handler import Record
from marshal_workers.ipc.messages import LATENCY_BUCKETS

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

    def test_timed_counts_a_call_and_its_records_only_if_it_returned(self) -> None:
        """Each run of the timed call is one latency; its records count only if it returned."""
        outcomes = iter([None, RuntimeError("boom")])

        def call() -> None:
            outcome = next(outcomes)
            if outcome is not None:
                raise outcome

        tally = StatsTally()
        timed = tally.timed(call, records=3)  # a batch of three, say
        timed()
        with pytest.raises(RuntimeError):
            timed()
        stats = tally.report(None)
        assert (stats.handled, sum(stats.latency_counts)) == (3, 2)

    def test_a_fast_run_of_calls_counts_in_the_first_bucket(self) -> None:
        """Calls whose whole run fits in the first bound: each in the first bucket."""
        tally = StatsTally()
        step = LATENCY_BUCKETS[0] / 10
        tally.observe_calls([1.0, 1.0 + step, 1.0 + 2 * step], ended=1.0 + 3 * step)
        stats = tally.report(None)
        assert stats.latency_counts[0] == 3 and sum(stats.latency_counts) == 3
        assert stats.handled == 3
        assert stats.latency_sum == pytest.approx(3 * step)

    def test_a_slow_run_of_calls_is_binned_call_by_call(self) -> None:
        """Each call lasts until the next one starts (the last until ``ended``); a failed last
        call is timed but its record is not handled."""
        tally = StatsTally()
        fast, slow = LATENCY_BUCKETS[0] / 2, LATENCY_BUCKETS[-1] * 2
        middling = (LATENCY_BUCKETS[0] + LATENCY_BUCKETS[1]) / 2
        starts = [0.0, fast, fast + slow]
        tally.observe_calls(starts, ended=fast + slow + middling, failed=True)
        stats = tally.report(None)
        assert stats.latency_counts[0] == 1  # the fast one
        assert stats.latency_counts[-1] == 1  # beyond the last bound: +Inf
        assert stats.latency_counts[1] == 1  # between the first and second bounds
        assert stats.handled == 2

    @given(
        st.lists(
            st.sampled_from([0.0, 1e-6, 1e-4, *LATENCY_BUCKETS, 0.003, 0.7, 45.0]),
            min_size=1,
            max_size=60,
        ),
        st.booleans(),
    )
    def test_binning_a_run_equals_binning_each_call(
        self, durations: list[float], failed: bool
    ) -> None:
        """Whatever the mix of fast and slow calls, each lands in the bucket of its own
        duration (the run's halving is only a shortcut)."""
        starts = [0.0]
        for duration in durations[:-1]:
            starts.append(starts[-1] + duration)
        ended = starts[-1] + durations[-1]
        tally, naive = StatsTally(), StatsTally()
        tally.observe_calls(starts, ended, failed=failed)
        for i, started in enumerate(starts):
            until = starts[i + 1] if i + 1 < len(starts) else ended
            naive.observe(until - started, 0 if failed and i == len(starts) - 1 else 1)
        got, want = tally.report(None), naive.report(None)
        assert got.latency_counts == want.latency_counts
        assert got.handled == want.handled
        assert got.latency_sum == pytest.approx(want.latency_sum)

    def test_no_calls_count_nothing(self) -> None:
        tally = StatsTally()
        tally.observe_calls([], ended=5.0)
        stats = tally.report(None)
        assert (stats.handled, sum(stats.latency_counts), stats.latency_sum) == (0, 0, 0.0)


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
        """One 'stack_dump' event per thread, with the stack as a field."""
        with capture_logs() as logs:
            count = log_stacks(structlog.get_logger())
        dumps = [e for e in logs if e["event"] == STACK_DUMP_EVENT]
        assert len(dumps) == count >= 1
        assert "test_log_stacks_writes_one_line_per_thread" in dumps[0]["stack"]

    def test_catches_signal_reads_the_process_signal_mask(self) -> None:
        """A signal with a handler is caught, one at its default is not, a gone pid catches
        nothing (the test sets both dispositions: a background job starts with SIGINT
        ignored)."""
        caught = signal.signal(signal.SIGUSR1, lambda _signum, _frame: None)
        default = signal.signal(signal.SIGUSR2, signal.SIG_DFL)
        try:
            assert catches_signal(os.getpid(), signal.SIGUSR1)
            assert not catches_signal(os.getpid(), signal.SIGUSR2)
        finally:
            signal.signal(signal.SIGUSR1, caught)
            signal.signal(signal.SIGUSR2, default)
        assert not catches_signal(2**22 + 12345, signal.SIGUSR1)
