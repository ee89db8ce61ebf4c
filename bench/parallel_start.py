"""Benchmark: a member's start on 8 partitions and AMO with 8 children, this tree against an
older checkout (``--old PATH``), side by side in one run.

    .venv/bin/python bench/parallel_start.py [--bootstrap-servers HOST:PORT] [--rounds 3]
                                             [--records 400000] [--old PATH]

For each round and each implementation, on a fresh 8-partition topic with ``--records`` small
records spread evenly and a fresh coordination topic: (1) ``marshal-run --mode alo`` with the
trivial handler (`bench.handlers.count`): from launching the process to the first handled
record, and to the first record of *every* partition (the claims of a whole share at once, not
one per turn); (2) ``marshal-run --mode amo --batch-size 500``: records per second from the
first handled record to the last, all 8 children together (every grant is a reservation, a
fold and a committing heartbeat in the log; the new core has them in flight together).
``--old PATH`` runs the same commands with PATH first on PYTHONPATH (a checkout of an older
commit, e.g. ``git worktree add /tmp/old 1371ea5``). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from runtime import (
    BATCH,
    HANDLER,
    REPO,
    Processes,
    coordination_topic,
    create_topic,
    produce_bulk,
    read_json_files,
    tail,
    uid,
    wait_until,
)

from marshal_workers.localkafka import StartOptions, start_cluster

PARTITIONS = 8


def command(args: dict[str, str]) -> list[str]:
    """`marshal-run` as a module of whichever marshal_workers PYTHONPATH finds first."""
    argv = [x for k, v in args.items() for x in (f"--{k}", v)]
    code = "from marshal_workers.supervisor.cli import main; main()"
    return [sys.executable, "-c", code, *argv, "--log-format", "json"]


def one_run(bootstrap: str, procs: Processes, work: Path, impl: str, path: str | None,
            mode: str, records: int) -> dict[str, Any]:  # fmt: skip
    topic = create_topic(bootstrap, PARTITIONS)
    produce_bulk(bootstrap, topic, records, PARTITIONS)
    out = work / f"{impl}-{mode}-{uid()}"
    log = work / f"{out.name}.log"
    per_child = records // PARTITIONS
    pythonpath = os.pathsep.join(p for p in (path, str(REPO)) if p)
    env = {**os.environ, "PYTHONPATH": pythonpath, "BENCH_OUT": str(out),
           "BENCH_TARGET": str(per_child)}  # fmt: skip
    args = {
        "handler": HANDLER,
        "mode": mode,
        "topic": topic,
        "group": f"g_{uid()}",
        "client-id": f"bench-{impl}",
        "bootstrap-servers": bootstrap,
        "coordination-topic": coordination_topic(bootstrap),
        "heartbeat-interval": "5",
        "batch-size": str(BATCH),
    }
    launched = time.time()
    proc = procs.start(command(args), log, env)
    try:
        done = wait_until(lambda: len(read_json_files(out, "last")) == PARTITIONS, 180, poll=0.1)
        if not done:
            return {"error": f"{impl} {mode}: not every child finished; log:\n{tail(log)}"}
        firsts = read_json_files(out, "first")
        lasts = read_json_files(out, "last")
        first_wall = min(r["wall"] for r in firsts)
        return {
            "first_record_s": first_wall - launched,
            "every_partition_s": max(r["wall"] for r in firsts) - launched,
            "records_per_s": records / (max(r["wall"] for r in lasts) - first_wall),
        }
    finally:
        procs.stop(proc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap-servers")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--old", help="a checkout of an older commit to compare with")
    args = ap.parse_args()
    impls: list[tuple[str, str | None]] = [("new", None)]
    if args.old:
        impls.append(("old", str(Path(args.old).resolve())))
    procs = Processes()
    with tempfile.TemporaryDirectory(prefix="marshal-bench-") as tmp:
        work = Path(tmp)
        cluster = None
        bootstrap = args.bootstrap_servers
        if bootstrap is None:
            cluster = start_cluster(StartOptions(directory=work / "kafka", nodes=1))
            bootstrap = cluster.bootstrap
        results: dict[tuple[str, str], list[dict[str, Any]]] = {}
        try:
            for r in range(args.rounds):
                for impl, path in impls:  # interleaved: each round runs both
                    for mode in ("alo", "amo"):
                        res = one_run(bootstrap, procs, work, impl, path, mode, args.records)
                        results.setdefault((impl, mode), []).append(res)
                        print(f"round {r + 1} {impl} {mode}: {res}", flush=True)
        finally:
            procs.kill_all()
            if cluster is not None:
                cluster.stop()
    print("\nmedians over rounds:")
    for (impl, mode), rows in results.items():
        ok = [x for x in rows if "error" not in x]
        if not ok:
            print(f"  {impl} {mode}: every round failed")
            continue
        med = {k: statistics.median(x[k] for x in ok) for k in ok[0]}
        print(
            f"  {impl} {mode}: launch to first record {med['first_record_s']:.2f}s, to every "
            f"partition {med['every_partition_s']:.2f}s, {med['records_per_s']:,.0f} records/s"
        )


if __name__ == "__main__":
    main()
