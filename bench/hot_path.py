"""Benchmark: the Python cost per record of a child's hot path, piece by piece, without Kafka.

    .venv/bin/python bench/hot_path.py [--records 500] [--repeat 400]

Builds ``--records`` confluent-kafka ``Message`` objects in memory (no broker: what is measured
is only the Python work after ``consume()`` returned) and runs the same trivial handler
(`bench.handlers.count`) over them in steps, each adding one thing a child does to the plain
loop before it (the clock is the lease clock, `common.leaseclock`, as the child's); the last step
is the child's own code (`consume`'s wrapping, `child.consumer.fetch` over a stand-in consumer,
and the handling step, `Handling.run`, ALO). Each figure is the best of five timings of
``--repeat`` batches, in ns per record, with what the step adds to the one before. Prints
figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Message

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.handlers import count
from marshal_workers.child.callclock import CallClock
from marshal_workers.child.consumer import fetch
from marshal_workers.child.failurehandling import FailureHandling
from marshal_workers.child.handling import Handling
from marshal_workers.child.leasecheck import LeaseCheck
from marshal_workers.child.plugin import Plugin
from marshal_workers.child.reporting import Reporter
from marshal_workers.childlink.sharedlease import SharedLease
from marshal_workers.common import leaseclock
from marshal_workers.handler.record import FetchedRecord
from marshal_workers.protocol.modes import Mode


def messages(n: int) -> list[Any]:
    return [
        Message(
            topic="t",
            partition=0,
            offset=i,
            key=None,
            value=b"x" * 100,
            headers=None,
            timestamp=(TIMESTAMP_LOG_APPEND_TIME, 1_700_000_000_000 + i),
        )
        for i in range(n)
    ]


def ns_per_record(step: Callable[[], object], n: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(repeat):
            step()
        best = min(best, (time.perf_counter() - started) / repeat / n)
    return best * 1e9


def handling_step(lease: SharedLease) -> Handling:
    """The child's handling step as it runs in ALO (the count handler, a long lease), with
    what it calls per run (the reporter, whose pipe is never used here)."""
    check = LeaseCheck(lease, log=None)
    reporter = Reporter(Mode.ALO, lease.calls, pipe=None, position=0)  # type: ignore[arg-type]
    failures = FailureHandling.__new__(FailureHandling)  # (a failure would need the rest)
    ctx: Any = None  # (the count handler reads no context)
    return Handling(Plugin(count), ctx, check, lease.calls, CallClock(300.0), failures, reporter)


def publishing(msgs: list[Any], lease: SharedLease, stats: Any) -> Callable[[], None]:
    """The step that also stores the shared position before each call (the child's hot path
    without its fetch)."""
    cell, clock = lease.cell, leaseclock.now
    position, in_call = lease.calls.position, lease.calls.in_call

    def published() -> None:
        starts: list[float] = []
        in_call.value = 1
        run = [FetchedRecord(m) for m in msgs if m.error() is None]
        first, n = run[0].offset, len(run)
        offsets = range(first, first + n) if run[-1].offset - first == n - 1 else []
        for offset, r in zip(offsets, run, strict=True):
            now = clock()
            if now >= cell.value:
                raise SystemExit("lease")
            starts.append(now)
            position.value = offset
            count(r, None)
        in_call.value = 0
        stats.observe_calls(starts, clock())

    return published


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500, help="records per batch")
    parser.add_argument("--repeat", type=int, default=400, help="batches per timing")
    args = parser.parse_args()
    msgs = messages(args.records)
    lease = SharedLease(multiprocessing.get_context("spawn"))
    lease.extend_to(leaseclock.now() + 3600)
    cell, clock = lease.cell, leaseclock.now
    handling = handling_step(lease)
    stats = handling.reporter.stats

    def plain() -> None:
        for m in msgs:
            if m.error() is None:
                count(m, None)

    def wrapped() -> None:
        for r in [FetchedRecord(m) for m in msgs if m.error() is None]:
            count(r, None)

    def lease_checked() -> None:
        for r in [FetchedRecord(m) for m in msgs if m.error() is None]:
            if clock() >= cell.value:
                raise SystemExit("lease")
            count(r, None)

    def stamped() -> None:
        starts: list[float] = []
        for r in [FetchedRecord(m) for m in msgs if m.error() is None]:
            now = clock()
            if now >= cell.value:
                raise SystemExit("lease")
            starts.append(now)
            count(r, None)
        stats.observe_calls(starts, clock())

    published = publishing(msgs, lease, stats)

    class Consumer:  # what `fetch` asks of the child's consumer: a batch already fetched
        def consume(self, num_messages: int, timeout: float) -> list[Any]:
            return msgs

    consumer: Any = Consumer()
    spec: Any = SimpleNamespace(batch_size=args.records, batch_timeout_s=0.0, slice=None)

    def child() -> None:
        handling.run(fetch(consumer, spec, log=None))

    steps = [
        ("plain loop: error check + handler(Message)", plain),
        ("+ a FetchedRecord per message (handler reads .value)", wrapped),
        ("+ the lease check before each call", lease_checked),
        ("+ a clock reading kept per call, binned per run", stamped),
        ("+ the shared position: one store per call", published),
        ("the child's own code (fetch, then Handling.run, ALO)", child),
    ]
    print_table(steps, args.records, args.repeat)


def print_table(steps: list[tuple[str, Callable[[], None]]], records: int, repeat: int) -> None:
    """Time each step and print it with what it adds to the one before."""
    print(f"{records} records per batch, best of 5 x {repeat} batches, ns/record")
    before = None
    first = None
    for label, step in steps:
        ns = ns_per_record(step, records, repeat)
        first = ns if first is None else first
        added = "" if before is None else f"  ({ns - before:+.0f})"
        print(f"  {label:55} {ns:6.0f}{added}")
        before = ns
    assert first is not None and before is not None
    print(f"  child over plain: {before - first:+.0f} ns/record ({before / first:.2f}x)")


if __name__ == "__main__":
    main()
