"""Placed groups in the simulator: each member reads its group's home and window only, and
every invariant holds as for spread groups (`protocol.placement`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from marshal_workers.core import memberstate
from marshal_workers.core.memberstate import MemberState
from marshal_workers.protocol.placement import Placement, reads
from marshal_workers.protocol.wire import ClaimKey, coordination_partition
from marshal_workers.sim.params import SimParams
from marshal_workers.sim.scenario import Fleet, run_seed
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
