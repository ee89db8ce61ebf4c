"""The child's scheduling policy: SCHED_BATCH for its handling threads unless turned off, and
the setting that turns it off carried from the configuration to the child's spec."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest
import structlog

from marshal_workers.child.scheduling import use_batch_scheduling
from marshal_workers.config.runconfig import RunConfig
from marshal_workers.protocol.modes import Mode
from marshal_workers.supervisor.runtime import member_settings

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling")


def in_a_thread(enabled: bool) -> tuple[bool, int, int]:
    """What `use_batch_scheduling` returns in a fresh thread, that thread's policy after it,
    and the policy of a thread it starts after it."""
    seen: dict[str, Any] = {}

    def later() -> None:
        seen["later"] = os.sched_getscheduler(0)

    def run() -> None:
        seen["returned"] = use_batch_scheduling(enabled, structlog.get_logger())
        seen["policy"] = os.sched_getscheduler(0)
        started = threading.Thread(target=later)
        started.start()
        started.join()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return seen["returned"], seen["policy"], seen["later"]


def test_the_child_asks_for_batch_scheduling() -> None:
    """Enabled, the calling thread and the threads it starts after run SCHED_BATCH."""
    assert in_a_thread(True) == (True, os.SCHED_BATCH, os.SCHED_BATCH)


def test_turned_off_the_thread_keeps_its_policy() -> None:
    """Disabled, nothing changes: the thread stays SCHED_OTHER."""
    assert in_a_thread(False) == (False, os.SCHED_OTHER, os.SCHED_OTHER)


def test_only_the_calling_thread_changes() -> None:
    """The thread that called is changed, not the process's other threads (the watchdog)."""
    in_a_thread(True)
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


@pytest.mark.parametrize(("setting", "expected"), [("batch", True), ("normal", False)])
def test_the_setting_reaches_the_childs_spec(setting: str, expected: bool) -> None:
    """child_scheduling batch or normal becomes the spec's batch_scheduling."""
    config = RunConfig(
        handler="h:f", mode=Mode.ALO, topics=("t",), group="g", client_id="c",
        child_scheduling=setting,
    )  # fmt: skip
    assert member_settings(config, 1).child.batch_scheduling is expected
