"""A fresh simulator sweep: every fault mix of `make sim`, with `stall` added where it is missing,
on seeds nobody has run yet.

    .venv/bin/python bench/sim_sweep.py [--first 1100000] [--seeds 30] [--rows 0-24] [--jobs 2]

Reads the ``marshal-sim`` lines of the Makefile's ``sim`` target (so the sweep follows the mixes
as they are added), drops each line's ``--seeds`` and gives row ``r`` the seeds ``first + 1000·r``
onwards (a third as many for the 30-member fleet), then adds the every-fault mix with partition
ordering, the three failing-write mixes at a fail rate of 0.3 and a review's mix (twins, shared
client ids, restarts, partitions, compaction, latencies, kills) as the last rows. Each row runs
in its own ``marshal-sim --json``; ``--jobs`` rows at a time. Prints one line per row (its
arguments, seeds, violations and each violation's replay line), then the totals; exits 1 if
any run violated an invariant. A sweep on the final code is how docs/simulator.md's sweeps were
made: pick a ``--first`` no earlier sweep used (the sweeps so far are listed there).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXTRA = [
    "--faults {every} --fault-count 6",
    "--faults failures,read-latency,stall --fail-rate 0.3 --fault-count 8",
    "--faults failures,read-latency,kill,stall --fail-rate 0.3 --fault-count 8",
    "--faults failures,stall,kill --fail-rate 0.3 --fault-count 8",
    "--faults twins,shared-ids,restart,partitions,compaction,latency,read-latency,kill"
    " --fault-count 6",
]


def mixes() -> list[str]:
    """Each row's arguments: the Makefile's ``sim`` lines, stall added, then `EXTRA`."""
    text = (ROOT / "Makefile").read_text()
    every = re.search(r"^EVERY_FAULT := (\S+)", text, re.M)
    if every is None:
        raise SystemExit("bench/sim_sweep.py: no EVERY_FAULT in the Makefile")
    recipe = text.split("\nsim:", 1)[1].split("\n\n", 1)[0]
    lines = [ln.split("marshal-sim", 1)[1] for ln in recipe.splitlines() if "marshal-sim" in ln]
    rows = []
    for line in lines + EXTRA:
        args = re.sub(r"--seeds \d+", "", line).replace("$(EVERY_FAULT)", every[1])
        args = args.replace("{every}", every[1]).strip()
        faults = re.search(r"--faults (\S+)", args)
        if faults and "stall" not in faults[1].split(","):
            args = args.replace(faults[0], f"--faults {faults[1]},stall")
        rows.append(args)
    return rows


def run_row(row: int, args: str, first: int, seeds: int) -> tuple[int, str, int, list[str]]:
    """One row's ``marshal-sim --json``: (row, args, seeds run, replay lines of violations)."""
    n = max(1, seeds // 3) if "--members 30" in args else seeds
    start = first + 1000 * row
    cmd = [sys.executable, "-m", "marshal_workers.sim", "--json", "--jobs", "1", "--seeds", str(n)]
    cmd += ["--first-seed", str(start), *args.split()]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    try:
        summary = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return row, args, 0, [f"marshal-sim failed: {out.stderr.strip()[-300:]}"]
    found = [f"{v['invariant']}: {v['replay']}" for v in summary["violations"]]
    return row, f"--first-seed {start} {args}", summary["seeds"], found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--first", type=int, default=1_400_000, help="row r from first + 1000*r")
    parser.add_argument("--seeds", type=int, default=30, help="seeds per row")
    parser.add_argument("--rows", default="", help="a range such as 0-12 (default: every row)")
    parser.add_argument("--jobs", type=int, default=2, help="rows run at a time")
    opts = parser.parse_args()
    rows = list(enumerate(mixes()))
    if opts.rows:
        low, _, high = opts.rows.partition("-")
        rows = [(r, a) for r, a in rows if int(low) <= r <= int(high or low)]
    total = bad = 0
    with ThreadPoolExecutor(max_workers=opts.jobs) as pool:
        futures = [pool.submit(run_row, r, a, opts.first, opts.seeds) for r, a in rows]
        for future in futures:
            row, args, seeds, found = future.result()
            total += seeds
            bad += len(found)
            print(f"row {row:2d}: {seeds} seeds, {len(found)} violations: {args}", flush=True)
            for line in found:
                print(f"    {line}", flush=True)
    print(f"{len(rows)} rows, {total} fleets, {bad} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
