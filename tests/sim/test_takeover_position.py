"""A takeover resumes at the log's position, not past it (`marshal-sim` seed 403004 of the
fourteen-fault mix without the eager cleaner).

Two instances of one client (`twins`, `shared-ids`) met a partition the `partitions` fault had
just added. The first won the claim and looked its start up (100, the group starts at
`latest`); the second saw the claim with no position yet, looked up in turn (106, records had
come meanwhile) and wrote its takeover at 106. The first instance's heartbeat at 100 landed
between: it made 100 the claim's position and started a child there, killed as the takeover
won. The fold let the takeover move the position forward to 106, so 100..105 were handed to
nobody and reported lost by nobody. A takeover now keeps the log's position when there is
one (its own offset counts only when the claim has none)."""

from __future__ import annotations

from marshal_workers.sim.params import SimParams
from marshal_workers.sim.scenario import run_seed

FOURTEEN = (
    *("kill", "freeze", "stall", "restart", "twins", "compaction", "latency", "clock"),
    *("failures", "pause", "partitions", "shared-ids", "poison", "forgery"),
)


def test_a_takeover_with_a_looked_up_start_resumes_at_the_logs_position() -> None:
    """Seed 403004: no record of tg1/9 is passed over by the takeover."""
    result = run_seed(SimParams(seed=403004, faults=FOURTEEN, fault_count=6))
    assert result.violations == []
