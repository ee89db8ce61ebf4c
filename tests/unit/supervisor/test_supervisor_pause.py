"""The supervisor under a group pause (ReleaseGroup by an admin), on the in-memory log with
stand-in children that the test plays over real pipes: holders release at the position their
child reports, nobody claims while paused, and claiming resumes when the pause ends."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from marshal_workers.admin.pause import lift_pause, pause_for
from marshal_workers.admin.session import AdminSession
from marshal_workers.config.runconfig import RunConfig
from marshal_workers.core.pauses import pause_by_other
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.memlog import MemoryLog, MemoryTopic
from marshal_workers.protocol.members import is_member_key
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.wire import (
    ClaimingPartition,
    ClaimKey,
    ReleasingPartition,
    claim_key,
)
from marshal_workers.supervisor.observe import Observer
from marshal_workers.supervisor.runtime import Supervisor
from tests.supervisor_doubles import MP, FakeChild, FakeTopics, initialised, patch_children
from tests.support import message_of, pause, record

ADMINS = frozenset({"marshal-admin"})
# The test drives the supervisor's steps itself. With HB 1 s, a test process starved for 2 HB
# on a loaded machine let claims lapse instead of being released (a lapsed claim resumes at
# its last committed position, 0, and rightly so): the released-position check failed in 3 of
# 6 runs at load 12-20. At 5 s a lapse needs a 10 s stall.
HB_S = 5.0


class Fleet:
    """One supervisor ("w1") on a memory log, its stand-in children, and an admin."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.topic = initialised(MemoryTopic(2, lambda: int(time.time() * 1000)))
        config = RunConfig(
            handler="marshal_workers.plugins.ledger:handle",
            mode=Mode.ALO,
            topics=("orders",),
            group="g",
            client_id="w1",
            heartbeat_interval=HB_S,
            stop_timeout=5.0,
            admin_client_ids=ADMINS,
        )
        log = MemoryLog(self.topic)
        self.children: list[FakeChild] = []

        patch_children(monkeypatch, self.children)
        self.sup = Supervisor(config, log, FakeTopics(2), MP, Observer())  # type: ignore[arg-type]
        self.admin = self.admin_session("marshal-admin")

    def admin_session(self, client_id: str) -> AdminSession:
        log = MemoryLog(self.topic)
        return AdminSession(log, FoldedLog(log, self.config(log)), client_id)

    @staticmethod
    def config(log: MemoryLog) -> RationalizerConfig:
        return RationalizerConfig(
            int(HB_S * 1000), num_partitions=log.num_partitions, admin_client_ids=ADMINS
        )

    def run_until(self, check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            self.sup.step([], wait_s=0.02)

    def released_by_children(self, offset: int) -> bool:
        """Play every child told to stop (it reports ``offset``); whether no data claim is left."""
        for child in self.children:
            child.answer_stop(offset)
        return not self.data_claims()

    def data_claims(self) -> set[ClaimKey]:
        return {k for k in self.sup.member.held if not is_member_key(k)}

    def messages(self) -> list[Any]:
        topic = self.topic
        return [message_of(r.value) for p in range(topic.num_partitions) for r in topic.read(p, 0)]


@pytest.fixture
def fleet(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fleet]:
    f = Fleet(monkeypatch)
    f.sup.start(catch_up_timeout=5)
    # both claimed and both children started: a claim won a moment ago may still be looking
    # its start up, and a pause then drops it with no release (nothing was handled), which
    # is not what these tests look at (in one loaded run the pause came first in all three)
    f.run_until(
        lambda: len(f.data_claims()) == 2 and len(f.children) == 2, "both partitions started"
    )
    yield f
    f.sup.kill_all()


class TestPauseReaction:
    def test_holders_release_at_the_reported_position_and_the_member_claim_stays(
        self, fleet: Fleet
    ) -> None:
        """An admin's pause: each child is told to stop, reports 42, and the claim is released
        at 42; the member claim is kept."""
        assert pause_for(fleet.admin, "g", 30).in_force
        stopped: set[int] = set()

        def children_stopped() -> bool:
            stopped.update(c.pid for c in fleet.children if c.answer_stop(42))
            return not fleet.data_claims()

        fleet.run_until(children_stopped, "the data claims to be released")
        assert len(stopped) == 2
        released = [m for m in fleet.messages() if isinstance(m, ReleasingPartition)]
        assert {(m.partition, m.offset) for m in released} == {(0, 42), (1, 42)}
        assert [k for k in fleet.sup.member.held if is_member_key(k)], "the member claim went too"
        assert fleet.sup.member.paused_until_ms is not None

    def test_nobody_claims_while_paused_and_claiming_resumes_when_lifted(
        self, fleet: Fleet
    ) -> None:
        """No ClaimingPartition while the pause is in force; after the lift, both partitions
        are claimed again, starting at the released position."""
        pause_for(fleet.admin, "g", 30)
        fleet.run_until(lambda: fleet.released_by_children(7), "every claim released")
        written = len(fleet.messages())
        for _ in range(30):
            fleet.sup.step([], wait_s=0.02)
        claims = [m for m in fleet.messages()[written:] if isinstance(m, ClaimingPartition)]
        assert claims == []
        released = [m for m in fleet.messages() if isinstance(m, ReleasingPartition)]
        assert {(m.partition, m.offset) for m in released} == {(0, 7), (1, 7)}
        started = len(fleet.children)
        assert lift_pause(fleet.admin, "g").accepted
        fleet.run_until(lambda: len(fleet.data_claims()) == 2, "claims after the lift")
        assert fleet.sup.member.paused_until_ms is None
        fleet.run_until(lambda: len(fleet.children) == started + 2, "their children started")
        assert {c.spec.start_offset for c in fleet.children[-2:]} == {7}

    def test_a_pause_that_expires_ends_by_itself(self, fleet: Fleet) -> None:
        """A pause of one second: the claims are released, then won back after it."""
        assert pause_for(fleet.admin, "g", 1).in_force
        fleet.run_until(lambda: fleet.released_by_children(3), "the claims to be released")
        fleet.run_until(lambda: len(fleet.data_claims()) == 2, "claims after the pause expired")

    def test_a_refused_pause_changes_nothing(self, fleet: Fleet) -> None:
        """A ReleaseGroup from a client that is not an admin is refused: the claims stay."""
        outcome = pause_for(fleet.admin_session("intruder"), "g", 30)
        assert not outcome.accepted
        assert outcome.refusal == "intruder is not an admin client"
        for _ in range(20):
            fleet.sup.step([], wait_s=0.02)
        assert len(fleet.data_claims()) == 2
        assert fleet.sup.member.paused_until_ms is None


def test_a_member_that_starts_during_a_pause_claims_nothing_from_its_first_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A member started while another client's pause is in force wrote claims in
    its first round (``begin`` rebalanced without looking at the pause); each was refused, and
    a refused, positionless claim could become its key's newest record after compaction."""
    f = Fleet(monkeypatch)
    assert pause_for(f.admin, "g", 30).in_force
    try:
        f.sup.start(catch_up_timeout=5)
        for _ in range(30):
            f.sup.step([], wait_s=0.02)
        claims = [
            m
            for m in f.messages()
            if isinstance(m, ClaimingPartition) and not is_member_key(claim_key(m))
        ]
        assert claims == []
        assert f.sup.member.paused_until_ms is not None
    finally:
        f.sup.kill_all()


class TestPauseByOther:
    @staticmethod
    def paused_world(client: str, until_sec: int, partition: int = 0) -> World:
        world = World(RationalizerConfig(1000), partition)
        fold(world, record(pause(client, until_sec), 0, 1_000, partition))
        return world

    def test_own_pause_is_ignored(self) -> None:
        """A supervisor does not release for a pause it wrote itself."""
        world = self.paused_world("w1", 100)
        assert pause_by_other([world], "g", "w1", 2_000) is None
        assert pause_by_other([world], "g", "w2", 2_000) is not None

    def test_expired_pause_is_not_in_force(self) -> None:
        """At or after the expire time (log time) the pause is over."""
        world = self.paused_world("admin", 10)
        assert pause_by_other([world], "g", "w1", 9_999) is not None
        assert pause_by_other([world], "g", "w1", 10_000) is None

    def test_longest_pause_over_partitions_wins(self) -> None:
        """Each coordination partition folds its own ReleaseGroup; the latest end counts."""
        worlds = [self.paused_world("admin", 10, 0), self.paused_world("admin", 50, 1)]
        found = pause_by_other(worlds, "g", "w1", 2_000)
        assert found is not None and found.until_ms == 50_000
