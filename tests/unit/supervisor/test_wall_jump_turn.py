"""A suspend the lease clock did not count shows first in the wall clock: the supervisor's turn
compares the two clocks before it answers a child (a reviewer found the comparison in the
turn's Tick, after the children's messages: a child's request in the first turn after the
resume was written as a reservation, with a heartbeat, on a lease that had ended).

The runtime on the in-memory log with a stand-in AMO child; the lease clock is the real one
minus what a suspend took from it, the wall clock the real one.
"""

from __future__ import annotations

import signal
import time

import pytest

from marshal_workers.common import leaseclock
from marshal_workers.config.runconfig import RunConfig
from marshal_workers.ipc import messages as ipc
from marshal_workers.log.memlog import MemoryLog, MemoryTopic
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.wire import ClaimKey, decode
from marshal_workers.supervisor.observe import Observer
from marshal_workers.supervisor.runtime import Supervisor
from tests.supervisor_doubles import MP, FakeChild, FakeTopics, initialised, patch_children
from tests.unit.supervisor.test_reclaim_after_stall import run_until

KEY = ClaimKey("g", "orders", 0)
HB = 0.5


def test_a_childs_request_after_an_uncounted_suspend_is_not_written_on_the_old_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lease clock loses 3·HB at once (the wall clock counted it), the log shows nothing
    new yet, and the child asks for a batch in that very turn: nothing is written about the
    claim, and the child is killed."""
    topic = initialised(MemoryTopic(1, lambda: int(time.time() * 1000)))
    log = MemoryLog(topic)
    config = RunConfig("h:h", Mode.AMO, ("orders",), "g", "w1", heartbeat_interval=HB)
    children: list[FakeChild] = []
    patch_children(monkeypatch, children)
    lost = [0.0]
    sup = Supervisor(
        config,
        log,
        FakeTopics(1),  # type: ignore[arg-type]
        MP,
        Observer(),
        clock=lambda: leaseclock.now() - lost[0],
    )
    try:
        sup.start(catch_up_timeout=5)
        run_until(sup, lambda: bool(children), "the partition claimed and its child started")
        child = children[0]
        assert child.spec.start_offset is not None
        start = child.spec.start_offset
        ends = [topic.end_offset(p) for p in range(topic.num_partitions)]
        lost[0] = 3 * HB  # a suspend the lease clock did not count; the wall clock did
        child.peer.send(ipc.GrantRequest(1, start, start + 50))
        sup.step([], wait_s=0.0)
        written = [
            type(decode(r.value)).__name__
            for p in range(topic.num_partitions)
            for r in topic.read(p, ends[p])
        ]
        assert [w for w in written if w in ("Heartbeat", "ClaimingMessages")] == []
        assert signal.SIGKILL in child.signals
    finally:
        for c in children:
            c.close()
