"""A claim started at a looked-up offset (no position in the log; groups at ``latest``) loses
nothing when the first holder's writes of that start fail, scripted (the review found it in
seeds 45013, 55017 unordered/4 and 60009 key/6 of ``poison,failures`` at a fail rate of 0.2,
four members in two groups: too rare for a seed search):

1. c1 wins the partition and looks ``latest`` up; every write of its about that claim (its
   heartbeats, reservations, release) fails from then on;
2. its lease runs out (no heartbeat landed) and it is killed; c2 claims the partition 2*HB
   later and, the log still having no position, looks ``latest`` up again: a later offset.

Before the start was made durable first, c1's child started at once at its offset and
handled (ALO) or was refused (AMO) from there, and c2 started past the records between the
two lookups: ALO skipped records its predecessor had not handled, AMO lost them with no
crash. Now c1's child waits for a heartbeat carrying its start to land, so it never starts,
and c2's start is the first.
"""

from __future__ import annotations

from typing import Any

import pytest

from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core.claiming import Claiming
from marshal_workers.protocol.wire import ClaimingPartition, ClaimKey
from marshal_workers.sim.node import SimNode
from marshal_workers.sim.params import SimParams
from marshal_workers.sim.scenario import Fleet, RunResult

# g2 (ALO) and g1 (AMO) start new claims at the latest offset
CASES = {"g2": "alo_no_skip", "g1": "amo_loss_only_on_crash"}


class FailedFirstStart:
    """The scripted run (HB = 1 s)."""

    def __init__(self, seed: int, group: str) -> None:
        self.key = ClaimKey(group, f"t{group}", 0)
        params = SimParams(
            seed=seed, groups=3, partitions=1, faults=(), duration=15.0, coordination_partitions=1
        )
        self.fleet = fleet = Fleet(params)
        self.nodes: dict[str, SimNode] = {}
        self.failed_writes = 0

        def add_members() -> None:
            for other in {"g0", "g1", "g2"} - {group}:
                self.nodes[other] = fleet.add_node(other, f"{other}-m", 0.0)
            self.nodes["c1"] = first = fleet.add_node(group, "c1", 0.0)
            self.nodes["c2"] = fleet.add_node(group, "c2", 0.5)
            self._fail_writes_of_the_claim(first)

        def schedule_faults() -> None:
            fleet.at(3.0, "kill the first holder", first_killed)
            fleet.window(3.0)

        def first_killed() -> None:
            self.nodes["c1"].kill(fleet.t)

        fleet.add_members = add_members  # type: ignore[method-assign]
        fleet.schedule_faults = schedule_faults  # type: ignore[method-assign]
        self.result: RunResult = fleet.run()

    def _fail_writes_of_the_claim(self, node: SimNode) -> None:
        """Every write of ``node`` about the claim but its claim fails, not landing."""
        run = node._run

        def failing(commands: list[cmd.Command], t: float) -> None:
            kept = []
            for c in commands:
                message: Any = c.message if isinstance(c, cmd.Append) else None
                about = message is not None and (message.topic, message.partition) == (
                    self.key.topic,
                    self.key.partition,
                )
                if about and not isinstance(message, ClaimingPartition):
                    self.failed_writes += 1
                    node.acks.append(inp.AppendFailed(t, c.op, "scripted failure"))
                else:
                    kept.append(c)
            run(kept, t)

        node._run = failing  # type: ignore[method-assign]


@pytest.mark.parametrize("group", sorted(CASES))
def test_a_start_whose_writes_failed_is_not_jumped_past(group: str) -> None:
    run = FailedFirstStart(0, group)
    assert run.failed_writes > 0  # c1 held the claim and tried to write its start
    assert run.result.violations == [], run.result.violations[:3]


@pytest.mark.parametrize("group", sorted(CASES))
def test_a_child_started_before_its_start_is_in_the_log_loses_records(
    monkeypatch: pytest.MonkeyPatch, group: str
) -> None:
    """The defect reintroduced: a looked-up start counts as durable at once."""
    found = Claiming.start_found

    def at_once(self: Claiming, answer: inp.StartFound) -> None:
        found(self, answer)
        held = self.ctx.held.get(answer.key)
        if held is not None:
            held.durable = True

    monkeypatch.setattr(Claiming, "start_found", at_once)
    run = FailedFirstStart(0, group)
    assert [v for v in run.result.violations if v["invariant"] == CASES[group]]
