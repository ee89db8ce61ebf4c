"""How the design scales, measured in marshal-sim (virtual time) and with the real fold.

For each fleet (members, partitions across groups, HB) it runs the simulator with no faults
until the fleet holds its fair share (cold start), then kills 10% of the members and measures
the time until every partition is handled and fairly shared again. It counts coordination
records per second of virtual time and the claims the log refused around the failover (claim
storms), and measures the fold's CPU per member per second: the real fold (plain decode)
over the run's own coordination log, scaled to the records per second. Fleets too large to
simulate in one process here are computed from the same per-record fold cost (marked).

    .venv/bin/python bench/sim_scale.py [--quick] [--json]

``--placement M`` compares, in one run, today's placement (every group spread over every
coordination partition) with placed groups (each on its home, span 1) for M members in M/10
groups of 10 members and 100 data partitions each, HB = 10 s, on 256 coordination partitions,
and lone groups (an ALO and an AMO group of 10 members, each alone on its partition) as the
reference: the records each member reads
and folds per second of virtual time (mean and max), its folded state's memory (pympler, 20
members sampled at the end), cold start, recovery after 10% of the members are killed, and the
wall and CPU seconds each run took.

    .venv/bin/python bench/sim_scale.py --placement 1000
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from typing import Any

from marshal_workers.protocol import events as ev
from marshal_workers.protocol import rationalizer
from marshal_workers.protocol import wire as protocol
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.sim.params import SimParams
from marshal_workers.sim.scenario import Fleet, use_shared_decode


@dataclass(frozen=True)
class Case:
    members: int
    partitions: int  # in total, across groups
    hb: float
    simulate: bool = True

    @property
    def groups(self) -> int:
        return max(1, self.members // 10)


def fold_cost_per_record(records: list[protocol.CoordRecord], hb_ms: int, parts: int) -> float:
    """Seconds of CPU per record for a reader folding ``records`` (plain decode)."""
    worlds = {p: World(RationalizerConfig(hb_ms, num_partitions=parts), p) for p in range(parts)}
    shared = rationalizer.decode
    rationalizer.decode = protocol.decode  # a member decodes each record itself
    try:
        started = time.process_time()
        for record in records:
            fold(worlds[record.partition], record)
        return (time.process_time() - started) / max(1, len(records))
    finally:
        rationalizer.decode = shared


def simulate(case: Case, seed: int = 1) -> dict[str, Any]:
    """Cold start, a 10% kill, and the counts, for one simulated fleet."""
    per_group = max(1, case.partitions // case.groups)
    params = SimParams(
        seed=seed,
        members=case.members,
        groups=case.groups,
        partitions=per_group,
        heartbeat_interval=case.hb,
        faults=(),
        duration=40 * case.hb + 20,
        dt=max(0.05, case.hb / 20),
        rate=1.0,
        backlog=10,
    )
    use_shared_decode()  # hundreds of members in one process share one decoding per record
    fleet = Fleet(params)
    fleet.add_members()
    step, cold, killed_at, recovered = 0, None, None, None
    limit = int(params.duration / params.dt)
    while step <= limit:
        t = fleet.advance(step)
        step += 1
        if step % 5:
            continue
        ok = fleet.converged()
        if cold is None and ok and t > 1.0:
            cold = t - 1.0
            killed_at = t
            victims = fleet.rng.sample(fleet.nodes, max(1, case.members // 10))
            for node in victims:
                node.kill(t)
            fleet.fault_windows.append((t, t))
        elif killed_at is not None and t > killed_at and ok:
            recovered = t - killed_at
            break
    end = fleet.t
    records = [r for part in fleet.log.shadow for r in part]
    refused = 0
    if killed_at is not None:
        parts = params.coordination_partitions
        rcfg = RationalizerConfig(int(case.hb * 1000), num_partitions=parts)
        worlds = {p: World(rcfg, p) for p in range(parts)}
        for part in fleet.log.shadow:
            for r in part:
                e = fold(worlds[r.partition], r)
                if isinstance(e, ev.ClaimRejected) and r.timestamp_ms >= killed_at * 1000:
                    refused += 1
    rate = len(records) / end if end else 0.0
    return {
        "cold_start_s": cold,
        "recovery_after_10pct_kill_s": recovered,
        "coordination_records_per_s": round(rate, 1),
        "refused_claims_per_failover": refused,
        "records": records,
    }


def placement_run(members: int, placement: str, coordination: int, seed: int = 1) -> dict[str, Any]:
    """One fleet of ``members`` in groups of 10 (100 data partitions each, HB 10 s), spread or
    placed: cold start, a 10% kill and recovery, reads per member, memory, cost."""
    from pympler import asizeof  # noqa: PLC0415 (the bench extra)

    hb = 10.0
    params = SimParams(seed=seed, members=members, groups=max(1, members // 10), partitions=100,
                       heartbeat_interval=hb, faults=(), duration=40 * hb + 20, dt=hb / 20,
                       rate=1.0, backlog=10, coordination_partitions=coordination,
                       placement=placement)  # fmt: skip
    use_shared_decode()
    wall, cpu = time.monotonic(), time.process_time()
    fleet = Fleet(params)
    fleet.add_members()
    step, cold, killed_at, recovered = 0, None, None, None
    limit = int(params.duration / params.dt)
    while step <= limit:
        t = fleet.advance(step)
        step += 1
        if step % 5:
            continue
        ok = fleet.converged()
        if cold is None and ok and t > 1.0:
            cold, killed_at = t - 1.0, t
            for node in fleet.rng.sample(fleet.nodes, max(1, members // 10)):
                node.kill(t)
            fleet.fault_windows.append((t, t))
        elif killed_at is not None and t > killed_at and ok:
            recovered = t - killed_at
            break
    rates = sorted(r for n in fleet.nodes if (r := n.reads_per_s(fleet.t)) is not None)
    live = [n for n in fleet.nodes if n.alive and n.started]
    sample = fleet.rng.sample(live, min(20, len(live)))
    sizes = sorted(asizeof.asizeof(n.member.worlds) for n in sample)
    return {
        "placement": placement,
        "members": members,
        "groups": params.groups,
        "coordination_partitions": coordination,
        "reads_per_s_mean": round(sum(rates) / len(rates), 1),
        "reads_per_s_max": round(rates[-1], 1),
        "followed_mean": round(sum(len(n.followed) for n in fleet.nodes) / len(fleet.nodes), 2),
        "memory_kb_p50": round(sizes[len(sizes) // 2] / 1024, 1),
        "memory_kb_max": round(sizes[-1] / 1024, 1),
        "cold_start_s": cold,
        "recovery_after_10pct_kill_s": recovered,
        "log_records_per_s": round(sum(len(x) for x in fleet.log.shadow) / fleet.t, 1),
        "virtual_s": round(fleet.t, 1),
        "wall_s": round(time.monotonic() - wall, 1),
        "cpu_s": round(time.process_time() - cpu, 1),
    }


def compare_placements(members: int, as_json: bool, coordination: int = 256) -> None:
    """Today's placement beside placed groups, and a lone group, printed side by side."""
    # one ALO and one AMO group of 10, each alone on its partition (g0 and g1 have different
    # homes): the reference, with the same mix of modes as the fleets'; run first, the longest
    # (spread) last, each row printed as it is done
    lone = {**placement_run(20, "placed", coordination), "placement": "lone"}
    _print_placement(lone, lone["reads_per_s_mean"], as_json)
    for placement in ("placed", "spread"):
        _print_placement(
            placement_run(members, placement, coordination), lone["reads_per_s_mean"], as_json
        )


def _print_placement(row: dict[str, Any], lone: float, as_json: bool) -> None:
    row["reads_vs_lone_group"] = round(row["reads_per_s_mean"] / lone, 2) if lone else None
    if as_json:
        print(json.dumps(row), flush=True)
        return
    print(
        f"{row['placement']:>7} {row['members']:>5} members {row['groups']:>4} groups "
        f"N={row['coordination_partitions']}: reads/s per member mean "
        f"{row['reads_per_s_mean']} max {row['reads_per_s_max']} "
        f"({row['reads_vs_lone_group']}x a lone group's), follows "
        f"{row['followed_mean']} partitions, memory p50 {row['memory_kb_p50']} KB max "
        f"{row['memory_kb_max']} KB, cold start {row['cold_start_s']}s, recovery "
        f"{row['recovery_after_10pct_kill_s']}s, log {row['log_records_per_s']} "
        f"records/s, {row['virtual_s']} virtual s in {row['wall_s']} s wall "
        f"{row['cpu_s']} s CPU",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the small fleets only")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--placement", type=int, metavar="MEMBERS", default=None,
                        help="compare spread and placed groups for MEMBERS members")  # fmt: skip
    args = parser.parse_args()
    if args.placement is not None:
        compare_placements(args.placement, args.json)
        return
    cases = [Case(10, 100, 1.0), Case(10, 100, 10.0), Case(100, 1_000, 10.0)]
    if not args.quick:
        cases += [Case(100, 1_000, 1.0)]
    cases += [
        Case(1_000, 10_000, 10.0, simulate=False),
        Case(1_000, 100_000, 10.0, simulate=False),
        Case(1_000, 100_000, 1.0, simulate=False),
    ]
    cost: float | None = None
    rows = []
    for case in cases:
        row: dict[str, Any] = {"members": case.members, "partitions": case.partitions,
                               "hb_s": case.hb, "simulated": case.simulate}  # fmt: skip
        if case.simulate:
            started = time.monotonic()
            found = simulate(case)
            records = found.pop("records")
            measured = fold_cost_per_record(records, int(case.hb * 1000), 4)
            cost = measured if cost is None else min(cost, measured)
            row.update(found)
            row["fold_us_per_record"] = round(measured * 1e6, 2)
            row["wall_s"] = round(time.monotonic() - started, 1)
        else:
            # every claim (data and member) heartbeats every HB/2
            claims = case.partitions + case.members
            row["coordination_records_per_s"] = round(2 * claims / case.hb)
        per_s = row["coordination_records_per_s"]
        row["fold_cpu_per_member_s_per_s"] = round(per_s * (cost or 3e-6), 4)
        rows.append(row)
        print(json.dumps(row) if args.json else _line(row), flush=True)


def _line(row: dict[str, Any]) -> str:
    sim = "sim" if row["simulated"] else "computed"
    cold = row.get("cold_start_s")
    rec = row.get("recovery_after_10pct_kill_s")
    return (
        f"{row['members']:>5} members {row['partitions']:>7} partitions HB {row['hb_s']:>4}s "
        f"[{sim}]: cold start {cold if cold is None else round(cold, 2)}s, "
        f"recovery {rec if rec is None else round(rec, 2)}s, "
        f"{row['coordination_records_per_s']} records/s, "
        f"refused per failover {row.get('refused_claims_per_failover', '-')}, "
        f"fold CPU {row['fold_cpu_per_member_s_per_s']} s/s per member"
    )


if __name__ == "__main__":
    main()
