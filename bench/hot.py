"""Benchmark: many workers on one hot partition, marshal-run against Kafka share groups.

    .venv/bin/python bench/hot.py [--bootstrap-servers HOST:PORT] [--records 100000]
                                  [--workers 1,4,16,64] [--handlers io,cpu] [--rounds 1]
                                  [--systems partition,share-default,share-tuned,plain,...]
                                  [--faults kill,stop|none] [--fault-workers 4]
                                  [--produce-batch 100]
                                  [--tuned-lock-ms 15000] [--tuned-poll-records 10] [--json]
                                  [--cpu-us 200 | --cpu-iters N] [--plot docs/hot.png]
    make bench-hot        (its defaults)
    make bench-hot-cpu    (the cpu handler at N = 4, 16, 64: host against child slice reads)

Every run has its own topic with ONE partition, where ``--records`` records with keys (1,000
distinct, round robin) are written just before the run starts, in producer batches of
``--produce-batch`` (100) records; the run reads all of it on a fresh group, so its figures
are those of draining a backlog (the latency from append includes the wait in it). The
handlers (`bench/hot_handlers.py`): ``io`` waits 5 ms per record, ``cpu`` burns about 200 µs of
Python (a loop count calibrated here, or ``--cpu-iters``: every system of one invocation gets
the same count, but the calibration moves from one invocation to the next, so runs of separate
invocations compare only with the count given); each writes a ledger line per handled record.

The systems, N workers over 2 members (two hosts' worth: N/2 processes each):

- ``partition``: today's ``marshal-run --mode alo``, 2 supervisors; one claims the partition and
  runs the one child that handles it (whatever N: it is run once, at the first N);
- ``unordered`` / ``key``: ``marshal-run --mode alo --ordering unordered|key
  --workers-per-partition N`` on each of 2 supervisors (N slices of the partition, N/2 held by
  each member by fair share); skipped, with a note, while ``marshal-run --help`` has no
  ``--ordering``; where ``marshal-run --help`` has ``--slice-reads``, with ``--slice-reads host``
  (one reader per partition per member feeds its slices' children);
- ``unordered-child`` / ``key-child``: the same with ``--slice-reads child`` (each slice's child
  reads the whole partition, as before host reads): host and child reads side by side in one
  run; skipped, with a note, while ``marshal-run --help`` has no ``--slice-reads`` (``unordered``
  and ``key`` then read as that marshal-run does, each slice's child);
- ``share-default``: N confluent-kafka ``ShareConsumer`` processes (KIP-932) in one share group,
  explicit acknowledgement, the group's ``share.auto.offset.reset=earliest`` and every other
  setting at its default (30 s record locks, librdkafka's ``max.poll.records`` 500);
- ``share-tuned``: the same with what Kafka's documentation advises for spreading records over
  many consumers: few records per fetch (``max.poll.records=10``: the broker acquires up to
  that, rounded up to whole producer batches, since librdkafka has no ``record_limit`` acquire
  mode), and a lock (``share.record.lock.duration.ms``, 15 s: the broker's default floor) well
  above the time a fetch takes to handle, so that a stopped consumer's records come back sooner;
- ``plain``: one confluent-kafka consumer loop (``assign()``), run once (one worker).

Per system, handler and N: records/s (first record handled to last) and its ratio to the
better of the two share groups at the same N, the latency from the record's CreateTime to the
end of its handling (p50, p99: mostly time in the backlog), records handled more than once, how
many processes handled any, and the bytes the broker sent the workers per handled record
(`bench/hot_bytes.py`) with its ratio to the plain loop's (reads of the partition per record);
with host and child reads both run, a table of them side by side. Then, at ``--fault-workers`` (4)
with the ``io`` handler, a ``kill`` run (kill -9 one member, all its processes, once a fifth of
the records are handled: records handled twice, missing, seconds until the other member handles
a record again) and a ``stop`` run (SIGSTOP the worker that handled the latest record for longer
than the share lock or the marshal lease, then SIGCONT: what it handles after that, and how much
of it after its lock or lease had ended, which the ledger shows).

Prints progress to stderr and a table (or ``--json``) to stdout, writes a PNG; asserts nothing.
Without ``--bootstrap-servers`` it starts a local one-node Kafka in a temporary directory and
stops it. Every process it starts is killed before it exits, whatever happens.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from handlers import calibrate
from hot_bytes import BrokerBytes
from hot_faults import Fault, stop_seconds
from hot_ledger import Ledger, figures
from hot_report import compare, plot, table
from hot_setup import (
    CHILD_READS,
    DEFAULT_LOCK_S,
    HB_S,
    MARSHAL,
    ONCE,
    ORDERED,
    SYSTEMS,
    TUNED_LOCK_MS,
    TUNED_POLL_RECORDS,
    has_ordering,
    has_slice_reads,
    launch,
    produce_keyed,
)
from runtime import REPO, Processes, create_topic, uid

from marshal_workers.localkafka import StartOptions, start_cluster

PROGRESS_S = 10.0
SAMPLE_S = 1.0  # how often the bytes the broker sent each process are read (`hot_bytes`)
FAULT_AT = 0.2  # of the records handled when the fault strikes


@dataclass(frozen=True, slots=True)
class Bench:
    """What every run needs."""

    bootstrap: str
    procs: Processes
    work: Path
    produce_batch: int
    records: int
    cpu_iters: int
    io_ms: float
    timeout_s: float
    tuned: tuple[int, int]  # share-tuned's lock (ms) and max.poll.records
    keep_logs: Path | None = None  # a copy of each run's log (members, children) goes here


def measure(bench: Bench, system: str, n: int, handler: str, fault: str = "") -> dict[str, Any]:
    """One run of ``system`` with ``n`` workers over the whole topic (``fault``: kill, stop)."""
    directory = bench.work / f"{system}-{handler}-{n}-{fault or 'run'}-{uid()}"
    directory.mkdir(parents=True)
    ledger = Ledger(directory)
    topic = create_topic(bench.bootstrap, 1)
    produce_keyed(bench.bootstrap, topic, bench.records, bench.produce_batch)
    env = {"HOT_LEDGER": str(directory), "HOT_CPU_ITERS": str(bench.cpu_iters),
           "HOT_IO_MS": str(bench.io_ms)}  # fmt: skip
    launched = time.time()
    members, lock_s = launch(bench.procs, bench.bootstrap, topic, system, n, handler,
                             env, bench.work / f"{directory.name}.log", bench.tuned)  # fmt: skip
    injected = Fault(fault, members, stop_seconds(lock_s)) if fault else None
    port = int(bench.bootstrap.rsplit(":", 1)[1])
    received = BrokerBytes(port, [m.pid for m in members], supervised=system in MARSHAL)
    started = time.monotonic()
    last_note = last_change = last_sample = started
    count = 0
    error = ""
    try:
        while True:
            now = time.monotonic()
            new = ledger.refresh()
            if new != count:
                count, last_change = new, now
            if injected is not None:
                injected.step(ledger, count >= FAULT_AT * bench.records, now)
            if count >= bench.records and (injected is None or injected.settled(now)):
                break
            stall = 120.0 + (injected.stop_s if injected else 0.0)
            if now - started > bench.timeout_s or now - last_change > stall:
                error = f"{count}/{bench.records} handled after {now - started:.0f} s"
                break
            if now - last_sample >= SAMPLE_S:
                last_sample = now
                received.sample()
            if now - last_note >= PROGRESS_S:
                last_note = now
                note(f"    ... {count:,}/{bench.records:,} handled, {now - started:.0f} s")
            time.sleep(0.2)
    finally:
        received.sample()  # the last figure of every socket still open
        if injected is not None:
            injected.release()
        for member in members:
            bench.procs.stop(member, timeout=10)
    ledger.refresh()
    if bench.keep_logs is not None:
        bench.keep_logs.mkdir(parents=True, exist_ok=True)
        shutil.copy(bench.work / f"{directory.name}.log", bench.keep_logs)
    res = figures(ledger, bench.records, launched)
    res["lock_s"] = lock_s
    res.update(received.figures(res["handled"]))
    if injected is not None:
        res["fault"] = injected.report(ledger)
    if error:
        res["error"] = error
    return res


def run(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    ordering, slice_reads = has_ordering(), has_slice_reads()
    systems = [s for s in SYSTEMS if s in args.systems]
    if not ordering and any(s in ORDERED for s in systems):
        note("marshal-run has no --ordering here: the ordering systems "
             f"({', '.join(s for s in systems if s in ORDERED)}) are skipped")  # fmt: skip
        systems = [s for s in systems if s not in ORDERED]
    if not slice_reads and any(s in CHILD_READS for s in systems):
        note("marshal-run has no --slice-reads here: "
             f"{', '.join(s for s in systems if s in CHILD_READS)} skipped "
             "(unordered and key run as this marshal-run reads: each slice's child)")  # fmt: skip
        systems = [s for s in systems if s not in CHILD_READS]
    if not systems:
        raise SystemExit("no system left to run")
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in range(args.rounds):
        for handler in args.handlers:
            for i, n in enumerate(args.workers):
                turn = (r + i) % len(systems)
                for system in systems[turn:] + systems[:turn]:
                    if system in ONCE and n != args.workers[0]:
                        continue
                    workers = 1 if system in ONCE else n
                    res = measure(bench, system, workers, handler)
                    runs.setdefault(key(handler, system, workers), []).append(res)
                    note(f"round {r + 1}, {handler}, N={workers}: {system:13} {show(res)}")
    faults: dict[str, dict[str, Any]] = {}
    for system in systems:
        for fault in args.faults:
            if system == "plain":
                continue
            n = 1 if system in ONCE else args.fault_workers
            res = measure(bench, system, n, "io", fault)
            faults[f"{system}/{n}/{fault}"] = res
            note(f"{fault} run, io, N={n}: {system:13} {show(res)} {res.get('fault')}")
    return {
        "records": bench.records,
        "produce_batch": args.produce_batch,
        "io_ms": bench.io_ms,
        "cpu_us": None if args.cpu_iters else args.cpu_us,  # None: the count was given
        "cpu_iters": bench.cpu_iters,
        "heartbeat_s": HB_S,
        "default_lock_s": DEFAULT_LOCK_S,
        "tuned_lock_ms": bench.tuned[0],
        "tuned_poll_records": bench.tuned[1],
        "rounds": args.rounds,
        "ordering_available": ordering,
        "slice_reads_available": slice_reads,
        "runs": runs,
        "summary": summarise(runs),
        "faults": faults,
    }


def key(handler: str, system: str, n: int) -> str:
    return f"{handler}/{system}/{n}"


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per handler, system and N: the medians over the rounds that gave a figure, then the
    ratio to the better share group and the reads per record (`hot_report.compare`)."""
    out: dict[str, dict[str, Any]] = {}
    for name, results in runs.items():
        ok = [x for x in results if "error" not in x]
        row: dict[str, Any] = {"rounds_ok": len(ok), "rounds": len(results)}
        for field in ("records_per_s", "p50_s", "p99_s", "handled_twice", "late_lines",
                      "workers_used", "to_all_working_s", "processes_per_slice",
                      "worker_bytes_per_record", "supervisor_bytes_per_record",
                      "work_cpu_us_p10", "work_cpu_us_p50", "work_cpu_us_p90"):  # fmt: skip
            values = [x[field] for x in ok if x.get(field) is not None]
            row[field] = statistics.median(values) if values else None
        out[name] = row
    for name, derived in compare(out).items():
        out[name].update(derived)
    return out


def show(res: dict[str, Any]) -> str:
    if "records_per_s" not in res:
        return f"no figure: {res.get('error')}"
    text = (
        f"{res['records_per_s']:,.0f} records/s, p50 {res['p50_s']:.1f} s, p99 "
        f"{res['p99_s']:.1f} s, {res['handled_twice']} handled twice, "
        f"{res['workers_used']} processes handled"
    )
    if "to_all_working_s" in res:
        text += f", all working {res['to_all_working_s']:.2f} s after launch"
    if "processes_per_slice" in res:
        text += f", {res['processes_per_slice']:.2f} processes per slice"
    if "worker_bytes_per_record" in res:
        text += f", {res['worker_bytes_per_record']:,.0f} B from the broker per record"
    if "work_cpu_us_p50" in res:
        text += f", the work {res['work_cpu_us_p50']:,.0f} µs of CPU per record (p50"
        if res.get("work_cpu_us_p10") is not None:
            text += f"; p10 {res['work_cpu_us_p10']:,.0f}, p90 {res['work_cpu_us_p90']:,.0f}"
        text += ")"
    return text + (f" [{res['error']}]" if "error" in res else "")


def note(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def exit_on_signal(signum: int, frame: object) -> None:
    """SIGTERM or SIGHUP: leave through the ``finally`` blocks, which kill what was started."""
    raise SystemExit(128 + signum)


def csv(kind: type) -> Any:
    return lambda text: [kind(x) for x in text.split(",") if x]


def _positive(text: str) -> int:
    """An argument that must be a whole number above 0."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be 1 or more")
    return value


def main() -> None:
    signal.signal(signal.SIGTERM, exit_on_signal)
    signal.signal(signal.SIGHUP, exit_on_signal)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bootstrap-servers", help="an existing Kafka 4.2+ (default: a local one)")
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--workers", type=csv(int), default=[1, 4, 16, 64], help="the Ns")
    ap.add_argument("--handlers", type=csv(str), default=["io", "cpu"], help="io,cpu")
    ap.add_argument("--systems", type=csv(str), default=list(SYSTEMS),
                    help="a subset of " + ",".join(SYSTEMS))  # fmt: skip
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--faults", type=csv(str), default=["kill", "stop"],
                    help="kill,stop or none")  # fmt: skip
    ap.add_argument("--fault-workers", type=int, default=4)
    ap.add_argument("--produce-batch", type=int, default=100, help="records per producer batch")
    ap.add_argument(
        "--tuned-lock-ms",
        type=int,
        default=TUNED_LOCK_MS,
        help="share-tuned's share.record.lock.duration.ms",
    )
    ap.add_argument(
        "--tuned-poll-records",
        type=int,
        default=TUNED_POLL_RECORDS,
        help="share-tuned's max.poll.records",
    )
    ap.add_argument("--io-ms", type=float, default=5.0)
    work = ap.add_mutually_exclusive_group()
    work.add_argument("--cpu-us", type=float, default=200.0)
    work.add_argument(
        "--cpu-iters",
        type=_positive,
        help="the cpu handler's loop count (default: calibrated here for --cpu-us, which moves "
        "by a third from one invocation to the next on a shared machine: give it to compare runs "
        "of separate invocations)",
    )
    ap.add_argument("--timeout", type=float, help="seconds per run (default from the records)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    ap.add_argument("--keep-logs", type=Path, help="copy each run's log (members' lines) here")
    ap.add_argument("--plot", default=str(REPO / "docs" / "hot.png"), help="the PNG's path")
    args = ap.parse_args()
    args.faults = [f for f in args.faults if f != "none"]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown:
        ap.error(f"unknown system(s) {','.join(unknown)}: choose from {','.join(SYSTEMS)}")
    iters = args.cpu_iters or calibrate(args.cpu_us)
    about = "as given" if args.cpu_iters else f"about {args.cpu_us:g} µs here"
    note(f"cpu handler: {iters} loop turns per record ({about})")
    timeout = args.timeout or 120.0 + 1.5 * args.records * args.io_ms / 1000
    procs = Processes()
    with tempfile.TemporaryDirectory(prefix="marshal-bench-hot-") as tmp:
        work = Path(tmp)
        cluster = None
        try:
            bootstrap = args.bootstrap_servers
            if bootstrap is None:
                cluster = start_cluster(StartOptions(directory=work / "kafka", nodes=1))
                bootstrap = cluster.bootstrap
                note(f"local Kafka (1 node) at {bootstrap}")
            tuned = (args.tuned_lock_ms, args.tuned_poll_records)
            bench = Bench(bootstrap, procs, work, args.produce_batch, args.records, iters,
                          args.io_ms, timeout, tuned, args.keep_logs)  # fmt: skip
            doc = run(bench, args)
        finally:
            for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                signal.signal(signum, signal.SIG_IGN)  # a second signal must not cut this short
            procs.kill_all()
            if cluster is not None:
                cluster.stop()
    doc["command"] = " ".join(["bench/hot.py", *sys.argv[1:]])
    doc["plot"] = str(plot(doc, Path(args.plot)))
    print(json.dumps(doc, indent=2) if args.json else table(doc) + f"\n\nplot: {doc['plot']}")


if __name__ == "__main__":
    main()
