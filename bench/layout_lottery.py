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
- ``forked``: a child of `marshal-run`'s own fork server (`childlink.forkserver.fork_server`:
  preloaded with the child's modules, in a session of its own, its imports frozen), which
  imports ``bench.handlers`` after the fork as a child imports its handler; one at a time;
- ``spawned``: a child started by multiprocessing's spawn method.

With ``--cpu`` each of those processes is pinned to that core. Then ``--concurrent-rounds``
rounds of ``--together`` processes at once, not pinned (8: as eight `marshal-run` children on a
two-core host; 64: as a hot partition's 64 slices), for 6 s: forked children against spawned
ones, alternating. Once all are up (a barrier) they start their loops at one moment on the
wall clock, half a second after the last one came (``--start clock``, the default); with
``--start barrier`` each starts as the barrier lets it go (a chain of wake-ups), as the runs
before 2026-12-01 did. The forked ones were as much slower either way that day
(docs/benchmarks.md, "Where the hot partition's gap is: CPU process by process (2026-12-01)").

Per kind: the median, the fastest and slowest process, and how many ran more than 1.25x the
fresh median (a "slow draw"). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue as queues
import shutil
import statistics
import subprocess
import sys
import time
from functools import partial
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from marshal_workers.childlink.forkserver import fork_server  # noqa: E402

# (bench.handlers is imported inside the functions: the fork server imports this module, and a
# marshal-run child imports its handler's module after the fork, never the server)
CALLS = 4000
SLOW = 1.25  # a slow draw: more than this times the fresh median
WAIT_S = 120.0  # for a process's figure, past its own run: a process that died gives none
START_AFTER_S = 0.5  # --start clock: the loops begin this long after the last process came


def timed(iterations: int) -> float:
    """µs of CPU per ``burn(iterations)`` call: the best of 3 timings of `CALLS` calls."""
    from bench.handlers import burn  # noqa: PLC0415

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


def _set_start(start: Any) -> None:
    """The barrier's action, in the last process to come: the moment every loop begins."""
    start.value = time.time() + START_AFTER_S


def _busy(
    iterations: int, barrier: Any, start: Any, seconds: float, queue: Queue[float]
) -> None:
    from bench.handlers import burn  # noqa: PLC0415

    barrier.wait(WAIT_S)  # once all are up (the spawned ones imported)
    if start is not None:  # then all at one moment
        while time.time() < start.value:
            time.sleep(0.005)
    t0, calls, wall = time.process_time(), 0, time.monotonic()
    while time.monotonic() - wall < seconds:
        burn(iterations)
        calls += 1
    queue.put((time.process_time() - t0) / calls * 1e6)


def _collect(queue: Queue[float], processes: list[Any], timeout: float) -> list[float]:
    """Each process's figure; a clear error, not a hang, if one of them ended without it."""
    values = []
    for _ in processes:
        try:
            values.append(float(queue.get(timeout=timeout)))
        except queues.Empty:
            codes = [p.exitcode for p in processes]
            message = f"layout_lottery: a process gave no figure (exit codes {codes})"
            raise SystemExit(message) from None
    for process in processes:
        process.join()
    return sorted(values)


def _in_context(context: Any, iterations: int, cpu: int | None) -> float:
    queue: Queue[float] = context.Queue()
    process = context.Process(target=_child, args=(iterations, cpu, queue))
    process.start()
    return _collect(queue, [process], WAIT_S)[0]


def _fresh(iterations: int, cpu: int | None, fixed: bool) -> float:
    command = [sys.executable, __file__, "--one", str(iterations)]
    if cpu is not None:
        command += ["--cpu", str(cpu)]
    env = dict(os.environ)
    setarch = shutil.which("setarch")
    if fixed:
        env["PYTHONHASHSEED"] = "0"
        if setarch:
            fixed_layout = [setarch, "-R", *command]
            done = subprocess.run(
                fixed_layout, env=env, capture_output=True, text=True, check=False
            )
            if done.returncode == 0:
                return float(done.stdout.strip())
            # (setarch refused, a seccomp profile say: the hash seed alone is fixed)
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return float(out.strip())


def _concurrent(
    context: Any, iterations: int, seconds: float, together: int, clock_start: bool
) -> list[float]:
    queue: Queue[float] = context.Queue()
    start = context.RawValue("d", 0.0) if clock_start else None
    action = partial(_set_start, start) if start is not None else None  # (a 0.0 cell is falsy)
    barrier = context.Barrier(together, action=action)
    processes = [
        context.Process(target=_busy, args=(iterations, barrier, start, seconds, queue))
        for _ in range(together)
    ]
    for process in processes:
        process.start()
    return _collect(queue, processes, WAIT_S + seconds)


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
    parser.add_argument(
        "--start", choices=("clock", "barrier"), default="clock",
        help="processes at once begin their loops at one moment (clock) or as the barrier "
        "releases each (barrier)",
    )  # fmt: skip
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:  # a fresh process's own timing
        if args.cpu is not None:
            os.sched_setaffinity(0, {args.cpu})
        print(f"{timed(args.one):.3f}")
        return
    from bench.handlers import calibrate  # noqa: PLC0415

    iterations = args.iters or calibrate(args.work_us)
    forked_context = fork_server()  # marshal-run's own: preloaded, its session, frozen
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
            f"{args.concurrent_rounds} rounds of each, alternating, start: {args.start} "
            "(per-round means):",
            flush=True,
        )
        together: dict[str, list[float]] = {"forked": [], "spawned": []}
        means: dict[str, list[float]] = {"forked": [], "spawned": []}
        for _ in range(args.concurrent_rounds):
            for kind, context in (("forked", forked_context), ("spawned", spawned_context)):
                values = _concurrent(
                    context, iterations, 6.0, args.together, args.start == "clock"
                )
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
