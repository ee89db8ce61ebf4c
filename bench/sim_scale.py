"""How the design scales, measured in marshal-sim (virtual time) and with the real fold.

For each fleet (members, partitions across groups, HB) it runs the simulator with no faults
until the fleet holds its fair share (cold start), then kills 10% of the members and measures
the time until every partition is handled and fairly shared again. It counts coordination
records per second of virtual time and the claims the log refused around the failover (claim
storms), and measures the fold's CPU per member per second: the real fold (plain decode)
over the run's own coordination log, scaled to the records per second. Fleets too large to
simulate in one process here are computed from the same per-record fold cost (marked).

    .venv/bin/python bench/sim_scale.py [--quick] [--json]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the small fleets only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
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
