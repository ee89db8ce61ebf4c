"""A member whose lease ran out in a coordination stall resumes from the newest position, on
the in-memory log with a stand-in child.

The child reported 752; the stall (every append fails) outlasts the lease, the child is
fenced, the release is not acknowledged, and the log still says 0. When the stall ends and the
member wins the claim back with nobody in between, it starts at 752 (it used to start at the
log's 0 and handle 752 records again). If it keeps away instead, it writes no release: past
its lease a release may land after a rival's takeover and, once the cleaner has removed the
rival's records, stand as the claim's position (marshal-sim seeds 29 and 63 of
freeze,eager-compaction); whoever claims next resumes at the log's 0 (ALO: again, as after a
crash).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from marshal_workers.config.runconfig import RunConfig
from marshal_workers.core.reclaim import reclaimed_position
from marshal_workers.ipc import messages as ipc
from marshal_workers.log.memlog import MemoryLog, MemoryTopic
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.supervisor.observe import Observer
from marshal_workers.supervisor.runtime import Supervisor
from tests.supervisor_doubles import MP, FakeChild, FakeTopics, initialised, patch_children

KEY = ClaimKey("g", "orders", 0)


class StalledLog(MemoryLog):
    """While ``stalled``, no append lands or is acknowledged (each is reported failed)."""

    stalled = False

    def submit(self, op: int, partition: int, key: bytes, value: bytes) -> None:
        if self.stalled:
            self._acks.append((op, "not acknowledged within 1.0s"))
            return
        super().submit(op, partition, key, value)


def run_until(sup: Supervisor, check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        sup.step([], wait_s=0.02)


def test_a_claim_won_back_after_a_stall_starts_at_the_childs_position(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Lease expired in a stall, release lost, claim won back: start at 752, not at 0."""
    topic = initialised(MemoryTopic(1, lambda: int(time.time() * 1000)))
    log = StalledLog(topic)
    config = RunConfig("h:h", Mode.ALO, ("orders",), "g", "w1", heartbeat_interval=0.5)
    children: list[FakeChild] = []
    patch_children(monkeypatch, children)
    sup = Supervisor(config, log, FakeTopics(1), MP, Observer())  # type: ignore[arg-type]
    try:
        sup.start(catch_up_timeout=5)
        run_until(sup, lambda: KEY in sup.member.held, "the partition claimed")
        run_until(sup, lambda: bool(children), "its start in the log, the child started")
        first = children[0]
        assert first.spec.start_offset == 0
        log.stalled = True  # from here no heartbeat carries 752 to the log
        first.peer.send(ipc.Progress(752))
        run_until(sup, lambda: sup.member.held[KEY].position == 752, "the progress read")
        run_until(sup, lambda: KEY not in sup.member.held, "the lease to run out")
        assert first.exitcode is not None  # fenced
        log.stalled = False

        def won_back() -> list[FakeChild]:
            return [c for c in children if c.spec.fencing_token != first.spec.fencing_token]

        def won() -> bool:
            held = sup.member.held.get(KEY)
            return held is not None and held.token != first.spec.fencing_token

        run_until(sup, won, "the claim won back (a new token)")
        assert sup.member.ctx.state_of(KEY).committed == 0  # the log never heard of 752 ...
        run_until(sup, lambda: bool(won_back()), "its child started (off the loop)")
        assert won_back()[0].spec.start_offset == 752  # ... but the member did
    finally:
        sup.kill_all()


def test_no_release_is_written_past_the_lease_so_the_logs_position_stands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Lease expired in a stall, release lost; the member keeps away from the partition: once
    the log takes writes again, it writes no release at 752 (it used to, until the fold stopped
    showing it as the holder): the log keeps the position its last accepted heartbeat gave."""
    topic = initialised(MemoryTopic(1, lambda: int(time.time() * 1000)))
    log = StalledLog(topic)
    config = RunConfig("h:h", Mode.ALO, ("orders",), "g", "w1", heartbeat_interval=0.5)
    children: list[FakeChild] = []
    patch_children(monkeypatch, children)
    sup = Supervisor(config, log, FakeTopics(1), MP, Observer())  # type: ignore[arg-type]
    try:
        sup.start(catch_up_timeout=5)
        run_until(sup, lambda: KEY in sup.member.held, "the partition claimed")
        run_until(sup, lambda: bool(children), "its start in the log, the child started")
        log.stalled = True
        children[0].peer.send(ipc.Progress(752))
        run_until(sup, lambda: sup.member.held[KEY].position == 752, "the progress read")
        run_until(sup, lambda: KEY not in sup.member.held, "the lease to run out")
        sup.member.ctx.avoid_until[KEY] = time.monotonic() + 3600  # someone else's turn
        assert sup.member.ctx.state_of(KEY).committed == 0
        log.stalled = False
        until = time.monotonic() + 2.0  # four rounds of what used to write it again
        while time.monotonic() < until:
            sup.step([], wait_s=0.02)
        state = sup.member.ctx.state_of(KEY)
        assert not state.released and state.committed == 0
    finally:
        sup.kill_all()


def test_the_logs_position_stands_when_someone_else_held_the_claim() -> None:
    """Another holder in between (or a release): the log's position, whatever was reported."""
    assert reclaimed_position(100, 752, "w2", "w1") == 100
    assert reclaimed_position(100, 752, None, "w1") == 100
    assert reclaimed_position(900, 752, "w1", "w1") == 900
    assert reclaimed_position(100, None, "w1", "w1") == 100
