"""A claim record must not erase the position it follows, scripted: the seed
searches of `test_defects.py` find this defect only in a few seeds of their fleets, and any
change to which records a run writes moves those seeds (every append draws its latency from
one random stream), so the rows went blind after each change to the member. This runs the
sequence itself, under the cleaner every member accepts (a lag of 4*HB), on one ALO
partition of g2, a group that starts new claims at the latest offset, or of g0, one that
starts them at the earliest:

1. H holds it, handles and heartbeats its position; H is killed.
2. R wins it 2*HB after H's last heartbeat, and is killed in the turn it wrote the claim:
   its claim is the newest record of the claim, and no heartbeat of R follows it.
3. The cleaner runs: with claims under the key of the position records (the defect), R's
   claim removes H's heartbeats, and with them the position.
4. A member starts on the compacted log: it finds no position and looks the start up: in g2
   the high watermark, so what lay between H's position and there is never handled
   (`alo_no_skip`); in g0 the partition's first offset, so everything H handled is handled
   again (`alo_rehandle_bound`).

The other groups (one member each) keep the log moving so that the cleaner reaches past the
active segment. Without the defect R's claim has a key of its own and the position survives.
"""

from __future__ import annotations

from typing import Any

import pytest

from marshal_workers.core import commands as cmd
from marshal_workers.protocol.wire import ClaimingPartition, ClaimKey
from marshal_workers.sim.node import SimNode
from marshal_workers.sim.params import SimParams
from marshal_workers.sim.scenario import Fleet, RunResult
from tests.sim.test_defects import _erase_positions

# the scripted group, and what its members skip or redo once the position is erased
CASES = {"g2": "alo_no_skip", "g0": "alo_rehandle_bound"}


class ErasedPosition:
    """The scripted run (HB = 1 s)."""

    def __init__(self, seed: int, group: str) -> None:
        self.key = ClaimKey(group, f"t{group}", 0)
        params = SimParams(
            seed=seed, groups=3, partitions=1, faults=(), duration=20.0, coordination_partitions=1
        )
        self.fleet = fleet = Fleet(params)
        self.nodes: dict[str, SimNode] = {}
        self.roles: dict[str, SimNode] = {}
        self.rival_claimed = False

        def add_members() -> None:
            for other in {"g0", "g1", "g2"} - {group}:
                self.nodes[other] = fleet.add_node(other, f"{other}-m", 0.0)
            self.nodes["c1"] = fleet.add_node(group, "c1", 0.0)
            self.nodes["c2"] = fleet.add_node(group, "c2", 0.05)

        def schedule_faults() -> None:
            fleet.at(4.0, "kill the holder", self._kill_holder)
            fleet.at(14.0, "cleaner, 4 HB behind", lambda: self._clean(14.0))
            fleet.at(14.5, "a member starts on the compacted log", self._join)

        fleet.add_members = add_members  # type: ignore[method-assign]
        fleet.schedule_faults = schedule_faults  # type: ignore[method-assign]
        self.result: RunResult = fleet.run()

    def _kill_holder(self) -> None:
        pair = [self.nodes["c1"], self.nodes["c2"]]
        (holder,) = [n for n in pair if self.key in n.held_data()]
        rival = next(n for n in pair if n is not holder)
        self.roles["H"], self.roles["R"] = holder, rival
        holder.kill(self.fleet.t)
        run = rival._run

        def dies_as_it_claims(commands: list[cmd.Command], t: float) -> None:
            run(commands, t)
            for c in commands:
                message: Any = getattr(c, "message", None)
                if isinstance(message, ClaimingPartition) and message.topic == self.key.topic:
                    self.rival_claimed = True
                    rival.kill(t)

        rival._run = dies_as_it_claims  # type: ignore[method-assign]
        self.fleet.window(12.0)

    def _clean(self, t: float) -> None:
        self.fleet.log.compact(int((t - 4 * self.fleet.p.heartbeat_interval) * 1000))
        self.fleet.window(0.2)

    def _join(self) -> None:
        self.nodes["c3"] = self.fleet.add_node(self.key.group, "c3", self.fleet.t)
        self.fleet.window(0.5)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("group", sorted(CASES))
def test_a_claim_record_keeps_the_position_it_follows(group: str, seed: int) -> None:
    run = ErasedPosition(seed, group)
    assert set(run.roles) == {"H", "R"} and run.rival_claimed
    assert run.result.violations == [], run.result.violations[:3]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("group", sorted(CASES))
def test_with_claims_under_the_positions_key_the_position_is_erased(
    monkeypatch: pytest.MonkeyPatch, group: str, seed: int
) -> None:
    """The defect rows of `test_defects.py`, found by the script in every run."""
    _erase_positions(monkeypatch)
    run = ErasedPosition(seed, group)
    assert run.rival_claimed
    found = [v for v in run.result.violations if v["invariant"] == CASES[group]]
    assert found, run.result.violations[:3]
