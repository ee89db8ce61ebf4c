"""Placed groups in the simulator: each member reads its group's home and window only, and
every invariant holds as for spread groups (`protocol.placement`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from marshal_workers.common.errors import EXIT_PLACEMENT_MOVED
from marshal_workers.core import memberstate
from marshal_workers.core.memberstate import MemberState
from marshal_workers.protocol.members import member_key
from marshal_workers.protocol.metadata import GroupSettings, encode_metadata, metadata_key
from marshal_workers.protocol.placement import Placement, reads
from marshal_workers.protocol.wire import (
    ClaimKey,
    Partitioner,
    ReleaseGroup,
    coordination_partition,
    encode,
    record_key,
)
from marshal_workers.sim.params import SimParams
from marshal_workers.sim.scenario import ADMIN, Fleet, run_seed
from tests.sim.conftest import violations

PLACED = SimParams(placement="placed", coordination_partitions=16)


def test_a_placed_member_follows_its_groups_reads_only() -> None:
    """Every member of a placed run reads exactly its group's home and window, and every
    record of a group's claims is on that window."""
    fleet = Fleet(replace(PLACED, members=8, groups=4, span=2, faults=(), duration=10.0))
    fleet.run()
    for node in fleet.nodes:
        group = node.settings.group
        assert node.followed == reads(group, fleet.placements[group])
    for part, records in enumerate(fleet.log.shadow):
        for r in records:
            group = (r.key or b"").split(b"/")[0].decode()
            if group in fleet.placements and b"//settings" not in (r.key or b""):
                assert part in fleet.placements[group].window, (part, r.key)


def test_a_placed_member_reads_its_own_group_not_the_others() -> None:
    """Eight groups on 16 partitions: spread, a member reads every group's records; placed
    (span 1), its own and those of the groups that share its home: well under half."""
    quiet = replace(PLACED, members=16, groups=8, faults=(), duration=20.0)
    placed = run_seed(quiet).member_reads_per_s
    spread = run_seed(replace(quiet, placement="spread")).member_reads_per_s
    assert placed > 0
    assert placed < spread / 2


@pytest.mark.parametrize("seed", range(4))
def test_placed_runs_under_the_default_faults_are_clean(seed: int) -> None:
    """The default fault mix, placed groups: no violation."""
    assert run_seed(replace(PLACED, seed=seed)).violations == []


def test_placement_defect_claims_written_by_the_spread_hash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A member of a placed group that wrote its claims where the spread hash puts them,
    following every partition: off its window, every claim is malformed for every reader that
    knows the group's placement (the member too), and the group's partitions are never held."""

    def spread_home(self: MemberState, key: ClaimKey) -> int:
        return coordination_partition(key.topic, key.partition, self.s.coordination_partitions)

    def everything(group: str, placement: Placement) -> frozenset[int]:
        return frozenset(range(placement.partitions))

    monkeypatch.setattr(MemberState, "home", spread_home)
    monkeypatch.setattr(memberstate, "reads", everything)
    params = replace(PLACED, faults=(), duration=15.0)
    kinds = {v["invariant"] for _, v in violations(params, 1)}
    assert "liveness" in kinds and "no_crash" not in kinds, kinds
    monkeypatch.undo()
    assert violations(params, 1) == []


@pytest.mark.parametrize("shift, span", [(1, 1), (0, 2)])
def test_members_of_a_moved_group_write_nothing_on_the_old_layout_as_they_stop(
    monkeypatch: pytest.MonkeyPatch, shift: int, span: int
) -> None:
    """A move's settings record lands on a placed group's window mid-run (`marshal-admin
    group-settings --move`; the sim carries no positions: the members are only to leave). Each
    member, watching its group's settings here (the sim's members do not otherwise), exits 6
    within a heartbeat. A member claim the new placement puts elsewhere is not released on the
    old layout (judged malformed there by the new placement, its release waited out a verdict
    that never came); one it leaves on its partition (a window widened from the same home) is
    released, or the new layout counted a member for 2*HB (two reviews, on a real broker and of
    the fix; `tests/unit/admin/test_group_move.py` has the core's cases)."""
    fleet = Fleet(replace(PLACED, members=4, groups=1, faults=(), duration=12.0, seed=5))
    group = "g0"
    old = fleet.placements[group]
    first = (old.first + shift) % old.partitions
    new = Placement(old.partitions, first, span, token_base=10_000)
    hb_ms = int(fleet.p.heartbeat_interval * 1000)

    def recorded(placement: Placement) -> GroupSettings:  # as `land_group_settings` writes
        return GroupSettings(int(fleet.t), "creator-i", "creator", group, hb_ms,
                             Partitioner.SPEC, frozenset({ADMIN}), fleet.cut.slicing,
                             placement)  # fmt: skip

    made = Fleet.settings
    monkeypatch.setattr(
        Fleet,
        "settings",
        lambda self, g, c, m=None: replace(made(self, g, c, m), shared=recorded(old)),
    )
    moved: dict[int, int] = {}  # old window partition -> the offset of the record there

    def pause() -> None:  # the move's first step: the admin's pause (its change is accepted)
        msg = ReleaseGroup(int(fleet.t), "admin-i", ADMIN, group, "", 0, int(fleet.t) + 60)
        for part in sorted(reads(group, old)):
            fleet.log.land(part, record_key(msg), encode(msg), fleet.t)

    def move() -> None:
        record = replace(recorded(new), instance_id="admin-i", client_id=ADMIN)
        for part in sorted(reads(group, old)):
            landed = fleet.log.land(part, metadata_key(record), encode_metadata(record), fleet.t)
            moved[part] = landed.offset

    fleet.at(4.0, "pause", pause)
    fleet.at(6.0, "move", move)
    fleet.run()
    assert moved and [n.exit_code for n in fleet.nodes] == [EXIT_PLACEMENT_MOVED] * 4
    assert all(n.ended_at is not None and n.ended_at < 6.0 + 1.0 for n in fleet.nodes), [
        n.ended_at for n in fleet.nodes
    ]
    stayed = 0
    for node in fleet.nodes:
        topic = member_key(group, node.settings.client_id).topic
        stays = new.partition_of(topic, 0) == old.partition_of(topic, 0)
        stayed += stays
        released = [
            r
            for part, offset in moved.items()
            for r in fleet.log.shadow[part]
            if r.offset > offset and (r.key or b"").startswith(f"{group}/{topic}/".encode())
            and (r.value or b"").startswith(b"ReleasingPartition/")
        ]  # fmt: skip
        assert len(released) == (1 if stays else 0), (node.name, stays, released)
    # moved on: none stays; widened from the same home: some stay, some move (both seen)
    assert stayed == 0 if shift else 0 < stayed < len(fleet.nodes), stayed
