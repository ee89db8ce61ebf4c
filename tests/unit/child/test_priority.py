"""When a child's handler thread is lowered (`child.priority.Lowering`): by `now` (its first
run dealt with) or when its time is up, whichever comes first, by its thread id; at once if
asked to. Each test lowers a thread of its own, never the runner's.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from marshal_workers.child import priority
from marshal_workers.child.priority import MAX_NICE, Lowering
from marshal_workers.childlink.sharedlease import SharedLease
from marshal_workers.common import leaseclock
from tests.unit.child.test_child_lease_clock import MP, handling, records

linux_only = pytest.mark.skipif(
    not priority.PER_THREAD, reason="a thread is lowered by its id on Linux only"
)


def in_thread(body: Callable[[], Any]) -> Any:
    """``body``'s result, run on a thread of its own (whose nice it may change)."""
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(body()))
    worker.start()
    worker.join()
    return out[0]


def own_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def skip_if_capped(by: int) -> None:
    if own_nice() + by > MAX_NICE:
        pytest.skip("the tests run too low to lower a thread by this much (nice caps at 19)")


def test_no_nice_is_nothing_to_do() -> None:
    before = own_nice()

    def body() -> tuple[bool, object, int]:
        lowering = Lowering(0, 0.1, pytest.fail)
        lowering.now()
        return lowering.done, lowering.timer, own_nice()

    assert in_thread(body) == (True, None, before)


@linux_only
def test_no_delay_lowers_the_calling_thread_at_once_and_only_it() -> None:
    skip_if_capped(3)
    before = own_nice()

    def body() -> tuple[object, int]:
        return Lowering(3, 0, pytest.fail).timer, own_nice()

    assert in_thread(body) == (None, before + 3)
    assert own_nice() == before  # (the runner's thread)


@linux_only
def test_the_time_up_lowers_the_thread_by_its_id() -> None:
    skip_if_capped(4)
    before = own_nice()

    def body() -> tuple[int, object, int]:
        lowering = Lowering(4, 0.2, pytest.fail)
        at_once = own_nice()
        timer = lowering.timer
        assert timer is not None
        timer.join(5)
        return at_once, (timer.name, timer.daemon), own_nice()

    assert in_thread(body) == (before, ("marshal-priority", True), before + 4)
    assert own_nice() == before


@linux_only
def test_now_lowers_it_before_its_time_and_the_timer_is_cancelled() -> None:
    skip_if_capped(4)
    before = own_nice()

    def body() -> tuple[int, int, bool]:
        lowering = Lowering(4, 60.0, pytest.fail)
        at_once = own_nice()
        lowering.now()
        lowering.now()  # (once only)
        timer = lowering.timer
        assert timer is not None
        timer.join(5)  # cancelled: it ends without waiting its minute
        return at_once, own_nice(), timer.is_alive()

    assert in_thread(body) == (before, before + 4, False)


@linux_only
def test_the_nice_caps_at_19(monkeypatch: pytest.MonkeyPatch) -> None:
    set_to: list[int] = []
    monkeypatch.setattr(priority.os, "getpriority", lambda which, who: 17)
    monkeypatch.setattr(priority.os, "setpriority", lambda which, who, value: set_to.append(value))
    lowering = Lowering(5, 60.0, pytest.fail)
    lowering.now()
    assert (lowering.target, set_to) == (MAX_NICE, [MAX_NICE])


@linux_only
def test_a_refusal_is_told_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(which: int, who: int, value: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(priority.os, "setpriority", refuse)
    refused: list[OSError] = []
    lowering = Lowering(2, 0.01, refused.append)
    assert lowering.timer is not None
    lowering.timer.join(5)
    assert [type(exc) for exc in refused] == [PermissionError]
    assert lowering.done


def test_the_handling_step_says_once_that_its_first_record_is_dealt_with() -> None:
    """What calls `Lowering.now`: the handling step, once the first record it was given is
    handled (the rest of that run after), once; not before, and not again."""
    lease = SharedLease(MP)
    lease.extend_to(leaseclock.now() + 60.0)
    told: list[object] = []
    step = handling(lease, leaseclock.now, lambda record, ctx: told.append(record.offset))
    step.first_dealt_with = lambda: told.append("first dealt with")
    step.run(records(3))
    step.run([SimpleNamespace(offset=3)])
    assert told == [0, "first dealt with", 1, 2, 3]
    assert step.first_dealt_with is None


def test_where_a_thread_cannot_be_lowered_by_its_id_the_process_is_lowered_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Elsewhere than Linux: `os.nice` at once (the process), its nice read as the process's."""
    asked: list[int] = []
    niced: list[int] = []
    monkeypatch.setattr(priority, "PER_THREAD", False)
    monkeypatch.setattr(priority.os, "getpriority", lambda which, who: asked.append(who) or 5)
    monkeypatch.setattr(priority.os, "nice", lambda by: niced.append(by) or 5 + by)
    lowering = Lowering(3, 60.0, pytest.fail)
    assert (asked, niced, lowering.timer, lowering.done, lowering.target) == (
        [0],
        [3],
        None,
        True,
        8,
    )
