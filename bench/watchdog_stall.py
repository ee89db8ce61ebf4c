"""Benchmark: what a fleet of busy children's watchdogs cost the rest of the host.

    .venv/bin/python bench/watchdog_stall.py [--children 64] [--seconds 20]
                                             [--ticks 0.05,0.25] [--nice 10] [--rounds 2]

Each run forks ``--children`` processes shaped like a member's children with a CPU-bound
handler: the main thread burns pure Python at ``--nice`` below this process's priority (as
`ChildLoop._lower_priority` lowers the handler's thread, `child_nice`), beside the child's real
`child.fencing.Watchdog` thread (at full priority, as in a child: started before the lowering)
with the tick under test and a lease that never runs out. Beside them, in a session of its own
and at full priority, a probe sleeps 0.1 s in a loop and records how late each wake-up is: what
any other process of the host (the broker, a supervisor, a systemd service) waits for the CPU.
Then the same with ``--children`` busy processes and no watchdog. No Kafka.

Why: in `bench/hot.py`'s CPU-bound runs at N = 64 on two cores (2026-11-29), the local broker
was fenced by its own controller in 3 of 4 marshal runs (its heartbeats late), and such a probe
was late by up to 1.8-4.5 s beside marshal and 0.43 s beside the share groups. Every
wake-up of a watchdog asks a handler thread that holds the GIL, at a lower priority, to give
it up. Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from marshal_workers.child.fencing import Watchdog  # noqa: E402
from marshal_workers.childlink.callstate import WATCHDOG_TICK_S  # noqa: E402
from marshal_workers.childlink.sharedlease import SharedLease  # noqa: E402
from marshal_workers.common import leaseclock  # noqa: E402

PROBE = """
import json, sys, time
end = time.monotonic() + float(sys.argv[1])
late = []
while time.monotonic() < end:
    t = time.monotonic()
    time.sleep(0.1)
    late.append(time.monotonic() - t - 0.1)
print(json.dumps(late))
"""


def busy_child(lease: SharedLease | None, tick: float, nice: int, seconds: float) -> NoReturn:
    """A child's shape: the watchdog (if any) started first, then the handler's thread lowered
    and burning CPU until the run ends."""
    if lease is not None:

        def fence(reason: str) -> NoReturn:
            os._exit(5)

        Watchdog(lease, os.getppid(), fence, tick_s=tick).start()
    os.nice(nice)  # this thread only (Linux): the watchdog keeps its priority
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        for i in range(10_000):
            x += i
    os._exit(0)


def run_once(children: int, tick: float | None, nice: int, seconds: float) -> list[float]:
    """One run: the probe's lateness, in seconds, for each of its wake-ups."""
    ctx = multiprocessing.get_context("fork")
    lease = None
    if tick is not None:
        lease = SharedLease(ctx)
        lease.extend_to(leaseclock.now() + 3600)
    probe = subprocess.Popen(
        [sys.executable, "-c", PROBE, str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    procs = [
        ctx.Process(target=busy_child, args=(lease, tick or 0.0, nice, seconds))
        for _ in range(children)
    ]
    for p in procs:
        p.start()
    out, _ = probe.communicate(timeout=seconds + 60)
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
            p.join(5)
    late: list[float] = json.loads(out)
    return late


def summary(late: list[float]) -> dict[str, float]:
    ordered = sorted(late)
    return {
        "wakeups": len(late),
        "p50_s": statistics.median(ordered),
        "p99_s": ordered[int(0.99 * (len(ordered) - 1))],
        "max_s": ordered[-1],
        "late_over_0.5_s": sum(1 for x in late if x > 0.5),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--children", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--ticks", default=f"0.05,{WATCHDOG_TICK_S:g}",
                    help="watchdog ticks to compare (s); default: old, today's")  # fmt: skip
    ap.add_argument("--nice", type=int, default=10, help="the handler threads' nice (child_nice)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    ticks: list[float | None] = [float(t) for t in args.ticks.split(",")]
    ticks.append(None)  # busy children without a watchdog
    rows: dict[str, list[dict[str, float]]] = {}
    for r in range(args.rounds):
        for tick in ticks:
            name = "no watchdog" if tick is None else f"tick {tick:g} s"
            res = summary(run_once(args.children, tick, args.nice, args.seconds))
            rows.setdefault(name, []).append(res)
            print(f"round {r + 1}: {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in res.items()),
                  file=sys.stderr, flush=True)  # fmt: skip
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{args.children} busy children at nice {args.nice}, {args.seconds:g} s, "
          f"{args.rounds} round(s); a probe's lateness per 0.1 s sleep")  # fmt: skip
    print("| children | wake-ups | p50 late | p99 late | max late | late > 0.5 s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, results in rows.items():
        for res in results:
            print(f"| {name} | {res['wakeups']:.0f} | {res['p50_s']:.3f} s | {res['p99_s']:.3f} s"
                  f" | {res['max_s']:.3f} s | {res['late_over_0.5_s']:.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
