"""The named residual of a host stopped with its clocks (docs/design.md, residual risks): a
member stopped (SIGSTOP) across its host's pause, or right after the resume before it ran once,
leaves its children working on the held lease clock with nobody to end them. marshal-sim does
not simulate it: an on-host fault waits for the member's first turn after the resume."""

from __future__ import annotations

from marshal_workers.sim.params import SimParams
from marshal_workers.sim.scenario import run_seed

FREEZE_RIGHT_AFTER_A_STALL = SimParams(
    seed=91036, members=6, groups=2, faults=("freeze", "compaction", "stall"), fault_count=10
)


def test_a_member_is_not_frozen_between_its_hosts_resume_and_its_first_turn() -> None:
    """Seed 91036: new7's host resumed at 17.30 s (clock held 2 s) and a freeze at 17.35 s
    stopped it before its first turn; its child handled tg0/0 until 18.2 s beside new9, which
    had won the claim at 17.0 s (no_overlap). The freeze now picks another member."""
    assert run_seed(FREEZE_RIGHT_AFTER_A_STALL).violations == []
