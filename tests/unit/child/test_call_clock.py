"""The handler call in progress as the child sees it: its start, deadline and keepalive."""

from __future__ import annotations

from marshal_workers.child.callclock import CallClock


def in_call(started: float, timeout: float | None = 10.0) -> CallClock:
    clock = CallClock(timeout)
    clock.starts = [started - 5, started]  # a run: the last start is the call in progress
    return clock


def test_no_call_has_no_deadline() -> None:
    """Between runs, or with an empty run, nothing is in progress."""
    clock = CallClock(10.0)
    assert clock.started() == 0.0 and clock.deadline() == 0.0
    clock.starts = []
    assert clock.started() == 0.0 and clock.deadline() == 0.0


def test_the_deadline_is_the_calls_start_plus_the_timeout() -> None:
    """One timeout after the start of the latest call of the run."""
    assert in_call(100.0).deadline() == 110.0


def test_without_a_timeout_there_is_no_deadline() -> None:
    """handler_timeout 0 (None): the call is never killed for its length."""
    assert in_call(100.0, timeout=None).deadline() == 0.0
    assert in_call(100.0, timeout=None).keepalive(101.0, 200.0) == 0.0


def test_keepalive_gives_one_timeout_from_now() -> None:
    """keepalive at 108 moves the deadline to 118 and says 10 s are left."""
    clock = in_call(100.0)
    assert clock.keepalive(108.0, lease_deadline=500.0) == 10.0
    assert clock.deadline() == 118.0


def test_keepalive_never_goes_past_the_lease() -> None:
    """With the lease ending at 112, keepalive at 108 gives only until 112."""
    clock = in_call(100.0)
    assert clock.keepalive(108.0, lease_deadline=112.0) == 4.0
    assert clock.deadline() == 112.0


def test_keepalive_never_shortens_the_deadline() -> None:
    """A lease ending before the current deadline leaves the deadline as it was."""
    clock = in_call(100.0)
    assert clock.keepalive(101.0, lease_deadline=105.0) == 9.0
    assert clock.deadline() == 110.0


def test_keepalive_holds_only_for_the_call_it_was_made_in() -> None:
    """The next call (a new start) gets a plain timeout again."""
    clock = in_call(100.0)
    clock.keepalive(108.0, lease_deadline=500.0)
    assert clock.starts is not None
    clock.starts.append(109.0)
    assert clock.deadline() == 119.0
