"""Members started together must not hand claims over among themselves (start churn).

A claim granted and then released over fair share while the member count is stable costs a
child killed and another spawned, which reads the partition again. In the bench (2 members,
64 slices) 82-94 children handled records for 64 slices: the first member claimed everything
before the second one's announcement reached it. These runs start a fleet at once with no
fault and count, per claim, the children spawned and the claims released over fair share; a
lone member must still hold everything promptly.
"""

from __future__ import annotations

import math

import pytest

from marshal_workers.core import commands as cmd
from marshal_workers.protocol.members import is_member_key
from marshal_workers.sim.node import SimNode
from marshal_workers.sim.params import SimParams
from marshal_workers.sim.scenario import Fleet

GROUP = "g0"


class Watched:
    """A fault-free fleet of one group whose members start at the given times."""

    def __init__(self, params: SimParams, starts: list[float]) -> None:
        self.fleet = fleet = Fleet(params)
        self.releases = 0  # claims released over fair share (`over_fair_share_releasing`)
        self.all_held_at: float | None = None  # every claim held by some member
        self.first_start = min(starts)

        def add_members() -> None:
            for i, at in enumerate(starts):
                self._watch(fleet.add_node(GROUP, f"c{i}", at))

        fleet.add_members = add_members  # type: ignore[method-assign]
        self.result = fleet.run()

    def _watch(self, node: SimNode) -> None:
        run = node._run

        def counting(commands: list[cmd.Command], t: float) -> None:
            for c in commands:
                if isinstance(c, cmd.Log) and c.event == "over_fair_share_releasing":
                    self.releases += len(dict(c.fields)["partitions"])  # type: ignore[arg-type]
            run(commands, t)
            if self.all_held_at is None and self._all_held():
                self.all_held_at = t

        node._run = counting  # type: ignore[method-assign]

    def _all_held(self) -> bool:
        keys = set(self.fleet.keys(GROUP))
        held = {k for n in self.fleet.nodes if n.alive for k in n.member.held}
        return keys <= held

    @property
    def claims(self) -> int:
        return len(self.fleet.keys(GROUP))

    @property
    def spawned(self) -> int:
        return sum(n.spawned for n in self.fleet.nodes)

    def shares(self) -> list[int]:
        return sorted(
            len([k for k in n.member.held if not is_member_key(k)]) for n in self.fleet.nodes
        )


def must(holds: bool, run: Watched) -> None:
    """The fleet's other checks, failed with its violations and shares in the message."""
    if not holds:
        pytest.fail(f"violations {run.result.violations}, shares {run.shares()}")


def sliced(slices: int, seed: int = 0) -> SimParams:
    return SimParams(
        seed=seed,
        groups=1,
        partitions=1,
        faults=(),
        duration=8.0,
        rate=10.0 * slices,  # every slice moving (liveness: a record in the last 2 s)
        ordering="unordered",
        workers_per_partition=slices,
    )


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("gap", [0.0, 0.05, 0.1])
def test_two_members_started_together_spawn_one_child_per_slice(seed: int, gap: float) -> None:
    """The bench's case: 2 members, 64 slices of one partition, started ``gap`` apart."""
    run = Watched(sliced(64, seed), [0.0, gap])
    must(run.result.violations == [] and run.shares() == [32, 32], run)
    assert run.releases == 0, f"{run.releases} claims released over fair share"
    assert run.spawned == run.claims, f"{run.spawned} children for {run.claims} slices"


@pytest.mark.parametrize("seed", range(2))
def test_a_fleet_deployed_at_once_spawns_one_child_per_partition(seed: int) -> None:
    """`partition` mode, 100 partitions, 10 hosts restarted by a deploy 40 ms apart (0.36 s
    in all: longer than the settle, 0.1 s at the simulator's HB of 1 s, but each within the
    settle of the one before)."""
    params = SimParams(seed=seed, groups=1, partitions=100, faults=(), duration=8.0)
    run = Watched(params, [i * 0.04 for i in range(10)])
    must(run.result.violations == [] and run.shares() == [10] * 10, run)
    assert run.releases == 0, f"{run.releases} claims released over fair share"
    assert run.spawned == run.claims, f"{run.spawned} children for {run.claims} partitions"


@pytest.mark.parametrize("slices", [1, 64])
def test_a_lone_member_holds_everything_promptly(slices: int) -> None:
    """The settle a starting member waits is bounded by a fraction of HB: a lone member
    holds every claim within HB/2 of its start (the sim's HB is 1 s, its steps 50 ms)."""
    run = Watched(sliced(slices), [0.3])
    hb = run.fleet.p.heartbeat_interval
    assert run.all_held_at is not None
    assert run.all_held_at - run.first_start <= hb / 2
    assert run.spawned == run.claims
    assert math.isclose(run.shares()[0], slices)
