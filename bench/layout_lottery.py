"""Benchmark: how fast one process runs the CPU-bound handler's loop, process by process.

    .venv/bin/python bench/layout_lottery.py [--processes 24] [--concurrent-rounds 4]
                                             [--together 8] [--work-us 20 | --iters N] [--cpu C]

The CPU-bound benchmarks (`bench/peers.py --settings cpu`, `make bench-hot-cpu`) compare
processes running the same pure-Python loop (`bench.handlers.burn`). This prints how much that
loop's speed depends on the process it runs in, with nothing else running: each process times
``burn`` at the calibrated count for about 20 µs a call (best of 3 timings of 4,000 calls, CPU
time), in four kinds of process, interleaved one of each in turn:

- ``fresh``: a new interpreter (as the plain loop is), address layout and hash seed random;
- ``fixed``: a new interpreter with the address layout fixed (``setarch -R``, when there is one)
  and ``PYTHONHASHSEED=0``: the same process every time;
- ``forked``: a child of a fork server preloaded with the child's modules (as a `marshal-run`
  child is, `childlink.forkserver.PRELOAD`), forked one at a time;
- ``spawned``: a child started by multiprocessing's spawn method.

With ``--cpu`` every process is pinned to that core. Then ``--concurrent-rounds`` rounds of
``--together`` processes at once (8: as eight `marshal-run` children on a two-core host; 64: as
a hot partition's 64 slices), each starting its loop at one agreed moment once all are up, for
6 s: forked children against spawned ones, alternating.

Per kind: the median, the fastest and slowest process, and how many ran more than 1.25x the
fresh median (a "slow draw"). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import time
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.handlers import burn, calibrate  # noqa: E402
from marshal_workers.childlink.forkserver import PRELOAD  # noqa: E402

CALLS = 4000
SLOW = 1.25  # a slow draw: more than this times the fresh median


def timed(iterations: int) -> float:
    """µs of CPU per ``burn(iterations)`` call: the best of 3 timings of `CALLS` calls."""
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        for _ in range(CALLS):
            burn(iterations)
        best = min(best, (time.process_time() - t0) / CALLS * 1e6)
    return best


def _child(iterations: int, cpu: int | None, queue: Queue[float]) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    queue.put(timed(iterations))


def _busy(iterations: int, start_at: float, seconds: float, queue: Queue[float]) -> None:
    time.sleep(max(0.0, start_at - time.monotonic()))  # all start together, once all are up
    t0, calls = time.process_time(), 0
    while time.monotonic() - start_at < seconds:
        burn(iterations)
        calls += 1
    queue.put((time.process_time() - t0) / calls * 1e6)


def _in_context(context: Any, iterations: int, cpu: int | None) -> float:
    queue: Queue[float] = context.Queue()
    process = context.Process(target=_child, args=(iterations, cpu, queue))
    process.start()
    value = queue.get()
    process.join()
    return float(value)


def _fresh(iterations: int, cpu: int | None, fixed: bool) -> float:
    command = [sys.executable, __file__, "--one", str(iterations)]
    env = dict(os.environ)
    if fixed:
        env["PYTHONHASHSEED"] = "0"
        setarch = shutil.which("setarch")
        if setarch:
            command = [setarch, "-R", *command]
    if cpu is not None:
        command = ["taskset", "-c", str(cpu), *command]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return float(out.strip())


def _concurrent(context: Any, iterations: int, seconds: float, together: int) -> list[float]:
    queue: Queue[float] = context.Queue()
    start_at = time.monotonic() + 1.0 + 0.1 * together  # past the spawned ones' imports
    processes = [
        context.Process(target=_busy, args=(iterations, start_at, seconds, queue))
        for _ in range(together)
    ]
    for process in processes:
        process.start()
    values = sorted(float(queue.get()) for _ in processes)
    for process in processes:
        process.join()
    return values


def _line(kind: str, values: list[float], fresh_median: float) -> str:
    slow = sum(1 for v in values if v > SLOW * fresh_median)
    return (
        f"{kind:8s} median {statistics.median(values):5.1f} µs  fastest {min(values):5.1f}  "
        f"slowest {max(values):5.1f}  slow draws {slow}/{len(values)}  "
        f"median / fresh median {statistics.median(values) / fresh_median:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=24, help="processes of each kind")
    parser.add_argument("--work-us", type=float, default=20.0, help="µs a call (calibrated)")
    parser.add_argument("--iters", type=int, help="the loop count (default: calibrated)")
    parser.add_argument("--cpu", type=int, default=None, help="pin each process to this core")
    parser.add_argument("--concurrent-rounds", type=int, default=4)
    parser.add_argument(
        "--together", type=int, default=8, help="processes at once, in those rounds"
    )
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:  # a fresh process's own timing
        print(f"{timed(args.one):.3f}")
        return
    iterations = args.iters or calibrate(args.work_us)
    forked_context = multiprocessing.get_context("forkserver")
    forked_context.set_forkserver_preload(["bench.handlers", *PRELOAD[1:]])
    spawned_context = multiprocessing.get_context("spawn")
    print(
        f"burn({iterations}) per call, {args.processes} processes of each kind, interleaved"
        + (f", each pinned to core {args.cpu}" if args.cpu is not None else ""),
        flush=True,
    )
    kinds: dict[str, list[float]] = {"fresh": [], "fixed": [], "forked": [], "spawned": []}
    for _ in range(args.processes):
        kinds["fresh"].append(_fresh(iterations, args.cpu, fixed=False))
        kinds["fixed"].append(_fresh(iterations, args.cpu, fixed=True))
        kinds["forked"].append(_in_context(forked_context, iterations, args.cpu))
        kinds["spawned"].append(_in_context(spawned_context, iterations, args.cpu))
    fresh_median = statistics.median(kinds["fresh"] or [timed(iterations)])
    for kind, values in kinds.items():
        if values:
            print(_line(kind, values, fresh_median))
    if args.concurrent_rounds:
        print(
            f"{args.together} at once for 6 s on {os.cpu_count()} cores, "
            f"{args.concurrent_rounds} rounds of each, alternating (per-round means):",
            flush=True,
        )
        together: dict[str, list[float]] = {"forked": [], "spawned": []}
        means: dict[str, list[float]] = {"forked": [], "spawned": []}
        for _ in range(args.concurrent_rounds):
            for kind, context in (("forked", forked_context), ("spawned", spawned_context)):
                values = _concurrent(context, iterations, 6.0, args.together)
                together[kind] += values
                means[kind].append(statistics.fmean(values))
        for kind, values in together.items():
            rounds = " ".join(f"{m:.1f}" for m in means[kind])
            print(_line(kind, values, fresh_median) + f"  round means {rounds}")
        ratio = statistics.median(together["forked"]) / statistics.median(together["spawned"])
        print(
            f"forked / spawned, {args.together} at once (medians over every process): {ratio:.2f}x"
        )


if __name__ == "__main__":
    main()
