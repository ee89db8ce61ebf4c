"""Benchmark: what a fleet of busy children's watchdogs cost the rest of the host.

    .venv/bin/python bench/watchdog_stall.py [--children 64] [--seconds 20]
                                             [--ticks 0.05,0.25,1] [--nice 10] [--rounds 2]
                                             [--members 2] [--no-sessions]

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
it up.

Then, where the kernel schedules each session as a group (autogroup, ``/proc/self/autogroup``),
the sessions: the same children (today's tick) split over ``--members`` sessions, each
started as the benches and a shell start a member, its children in it (as before
2026-11-29), against the same with each member's children in a session of their own whose
group is at ``--nice`` (as the fork server's session is now: `childlink.schedgroup`). A nice
orders threads only inside one group: before, the probe waited seconds (docs/benchmarks.md,
"Busy children starved the host's other sessions"). Prints tables; asserts nothing.
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
from marshal_workers.childlink.callstate import WATCHDOG_TICK_S, watchdog_tick  # noqa: E402
from marshal_workers.childlink.schedgroup import (  # noqa: E402
    GroupNice,
    leave_session,
    session_group_nice,
    settle_soon,
)
from marshal_workers.childlink.sharedlease import SharedLease  # noqa: E402
from marshal_workers.common import leaseclock  # noqa: E402
from marshal_workers.config.settings import BY_NAME  # noqa: E402

# the tick today's children look at under the default handler timeout (300 s: once a second)
TODAY_TICK_S = watchdog_tick(BY_NAME["handler_timeout"].default)

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


def member(children: int, nice: int, seconds: float, own_group: bool) -> NoReturn:
    """A member's session (as a shell or a bench starts one) with ``children`` busy children
    and their watchdogs at today's tick; with ``own_group`` the children are forked from a
    process that leads a session of its own, whose group a child gives its nice (the fork
    server's, `childlink.schedgroup`)."""
    os.setsid()
    ctx = multiprocessing.get_context("fork")
    if own_group:
        server = ctx.Process(target=children_of_own_session, args=(children, nice, seconds))
        server.start()
        server.join(seconds + 60)
        os._exit(0)
    run_children(ctx, children, nice, seconds, settle=False)
    os._exit(0)


def children_of_own_session(children: int, nice: int, seconds: float) -> NoReturn:
    leave_session()
    run_children(multiprocessing.get_context("fork"), children, nice, seconds, settle=True)
    os._exit(0)


def run_children(
    ctx: multiprocessing.context.ForkContext, children: int, nice: int, seconds: float,
    settle: bool,
) -> None:  # fmt: skip
    lease = SharedLease(ctx)
    lease.extend_to(leaseclock.now() + 3600)
    args = (lease, TODAY_TICK_S, nice, seconds, settle)
    procs = [ctx.Process(target=busy_settled_child, args=args) for _ in range(children)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(seconds + 30)


def busy_settled_child(
    lease: SharedLease, tick: float, nice: int, seconds: float, settle: bool
) -> NoReturn:
    """`busy_child`, which first gives its session's group its nice (with ``settle``), as a
    child of the fork server does once set up."""
    if settle:
        settle_soon(GroupNice(nice, os.getsid(0)), lambda group: None)
    busy_child(lease, tick, nice, seconds)


def run_sessions(members: int, children: int, nice: int, seconds: float, own: bool) -> list[float]:
    """One run of the session comparison: the probe's lateness for each of its wake-ups."""
    probe = subprocess.Popen(
        [sys.executable, "-c", PROBE, str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    ctx = multiprocessing.get_context("fork")
    share = [children // members + (i < children % members) for i in range(members)]
    procs = [ctx.Process(target=member, args=(n, nice, seconds, own)) for n in share]
    for p in procs:
        p.start()
    out, _ = probe.communicate(timeout=seconds + 60)
    for p in procs:
        p.join(seconds + 60)
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
    ap.add_argument("--ticks", default=f"0.05,{WATCHDOG_TICK_S:g},{TODAY_TICK_S:g}",
                    help="watchdog ticks to compare (s); default: the first, the second, "
                         "today's under the default handler timeout")  # fmt: skip
    ap.add_argument("--nice", type=int, default=10, help="the handler threads' nice (child_nice)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--members", type=int, default=2,
                    help="sessions the children are split over (autogroups)")  # fmt: skip
    ap.add_argument("--no-sessions", action="store_true",
                    help="skip the session comparison (autogroups)")  # fmt: skip
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
    sessions: dict[str, list[dict[str, float]]] = {}
    if not args.no_sessions and session_group_nice() is not None:
        kinds = ((False, "in the members' sessions"), (True, "own session, group lowered"))
        for r in range(args.rounds):
            for own, name in kinds:
                late = run_sessions(args.members, args.children, args.nice, args.seconds, own)
                res = summary(late)
                sessions.setdefault(name, []).append(res)
                said = ", ".join(f"{k} {v:.3f}" for k, v in res.items())
                print(f"round {r + 1}: {name}: {said}", file=sys.stderr, flush=True)
    elif not args.no_sessions:
        print("no autogroups here (/proc/self/autogroup): no session comparison", file=sys.stderr)
    if args.json:
        print(json.dumps({"ticks": rows, "sessions": sessions}, indent=2))
        return
    print(f"{args.children} busy children at nice {args.nice}, {args.seconds:g} s, "
          f"{args.rounds} round(s); a probe's lateness per 0.1 s sleep")  # fmt: skip
    print("| children | wake-ups | p50 late | p99 late | max late | late > 0.5 s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, results in rows.items():
        for res in results:
            print(f"| {name} | {res['wakeups']:.0f} | {res['p50_s']:.3f} s | {res['p99_s']:.3f} s"
                  f" | {res['max_s']:.3f} s | {res['late_over_0.5_s']:.0f} |")  # fmt: skip
    if sessions:
        print(f"\nthe same children (watchdog tick {TODAY_TICK_S:g} s) in {args.members} "
              "members' sessions (autogroups); a probe's lateness per 0.1 s sleep")  # fmt: skip
        print("| children | wake-ups | p50 late | p99 late | max late | late > 0.5 s |")
        print("| --- | --- | --- | --- | --- | --- |")
        for name, results in sessions.items():
            for res in results:
                print(f"| {name} | {res['wakeups']:.0f} | {res['p50_s']:.3f} s"
                      f" | {res['p99_s']:.3f} s | {res['max_s']:.3f} s"
                      f" | {res['late_over_0.5_s']:.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
