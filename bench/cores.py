"""Benchmark: what this machine's cores give processes that share nothing, right now.

    .venv/bin/python bench/cores.py [--rounds 5] [--seconds 3] [--processes 2]

The ratios of the CPU-bound goals (`bench/peers.py --settings cpu`: ALO against one plain loop,
the limit 2.0x on two cores) assume that two processes get twice what one gets. On a virtual
machine they may not: its two vCPUs can be two threads of one physical core, or share it with
other guests, and which, the guest cannot see. Each round runs the CPU-bound handler's loop
(`bench/handlers.py`'s `burn`, 20,000 turns a call) for ``--seconds`` in one process alone, then in
``--processes`` processes at once, and prints how many calls each made and the ratio: about
what a runner that spreads partitions over processes could reach in that moment (one round is
noisy: the machine's speed moves between its two halves too, and a round can come out above
2.0x). Each round measures both halves again, so a change of the machine's speed shows as a
change of ratio between rounds.

Prints figures; asserts nothing (these machines are noisy); exits 0 (1 if a loop process
failed).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from handlers import burn

TURNS = 20_000  # a call's turns of `burn` (0.6-0.7 ms here)


def _calls(seconds: float, out: Synchronized[int]) -> None:
    """Call `burn` for ``seconds`` of wall time; the number of calls into ``out``."""
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        burn(TURNS)
        calls += 1
    out.value = calls


def measure(processes: int, seconds: float) -> int:
    """The calls ``processes`` processes made in ``seconds``, all together."""
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters, as the plain loops are
    outs = [ctx.Value("q", 0) for _ in range(processes)]
    procs = [ctx.Process(target=_calls, args=(seconds, out)) for out in outs]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    failed = [p.exitcode for p in procs if p.exitcode != 0]
    if failed:  # a process that made no calls would pass for a slow one
        raise RuntimeError(f"{len(failed)} of {processes} loop processes failed: exit {failed}")
    return sum(int(out.value) for out in outs)


def one_round(seconds: float, processes: int) -> tuple[int, int, float]:
    """One round: the calls one process made alone in ``seconds``, then those ``processes``
    processes made together, and the ratio of the second to the first."""
    one = measure(1, seconds)
    many = measure(processes, seconds)
    return one, many, many / one if one else 0.0


def scaling(seconds: float, processes: int = 2) -> float:
    """`one_round`'s ratio (`bench/peers.py` prints one before and one after its rounds)."""
    return one_round(seconds, processes)[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="at least 1")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the lines")
    args = ap.parse_args()
    if args.rounds < 1 or args.processes < 1 or args.seconds <= 0:
        ap.error("--rounds and --processes must be at least 1, --seconds above 0")
    ratios: list[float] = []
    rounds = []
    for r in range(1, args.rounds + 1):
        one, many, ratio = one_round(args.seconds, args.processes)
        ratios.append(ratio)
        rounds.append({"round": r, "one": one, "together": many, "ratio": round(ratio, 3)})
        if not args.json:
            print(
                f"round {r}: 1 process {one} calls, {args.processes} processes {many} calls: "
                f"{ratio:.2f}x",
                flush=True,
            )
    summary = {
        "processes": args.processes,
        "seconds": args.seconds,
        "rounds": rounds,
        "median_ratio": round(statistics.median(ratios), 3),
        "min_ratio": round(min(ratios), 3),
        "max_ratio": round(max(ratios), 3),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"{args.processes} processes against 1, {args.rounds} rounds of {args.seconds:g} s: "
            f"median {summary['median_ratio']:.2f}x (from {summary['min_ratio']:.2f}x to "
            f"{summary['max_ratio']:.2f}x)"
        )


if __name__ == "__main__":
    main()
