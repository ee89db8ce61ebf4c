"""The simulator without reintroduced defects: the fault mixes the defect tests use find
nothing in the same seeds, a seed replays exactly, and the command's JSON has its fields."""

from __future__ import annotations

import json
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any

import pytest
from click.testing import CliRunner

from marshal_workers.sim import cli as sim_cli
from marshal_workers.sim.cli import main
from marshal_workers.sim.invariants import INVARIANTS
from marshal_workers.sim.params import SimParams
from marshal_workers.sim.scenario import run_seed
from tests.sim.conftest import violations
from tests.sim.test_defects import SEEDS

MIXES = [
    SimParams(members=4, groups=2, faults=("shared-ids", "kill"), fault_count=3),
    SimParams(members=4, groups=1, faults=("compaction",), fault_count=2),
    SimParams(members=4, groups=1, faults=("clock", "compaction"), fault_count=2),
    SimParams(members=2, groups=2, faults=("twins",), fault_count=2),
    SimParams(members=2, groups=1, faults=("twins",), fault_count=2),
    SimParams(members=2, groups=1, faults=("kill",), fault_count=2),
    SimParams(members=6, groups=2, faults=("twins",), fault_count=3),
    SimParams(members=4, groups=1, faults=("poison",), fault_count=3),
    SimParams(members=4, groups=1, faults=("poison",), fault_count=3, duration=60),
    SimParams(members=4, groups=2, faults=("restart", "pause"), fault_count=3),
    SimParams(faults=("poison", "compaction"), fault_count=6),
    SimParams(
        members=4,
        groups=1,
        partitions=4,
        faults=("poison", "compaction"),
        fault_count=10,
        duration=60,
    ),
    SimParams(members=4, groups=1, faults=("poison", "failures"), fault_count=6, fail_rate=0.2),
    # an AMO record whose handler raises or hangs: lost, reported as the handler's, not tried again
    SimParams(members=4, groups=2, faults=("amo-poison",), fault_count=3),
    # the mixes of the sweep that found positions erased by the cleaner
    SimParams(members=6, groups=2, faults=("freeze", "compaction"), fault_count=10),
    SimParams(faults=("twins", "pause", "freeze", "compaction", "kill"), fault_count=8),
    # a cleaner below the safe window (a topic altered while the fleet runs)
    SimParams(members=6, groups=2, faults=("freeze", "eager-compaction"), fault_count=10),
    SimParams(members=8, groups=4, faults=("freeze", "eager-compaction"), fault_count=10),
    # views of the log that lag, broker clocks that jump (within the margin)
    SimParams(
        members=4,
        groups=2,
        faults=("read-latency", "clock-jumps", "freeze", "twins"),
        fault_count=4,
    ),
    # a host stopped with its lease clock held (a paused VM), and the cleaners
    SimParams(faults=("stall", "eager-compaction"), fault_count=10),
    SimParams(
        faults=("stall", "compaction"),
        fault_count=10,
        ordering="unordered",
        workers_per_partition=4,
    ),
    # a host's reader of a partition that fails: its slice children end, each restarted
    SimParams(faults=("feed-loss",), fault_count=3, ordering="unordered", workers_per_partition=4),
    # a member started with the other mode (refused at its start), and kills
    SimParams(faults=("mixed-modes", "kill"), fault_count=6),
    # forged takeovers of members' announcements (each goes dormant, then claims again)
    SimParams(members=4, groups=2, faults=("forged-takeover",), fault_count=2),
    SimParams(members=4, groups=1, faults=("twins", "freeze", "stall"), fault_count=6),
    # whole process trees stopped past their leases, then continued
    SimParams(faults=("tree-stop",), fault_count=4),
]


# The seeds of each mix run here: 3 in `make test` (every mix, kept within the run's time), all
# SEEDS in `make test-sim-mixes` (MARSHAL_TEST_MIX_SEEDS=20: 5 minutes on 2 cores). Each defect
# test also runs the seed that found its defect again without it (`test_defects.found`).
MIX_SEEDS = int(os.environ.get("MARSHAL_TEST_MIX_SEEDS", "3"))


def mix_id(p: SimParams) -> str:
    return "+".join(p.faults) + f"-m{p.members}-f{p.fault_count}"


@pytest.mark.parametrize("params", MIXES, ids=mix_id)
def test_the_defect_tests_fault_mixes_find_nothing_in_the_current_core(params: SimParams) -> None:
    """What the defect tests find is the defect: the same seeds are clean without it (the
    first MIX_SEEDS of the SEEDS the defect tests search)."""
    assert violations(params, min(MIX_SEEDS, SEEDS)) == []


@pytest.mark.parametrize("seed", [29, 63])
def test_the_seeds_that_granted_records_twice_after_a_release_past_the_lease(seed: int) -> None:
    """Seeds 29 and 63 of freeze,eager-compaction with 10 faults granted AMO records twice
    while members released claims past their lease (design.md, decision 19); the scripted
    sequence is `test_stale_release.py`."""
    params = SimParams(faults=("freeze", "eager-compaction"), fault_count=10, seed=seed)
    assert run_seed(params).violations == []


def test_a_start_looked_up_for_a_claim_dropped_meanwhile_is_owed_nothing() -> None:
    """Seed 1 of a key-sliced fleet under every fault (6 faults, `test_slices`): c2 won a new
    partition's slice (AMO, reset latest), looked its start up (the watermark, 107) and, told
    to stop, dropped the claim before the answer came, with no position written and nothing
    handled. c0
    claimed it 2*HB later and started at the watermark then, 153. Nobody had started at 107:
    the checker counted 107..152 as owed and lost in no crash. A start is where a holder
    adopted the looked-up offset, not where a lookup was answered."""
    from marshal_workers.sim.params import FAULTS  # noqa: PLC0415

    params = SimParams(
        seed=1, faults=tuple(FAULTS), fault_count=6, ordering="key", workers_per_partition=3
    )
    assert run_seed(params).violations == []


def test_the_default_faults_find_nothing_in_many_seeds() -> None:
    """Every default fault, 30 seeds of 6 members in 2 groups (one ALO, one AMO); `make sim`
    runs 1,000."""
    assert violations(SimParams(), 30) == []


def test_a_seed_replays_exactly() -> None:
    """Two runs of one seed hand out the same records at the same times."""
    first, second = (run_seed(replace(SimParams(), seed=7)) for _ in range(2))
    assert (first.records, first.handled, first.recoveries_s) == (
        second.records,
        second.handled,
        second.recoveries_s,
    )


def test_json_summary_names_seeds_violations_invariants_and_convergence() -> None:
    """`marshal-sim --json` prints one object with the documented fields."""
    result = CliRunner().invoke(main, ["--seeds", "2", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["seeds"] == 2 and summary["violations"] == []
    assert summary["invariants"] == list(INVARIANTS)
    assert summary["convergence_s"]["cold_start"]["n"] == 2
    # each invariant evaluated in every run (liveness too: every run ends with a settle), but
    # retry_heeded: only a run with an operator's retry of a failing record has its data
    every = {name: 2 for name in INVARIANTS if name != "retry_heeded"}
    assert {k: v for k, v in summary["checked"].items() if k != "retry_heeded"} == every
    assert summary["liveness_checked"] == 2
    assert summary["member_reads_per_s"] > 0


def test_seeds_run_at_once_give_what_one_at_a_time_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--jobs`: seeds in processes of their own give the summary, and the per-seed lines in
    seed order, of one at a time (a seed's run depends on its seed alone; a module-level state
    shared between runs would show here). `--jobs 3` does start a pool of three."""
    pools: list[int] = []

    class CountedPool(ProcessPoolExecutor):
        def __init__(self, workers: int, **kwargs: Any) -> None:
            pools.append(workers)
            super().__init__(workers, **kwargs)

    monkeypatch.setattr(sim_cli, "ProcessPoolExecutor", CountedPool)
    args = ["--seeds", "3", "--first-seed", "40", "--faults", "kill,freeze,compaction"]
    summaries, lines = [], []
    for jobs in ("1", "3"):
        result = CliRunner().invoke(main, [*args, "--json", "--jobs", jobs])
        assert result.exit_code == 0, result.output
        summary = json.loads(result.output.splitlines()[-1])
        summary.pop("wall_seconds")
        summaries.append(summary)
        text = CliRunner().invoke(main, [*args, "--jobs", jobs]).output
        lines.append([line for line in text.splitlines() if line.startswith("seed ")])
    assert pools == [3, 3]  # (the --json run and the text run; none for --jobs 1)
    assert summaries[0] == summaries[1]
    assert lines[0] == lines[1] and [x.split(":")[0] for x in lines[0]] == [
        f"seed {n}" for n in range(40, 43)
    ]


def test_a_member_reads_the_records_of_every_group_on_its_log() -> None:
    """`member_reads_per_s` measures what the log costs a member: with today's placement
    (every group on every coordination partition) a member of one of eight groups of two reads
    about four times what a member of one of two groups of two reads (groups alternate ALO and
    AMO, whose reservations are most of the log: so two against eight, not one against four).
    The placement of groups on bounded sets of coordination partitions is to bring this to
    within 2x of a lone group's."""
    quiet = SimParams(faults=(), duration=20.0)
    few = run_seed(replace(quiet, members=4, groups=2)).member_reads_per_s
    many = run_seed(replace(quiet, members=16, groups=8)).member_reads_per_s
    assert few > 0
    assert 3.0 < many / few < 5.0


def test_an_operators_retry_is_checked_in_most_runs_of_a_poison_mix() -> None:
    """The `poison` fault has an operator retry the record in half its runs (the other half
    checks that a parked record stays parked): retry_heeded must run in many of them, or it
    could not fail."""
    params = SimParams(members=2, groups=1, faults=("poison",), fault_count=4)
    runs = [run_seed(replace(params, seed=seed)) for seed in range(10)]
    assert all(r.violations == [] for r in runs)
    assert sum("retry_heeded" in r.checked for r in runs) >= 5


def test_an_unknown_fault_is_a_usage_error() -> None:
    """One line, exit 2."""
    result = CliRunner().invoke(main, ["--faults", "meteor"])
    assert result.exit_code == 2 and "unknown fault(s) meteor" in result.output
