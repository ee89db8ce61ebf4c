"""The supervisor's HUP (reload: fresh children, the claims kept) and USR1 (stack dumps), on the
in-memory log with stand-in children that the test plays over real pipes."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from marshal_workers.common.stacks import STACK_DUMP_EVENT
from marshal_workers.config.runconfig import RunConfig
from marshal_workers.core.heldclaim import Phase
from marshal_workers.ipc import messages as ipc
from marshal_workers.log.memlog import MemoryLog, MemoryTopic
from marshal_workers.protocol.members import is_member_key
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.wire import ClaimingPartition, ClaimKey, ReleasingPartition
from marshal_workers.supervisor.observe import Observer
from marshal_workers.supervisor.runtime import Supervisor
from marshal_workers.supervisor.systemd import claims_status
from tests.supervisor_doubles import MP, FakeChild, FakeTopics, initialised, patch_children
from tests.support import message_of


class Recorder(Observer):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def reloading(self) -> None:
        self.calls.append("reloading")

    def reloaded(self) -> None:
        self.calls.append("reloaded")

    def stopping(self) -> None:
        self.calls.append("stopping")


class World:
    """A supervisor on a memory log, and every child it started."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, stop_timeout: float = 5.0) -> None:
        self.topic = initialised(MemoryTopic(2, lambda: int(time.time() * 1000)))
        log = MemoryLog(self.topic)
        config = RunConfig(
            handler="marshal_workers.plugins.ledger:handle",
            mode=Mode.ALO,
            topics=("orders",),
            group="g",
            client_id="c1",
            heartbeat_interval=1.0,
            stop_timeout=stop_timeout,
        )
        self.recorder = Recorder()
        self.children: list[FakeChild] = []

        patch_children(monkeypatch, self.children)
        self.sup = Supervisor(config, log, FakeTopics(2), MP, self.recorder)  # type: ignore[arg-type]

    def run_until(self, check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            self.sup.step([], wait_s=0.02)

    def running(self) -> dict[ClaimKey, FakeChild]:
        """The live child of each data claim."""
        return {
            k: next(c for c in self.children if c.pid == h.pid)
            for k, h in self.sup.children.items()
            if not is_member_key(k)
        }

    def coordination_messages(self) -> list[Any]:
        return [
            message_of(r.value)
            for p in range(self.topic.num_partitions)
            for r in self.topic.read(p, 0)
        ]


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    w = World(monkeypatch)
    w.sup.start(catch_up_timeout=5)
    w.run_until(lambda: len(w.running()) == 2, "both partitions claimed with a child")
    yield w
    w.sup.kill_all()


class TestReload:
    def test_hup_replaces_children_keeping_claim_token_and_position(self, world: World) -> None:
        """Stop, Stopped at 42, exit: a new child for the same claim, same token, from 42,
        with no release and no new claim in the log."""
        before = world.running()
        tokens = {k: world.sup.member.held[k].token for k in before}
        written = len(world.coordination_messages())
        world.sup.step([signal.SIGHUP], wait_s=0.0)
        phases = {h.phase for k, h in world.sup.member.held.items() if k in before}
        assert phases == {Phase.RELOADING}
        for child in before.values():
            assert child.inbox() == [ipc.Stop()]
            child.stop(42)
        world.run_until(lambda: "reloaded" in world.recorder.calls, "the reload to finish")
        world.run_until(
            lambda: len(world.running()) == 2, "the new children (started off the loop)"
        )
        after = world.running()
        assert set(after) == set(before)
        for key, child in after.items():
            assert child.pid != before[key].pid
            assert child.spec.fencing_token == tokens[key] == world.sup.member.held[key].token
            assert child.spec.start_offset == 42
            assert world.sup.member.held[key].phase is Phase.RUNNING
        since = world.coordination_messages()[written:]
        assert not [m for m in since if isinstance(m, ClaimingPartition | ReleasingPartition)]
        assert world.recorder.calls == ["reloading", "reloaded"]

    def test_a_child_that_does_not_stop_in_time_is_killed_then_replaced(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """After --stop-timeout the old child gets TERM (the child alone) and KILL (its group);
        a new one takes the claim. Once reaped, its group gets one more KILL (whatever its
        handler started)."""
        w = World(monkeypatch, stop_timeout=0.3)
        try:
            w.sup.start(catch_up_timeout=5)
            w.run_until(lambda: len(w.running()) == 2, "both partitions claimed")
            before = w.running()
            w.sup.step([signal.SIGHUP], wait_s=0.0)
            w.run_until(lambda: "reloaded" in w.recorder.calls, "the reload to finish")
            for child in before.values():
                # TERM, KILL before it exits; after, KILL to its group (what its handler started)
                assert child.signals[:2] == [signal.SIGTERM, signal.SIGKILL]
                # the TERM to the child alone: it stops at the next record boundary, and a
                # helper its call in progress uses must not die under that call first
                assert child.alone == [signal.SIGTERM]
            assert {c.pid for c in w.running().values()}.isdisjoint(c.pid for c in before.values())
        finally:
            w.sup.kill_all()

    def test_term_during_a_reload_releases_instead(self, world: World) -> None:
        """A stop wins over a pending reload: the claims are released, no child respawned."""
        before = world.running()
        world.sup.step([signal.SIGHUP], wait_s=0.0)
        world.sup.step([signal.SIGTERM], wait_s=0.0)
        for child in before.values():
            child.stop(7)
        world.run_until(lambda: world.sup.done, "the stop")
        released = [m for m in world.coordination_messages() if isinstance(m, ReleasingPartition)]
        assert {(m.partition, m.offset) for m in released if m.topic == "orders"} == {
            (0, 7),
            (1, 7),
        }
        assert len(world.children) == 2
        assert "reloaded" not in world.recorder.calls

    def test_hup_while_stopping_is_ignored(self, world: World) -> None:
        """Once stopping, a reload does nothing."""
        world.sup.step([signal.SIGTERM], wait_s=0.0)
        world.sup.step([signal.SIGHUP], wait_s=0.0)
        assert "reloading" not in world.recorder.calls
        assert all(h.phase is not Phase.RELOADING for h in world.sup.member.held.values())


class TestLeaseInSnapshot:
    def test_a_fast_stop_leaves_no_lease_to_show(self, world: World) -> None:
        """INT revokes the leases (deadline 0): the snapshot shows no lease left for them, so
        systemd's STATUS names none (not minus the monotonic clock)."""
        world.sup.request_stop(fast=True)
        snapshot = world.sup.snapshot(time.monotonic())
        assert [s.lease_remaining for k, s in snapshot.items() if not is_member_key(k)] == [
            None,
            None,
        ]
        assert claims_status(snapshot, stopping=True) == "stopping: 2 claims: orders/0,orders/1"

    def test_a_lost_claim_has_no_lease_the_others_do(self, world: World) -> None:
        """A lost claim shows no lease; the shortest lease is that of the claims still held."""
        lost, kept = sorted(world.running(), key=lambda k: k.partition)
        member = world.sup.member
        member.ctx.out = []
        member.keeping.lose(member.held[lost], "taken in this test")
        world.sup._run(member.ctx.out)
        now = time.monotonic()
        snapshot = world.sup.snapshot(now)
        left = world.sup.member.held[kept].lease - now
        assert (snapshot[lost].lease_remaining, snapshot[kept].lease_remaining) == (None, left)
        assert claims_status(snapshot) == f"2 claims: orders/0,orders/1; lease min {left:.1f}s"


class TestStackDump:
    def test_usr1_logs_every_thread_and_asks_each_child(self, world: World) -> None:
        """'stack_dump' lines from the supervisor, and DumpStacks down every child's pipe."""
        with capture_logs() as logs:
            world.sup.step([signal.SIGUSR1], wait_s=0.0)
        dumps = [e for e in logs if e["event"] == STACK_DUMP_EVENT]
        assert dumps and "dump_stacks" in dumps[0]["stack"]
        for child in world.running().values():
            assert ipc.DumpStacks() in child.inbox()
