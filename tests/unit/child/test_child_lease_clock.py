"""The child reads its lease on the lease clock (`common.leaseclock`, which counts a suspend):
its checks before a turn and before every handler call, the call starts it publishes, the
keepalive deadline and the watchdog, whose wait is a time on that clock (no broker, no child)."""

from __future__ import annotations

import inspect
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace
from typing import Any, NoReturn

import pytest

from marshal_workers.child import fencing
from marshal_workers.child.callclock import CallClock
from marshal_workers.child.failurehandling import FailureHandling
from marshal_workers.child.fencing import REASON_LEASE_EXPIRED, Watchdog, sleep_until
from marshal_workers.child.handling import Handling, keepalive
from marshal_workers.child.leasecheck import LeaseCheck
from marshal_workers.child.loop import ChildLoop
from marshal_workers.child.plugin import Plugin
from marshal_workers.child.reporting import Reporter
from marshal_workers.childlink.sharedlease import SharedLease
from marshal_workers.common import leaseclock
from marshal_workers.ipc.exits import EXIT_LEASE_EXPIRED, ChildExit
from marshal_workers.protocol.modes import Mode

MP = multiprocessing.get_context("spawn")


class FakeClock:
    """A lease clock the test moves: each reading returns the next value (the last repeats)."""

    def __init__(self, readings: Sequence[float]) -> None:
        self._readings: Iterator[float] = iter(readings)
        self.last = readings[0]
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        self.last = next(self._readings, self.last)
        return self.last


class Log:
    def warning(self, event: str, **fields: Any) -> None:
        """Nothing to keep."""


def records(n: int) -> list[Any]:
    return [SimpleNamespace(offset=o) for o in range(n)]


def handling(lease: SharedLease, clock: Callable[[], float], handle: Any) -> Handling:
    check = LeaseCheck(lease, Log(), clock)
    reporter = Reporter(Mode.ALO, lease.calls, pipe=None, position=0)  # type: ignore[arg-type]
    failures = FailureHandling.__new__(FailureHandling)  # (no failure in these tests)
    ctx: Any = None
    return Handling(Plugin(handle), ctx, check, lease.calls, CallClock(30.0), failures, reporter)


def test_every_lease_reading_of_the_child_defaults_to_the_lease_clock() -> None:
    """The loop's lease check and the watchdog read `leaseclock.now` unless a test injects
    another clock; the watchdog's wait is the absolute sleep on that clock."""
    assert inspect.signature(ChildLoop).parameters["clock"].default is leaseclock.now
    assert inspect.signature(LeaseCheck).parameters["clock"].default is leaseclock.now
    assert inspect.signature(Watchdog).parameters["clock"].default is leaseclock.now
    lease = SharedLease(MP)
    dog = Watchdog(lease, os.getppid(), on_fence=lambda reason: os._exit(99))
    assert dog._sleep_until is fencing.sleep_until


def test_the_check_before_every_handler_call_reads_the_injected_clock() -> None:
    """The lease runs to 100 on the lease clock; the clock reads 99 for three calls, then 100:
    three records are handled, the fourth is not started, the child ends (lease expired)."""
    lease = SharedLease(MP)
    lease.extend_to(100.0)
    clock = FakeClock([99.0, 99.1, 99.2, 100.0])
    handled: list[int] = []
    step = handling(lease, clock, lambda record, ctx: handled.append(record.offset))
    with pytest.raises(ChildExit) as ended:
        step.run(records(10))
    assert ended.value.code == EXIT_LEASE_EXPIRED
    assert handled == [0, 1, 2]
    assert lease.calls.handled_position() == 3  # (ALO: the three below it are handled)


def test_the_call_starts_the_watchdog_reads_are_lease_clock_readings() -> None:
    """The call in progress began at the lease clock's reading before it (what the watchdog
    compares with the handler deadline, and publishes to the supervisor)."""
    lease = SharedLease(MP)
    lease.extend_to(1e9)
    clock = FakeClock([500.0, 501.0, 502.0])
    seen: list[float] = []
    step = handling(lease, clock, lambda record, ctx: seen.append(step.call_clock.started()))
    step.run(records(2))
    assert seen == [500.0, 501.0]


def test_the_turn_check_and_keepalive_read_the_injected_clock() -> None:
    """`LeaseCheck.require` ends the child at the deadline on its clock, whatever
    ``time.monotonic`` says; keepalive's deadline is the lease clock's now plus the timeout,
    never past the lease."""
    lease = SharedLease(MP)
    lease.extend_to(1000.0)
    check = LeaseCheck(lease, Log(), FakeClock([999.0, 1000.0]))
    check.require()
    with pytest.raises(ChildExit) as ended:
        check.require()
    assert ended.value.reason == REASON_LEASE_EXPIRED
    call_clock = CallClock(30.0)
    call_clock.starts = [960.0]  # its own deadline 990
    keep = keepalive(call_clock, LeaseCheck(lease, Log(), FakeClock([995.0])), lease.calls)
    assert keep() == pytest.approx(5.0)  # 995 + 30 is past the lease: the lease's 1000
    assert lease.calls.keep_until.value == 1000.0


class FencedError(Exception):
    """What the fake fence raises instead of ending the process."""


def fence(reason: str) -> NoReturn:
    """The watchdog's ``on_fence`` in these tests: raise instead of ending the process."""
    raise FencedError(reason)


def test_the_watchdog_waits_until_a_time_on_the_lease_clock_and_fires_after_a_jump() -> None:
    """Each wait is an absolute time on the lease clock (the next tick, or the deadline if
    sooner), not a duration on another clock; when the clock jumps past the deadline during a
    wait (a suspend), the next check fences."""
    lease = SharedLease(MP)
    lease.extend_to(1000.0)
    now = [990.0]
    waits: list[float] = []

    def sleep(until: float) -> None:
        waits.append(until)
        now[0] = until if len(waits) < 3 else until + 3600.0  # the third wait: a suspend

    dog = Watchdog(lease, os.getppid(), fence, tick_s=0.5, clock=lambda: now[0], sleep=sleep)
    with pytest.raises(FencedError, match=REASON_LEASE_EXPIRED):
        dog.run()
    assert waits == [990.5, 991.0, 991.5]
    lease.extend_to(2000.0)
    now[0], waits[:] = 1999.8, []
    with pytest.raises(FencedError, match=REASON_LEASE_EXPIRED):
        dog.run()
    assert waits[0] == 2000.0  # the deadline comes before the tick: wait exactly until it


@pytest.mark.parametrize(
    ("timeout", "step"), [(None, 1.0), (300.0, 1.0), (8.0, 1.0), (4.0, 0.5), (1.5, 0.25)]
)
def test_the_watchdog_looks_once_a_tick_while_nothing_is_due(
    timeout: float | None, step: float
) -> None:
    """Each look takes the GIL from a handler thread running below the watchdog's priority: at
    20 looks a second, 64 busy children kept the host's other processes off the CPU for seconds
    (`bench/watchdog_stall.py`), and at 4 a second they cost the handlers about 5% of their CPU.
    A lease far off is waited for in steps of one tick (an eighth of the handler timeout,
    between 0.25 s and 1 s), with a call in progress or not, and the deadline itself exactly."""
    lease = SharedLease(MP)
    end = 1000.0 + 4 * step
    lease.extend_to(end)
    now = [1000.0]
    waits: list[float] = []
    calls = CallClock(timeout)

    def sleep(until: float) -> None:
        waits.append(until)
        now[0] = until
        if len(waits) == 2:
            calls.starts = [until]  # a call that outlives the lease (its deadline is past it)

    dog = Watchdog(lease, os.getppid(), fence, clock=lambda: now[0], sleep=sleep, call_clock=calls)
    with pytest.raises(FencedError, match=REASON_LEASE_EXPIRED):
        dog.run()
    steps = [b - a for a, b in zip([1000.0, *waits], waits, strict=False)]
    assert waits[-1] == end
    assert steps == pytest.approx([step] * 4)


@pytest.mark.parametrize(
    ("timeout", "step"),
    [(0.1, 0.1), (0.01, 0.05), (1.0, 0.25), (2.0, 0.25), (4.0, 0.5), (300.0, 1.0)],
)
def test_a_call_begun_during_a_wait_is_fenced_at_its_deadline(timeout: float, step: float) -> None:
    """A handler call that begins just after the watchdog looked is seen at its next look, one
    tick later and before its deadline whatever the timeout (a tick is at most the timeout, not
    below 50 ms), and then fenced at its deadline exactly (within one step for a timeout
    shorter than 50 ms)."""
    lease = SharedLease(MP)
    lease.extend_to(5000.0)
    now = [1000.0]
    calls = CallClock(timeout)
    waits: list[float] = []

    def sleep(until: float) -> None:
        waits.append(until)
        if len(waits) == 1:
            calls.starts = [now[0] + 0.001]  # the call begins just after the first look
        now[0] = until

    dog = Watchdog(lease, os.getppid(), fence, clock=lambda: now[0], sleep=sleep, call_clock=calls)
    with pytest.raises(FencedError, match=fencing.REASON_HANDLER_TIMEOUT):
        dog.run()
    assert waits[0] == pytest.approx(1000.0 + step)
    if step <= timeout:
        assert now[0] == pytest.approx(1000.001 + timeout)
    assert now[0] <= 1000.001 + timeout + step + 1e-9


def test_sleep_until_returns_once_the_lease_clock_reads_the_time() -> None:
    """The real wait: not before the lease clock reaches the time (a past time returns)."""
    target = leaseclock.now() + 0.05
    sleep_until(target)
    assert leaseclock.now() >= target
    sleep_until(leaseclock.now() - 10.0)
