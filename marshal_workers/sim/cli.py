"""`marshal-sim`: many seeded runs of a simulated fleet, their violations and their figures."""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import click

from marshal_workers.protocol.slicing import Ordering, Slicing
from marshal_workers.sim.invariants import INVARIANTS
from marshal_workers.sim.params import DEFAULT_FAULTS, FAULTS, SimParams
from marshal_workers.sim.scenario import RunResult, run_seed
from marshal_workers.sim.slices import SLICE_INVARIANTS


def _spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 3),
        "p95": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3),
        "max": round(ordered[-1], 3),
        "n": len(ordered),
    }


def replay(params: SimParams, seed: int) -> str:
    """The command that runs ``seed`` of ``params`` again, exactly: every parameter of the run
    (a parameter at its default is left out)."""
    defaults = SimParams()
    options = [
        ("--members", params.members, defaults.members),
        ("--groups", params.groups, defaults.groups),
        ("--partitions", params.partitions, defaults.partitions),
        ("--duration", params.duration, defaults.duration),
        ("--heartbeat-interval", params.heartbeat_interval, defaults.heartbeat_interval),
        ("--faults", ",".join(params.faults) or "none", ",".join(defaults.faults)),
        ("--fault-count", params.fault_count, defaults.fault_count),
        ("--ordering", params.ordering, defaults.ordering),
        ("--workers-per-partition", params.workers_per_partition, 1),
        ("--fail-rate", params.fail_rate, defaults.fail_rate),
        ("--operator-skips", params.operator_skips, defaults.operator_skips),
        (
            "--coordination-partitions",
            params.coordination_partitions,
            defaults.coordination_partitions,
        ),
        ("--placement", params.placement, defaults.placement),
        ("--span", params.span, defaults.span),
    ]
    given = "".join(f" {name} {value}" for name, value, default in options if value != default)
    return f"marshal-sim --seed {seed}{given}"


def summarize(results: list[RunResult], params: SimParams, seconds: float) -> dict[str, Any]:
    """The JSON summary of a batch of runs."""
    sliced = params.ordering != Ordering.PARTITION.value
    violations = [
        {
            "seed": r.seed,
            **v,
            "replay": replay(params, r.seed),
            "trace": r.trace,
        }
        for r in results
        for v in r.violations
    ]
    return {
        "seeds": len(results),
        "violations": violations,
        "invariants": list(INVARIANTS) + (list(SLICE_INVARIANTS) if sliced else []),
        "convergence_s": {
            "cold_start": _spread([r.cold_start_s for r in results if r.cold_start_s is not None]),
            "after_fault": _spread([x for r in results for x in r.recoveries_s]),
            "bound_after_last_fault": params.settle,
        },
        "params": {
            "members": params.members,
            "groups": params.groups,
            "partitions": params.partitions,
            "duration_s": params.duration,
            "heartbeat_interval_s": params.heartbeat_interval,
            "faults": list(params.faults),
            "fault_count": params.fault_count,
            "fail_rate": params.fail_rate,
            "operator_skips": params.operator_skips,
            # (shown when not the default, as the ordering's)
            **(
                {"coordination_partitions": params.coordination_partitions}
                if params.coordination_partitions != SimParams().coordination_partitions
                else {}
            ),
            **(
                {"placement": params.placement, "span": params.span}
                if params.placement != "spread"
                else {}
            ),
            **(
                {"ordering": params.ordering, "workers_per_partition": params.workers_per_partition}
                if sliced
                else {}
            ),
        },
        "liveness_checked": sum(1 for r in results if r.liveness_checked),
        # in how many runs each invariant was evaluated on the run's data (AMO's need an AMO
        # group, ALO's an ALO group; liveness needs the run's fault-free settle)
        "checked": {name: sum(1 for r in results if name in r.checked) for name in INVARIANTS},
        "coordination_records": sum(r.records for r in results),
        # coordination records a member reads and folds per second of virtual time, the mean
        # over members and runs: what the log costs each member
        "member_reads_per_s": round(
            sum(r.member_reads_per_s for r in results) / len(results) if results else 0.0, 1
        ),
        "member_reads_per_s_max": round(
            max((r.member_reads_per_s_max for r in results), default=0.0), 1
        ),
        "records_handled": sum(r.handled for r in results),
        "wall_seconds": round(seconds, 2),
    }


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--seeds", default=20, show_default=True, help="How many seeds to run (0..N-1).")
@click.option("--seed", type=int, default=None, help="Replay one seed exactly (prints its trace).")
@click.option("--first-seed", default=0, show_default=True, help="The first of --seeds.")
@click.option("--members", default=6, show_default=True, help="Members across all groups.")
@click.option("--groups", default=2, show_default=True, help="Groups on one coordination log.")
@click.option("--partitions", default=8, show_default=True, help="Data partitions per group.")
@click.option("--duration", default=30.0, show_default=True, help="Virtual seconds per run.")
@click.option("--heartbeat-interval", default=1.0, show_default=True, help="HB, seconds.")
@click.option(
    "--faults",
    default=",".join(DEFAULT_FAULTS),
    show_default=True,
    help=f"Comma list of: {', '.join(FAULTS)} (or 'none').",
)
@click.option("--fault-count", default=3, show_default=True, help="Timed faults per run.")
@click.option(
    "--ordering",
    type=click.Choice([o.value for o in Ordering]),
    default=Ordering.PARTITION.value,
    show_default=True,
    help="What a claim covers: a whole partition, or a key or offset slice of one.",
)
@click.option(
    "--workers-per-partition",
    default=1,
    show_default=True,
    help="Slices per data partition (ordering key or unordered), each claimed like one.",
)
@click.option(
    "--fail-rate",
    default=0.02,
    show_default=True,
    help="With `failures`: the share of coordination appends that fail (half land anyway).",
)
@click.option(
    "--operator-skips",
    default=0.0,
    show_default=True,
    help="With `poison`: the share of operators' decisions that skip the record (else retry).",
)
@click.option(
    "--coordination-partitions",
    default=SimParams().coordination_partitions,
    show_default=True,
    help="Partitions of the coordination log.",
)
@click.option(
    "--placement",
    type=click.Choice(["spread", "placed"]),
    default="spread",
    show_default=True,
    help="Each group's claims over every coordination partition, or in a window from its home.",
)
@click.option(
    "--span", default=1, show_default=True, help="With placed: the window's partitions per group."
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Seeds run at once, each in a process of its own [default: the CPUs it may use]. The "
    "results, and their order, are those of one at a time: a seed's run depends on its seed "
    "alone.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def main(
    seeds: int,
    seed: int | None,
    first_seed: int,
    members: int,
    groups: int,
    partitions: int,
    duration: float,
    heartbeat_interval: float,
    faults: str,
    fault_count: int,
    ordering: str,
    workers_per_partition: int,
    fail_rate: float,
    operator_skips: float,
    coordination_partitions: int,
    placement: str,
    span: int,
    jobs: int | None,
    as_json: bool,
) -> None:
    """Run a fleet of real member cores in virtual time against an in-memory coordination log,
    with faults, and check the invariants at every run. Exit 1 if any is violated."""
    chosen = tuple(f.strip() for f in faults.split(",") if f.strip() and f.strip() != "none")
    unknown = [f for f in chosen if f not in FAULTS]
    if unknown:
        raise click.UsageError(f"unknown fault(s) {', '.join(unknown)}; known: {', '.join(FAULTS)}")
    if members < groups or groups < 1 or partitions < 1 or duration <= 0:
        raise click.UsageError("need members >= groups >= 1, partitions >= 1, duration > 0")
    try:
        Slicing(Ordering(ordering), workers_per_partition)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if not 0 <= fail_rate < 1:
        raise click.UsageError("need 0 <= --fail-rate < 1")
    if not 0 <= operator_skips <= 1:
        raise click.UsageError("need 0 <= --operator-skips <= 1")
    base = SimParams(
        members=members,
        groups=groups,
        partitions=partitions,
        duration=duration,
        heartbeat_interval=heartbeat_interval,
        faults=chosen,
        fault_count=fault_count,
        ordering=ordering,
        workers_per_partition=workers_per_partition,
        fail_rate=fail_rate,
        operator_skips=operator_skips,
        coordination_partitions=coordination_partitions,
        placement=placement,
        span=span,
    )
    numbers = [seed] if seed is not None else list(range(first_seed, first_seed + seeds))
    started = time.monotonic()
    results = []
    runs = [SimParams(**{**_fields(base), "seed": number}) for number in numbers]
    for number, result in zip(numbers, _run_all(runs, jobs), strict=True):
        results.append(result)
        if not as_json:
            status = "ok" if not result.violations else f"{len(result.violations)} VIOLATION(S)"
            cold = f"{result.cold_start_s:.2f}s" if result.cold_start_s is not None else "never"
            click.echo(f"seed {number}: {status}; fair share after {cold}", err=True)
    summary = summarize(results, base, time.monotonic() - started)
    if as_json:
        click.echo(json.dumps(summary, indent=None))
    else:
        for v in summary["violations"]:
            click.echo(f"seed {v['seed']}: {v['invariant']}: {v['detail']} ({v['replay']})")
            if seed is not None:
                for line in v["trace"]:
                    click.echo(f"    {line}")
        short = {n: k for n, k in summary["checked"].items() if k < summary["seeds"]}
        click.echo(
            f"{summary['seeds']} seeds, {len(summary['violations'])} violations, "
            f"cold start p50 {(summary['convergence_s']['cold_start'] or {}).get('p50')}s; "
            + (
                "every invariant checked in every run"
                if not short
                else "checked in fewer runs: " + ", ".join(f"{n} {k}" for n, k in short.items())
            )
        )
    sys.exit(1 if summary["violations"] else 0)


def _run_all(runs: list[SimParams], jobs: int | None) -> Iterator[RunResult]:
    """Each run's result, in order: one at a time here, or ``jobs`` (the CPUs) at once in
    processes of their own (each seed's run depends on its parameters alone)."""
    wanted = min(len(runs), jobs or usable_cpus())
    if wanted <= 1:
        yield from map(run_seed, runs)
        return
    pool = ProcessPoolExecutor(wanted, initializer=_dies_on_ctrl_c)
    try:
        yield from pool.map(run_seed, runs)
    except BaseException:  # Ctrl-C (or a failed run): the queued seeds are not run first
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def _dies_on_ctrl_c() -> None:
    """A worker's start: Ctrl-C (SIGINT to the terminal's process group) ends it at once, not
    its seed only, after which it would run the seed already queued for it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity: a container pinned to one CPU of a
    large host has one), else the machine's."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # (no affinity outside Linux)
        return os.cpu_count() or 1


def _fields(params: SimParams) -> dict[str, Any]:
    return {name: getattr(params, name) for name in params.__dataclass_fields__}
