"""An AMO holder that starts at a compacted log's estimate reports what it may pass over
(`marshal-sim` seed 309022 of ``read-latency,clock-jumps,kill,freeze,restart,twins,compaction,
pause,poison,stall``, seed 503039 of the unordered/4 every-fault mix, seed 416058 of the key/3
one).

A holder was replaced by a new instance of its client (a restart). The old instance's last
reservation, written inside its lease, landed after the takeover: the whole log refuses it,
and the new instance went on from the position below it and released there. A member that
joined on the compacted log folded the claim as uncertain, whose position is the largest
offset seen (a reader of the compacted log cannot tell a refused reservation from a valid
one: the takeover that retired its writer may be erased, and an instance retired by a
heartbeat it cannot verify may still hold the claim, so taking less would hand records out
twice). It won the claim and started at the refused reservation's end, past records nobody
handled and nobody reported. It now reports them as possibly lost: from the position last
reported handled (the newest heartbeat or release) to the estimate."""

from __future__ import annotations

from marshal_workers.sim.params import SimParams
from marshal_workers.sim.scenario import run_seed

EVERY = (
    *("kill", "freeze", "stall", "restart", "twins", "compaction", "eager-compaction"),
    *("latency", "clock", "failures", "pause", "partitions", "shared-ids", "poison", "forgery"),
)
NINE = (
    *("read-latency", "clock-jumps", "kill", "freeze", "restart", "twins", "compaction"),
    *("pause", "poison", "stall"),
)


def test_a_start_at_a_compacted_estimate_reports_what_it_passes_over() -> None:
    """Seed 309022: tg1/2 and tg1/3 start one record past the position last handled."""
    assert run_seed(SimParams(seed=309022, faults=NINE, fault_count=6)).violations == []


def test_a_slice_started_at_a_compacted_estimate_reports_what_it_passes_over() -> None:
    """Seed 503039: three unordered slices start past records nobody handled."""
    params = SimParams(
        seed=503039,
        faults=EVERY,
        fault_count=6,
        ordering="unordered",
        workers_per_partition=4,
    )
    assert run_seed(params).violations == []


def test_a_key_slice_started_at_a_compacted_estimate_reports_what_it_passes_over() -> None:
    """Seed 416058: four key slices start past records nobody handled."""
    params = SimParams(
        seed=416058, faults=EVERY, fault_count=6, ordering="key", workers_per_partition=3
    )
    assert run_seed(params).violations == []
