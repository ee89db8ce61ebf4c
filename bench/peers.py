"""Benchmark: marshal-run against its peers, side by side in one run.

    .venv/bin/python bench/peers.py [--bootstrap-servers HOST:PORT] [--records 240000]
                                    [--trivial-records N] [--rounds 3] [--work-us 20]
                                    [--json] [--plot docs/peers.png]
    make bench-peers

The systems, each launched as a fresh process (tree) per measurement on a fresh consumer group
(and, for marshal-run, a fresh coordination topic), all with the same handler module
(`bench/handlers.py`):

- plain: one process, one confluent-kafka consumer ``assign()``-ed to the 8 partitions,
  ``consume(500)`` batches, the handler on each message (`bench/peer_loops.py`);
- plain2: two such loops side by side, 4 partitions and half the records each, and nothing
  else: a reference for a runner that spreads partitions over processes (ratios to it say how
  far marshal-run is from what two processes with no coordination get here, apart from how
  far the machine's two cores are from 2.0x one; not a proven bound);
- marshal ALO / AMO: ``marshal-run --mode alo|amo --batch-size 500``, one supervisor claiming
  all 8 partitions, one child per partition (HB = 5 s); AMO with the default ``amo_window``
  (32000: reservations of up to 16000 records, sized by the child's time per record and
  memory, `protocol/reservations.py`), and ``amo-batch`` with ``--amo-window 1000`` (one batch
  per reservation, AMO before design decision 18), and ``amo-narrow`` with ``--amo-window
  2000`` (the default before);
- Arroyo: ``sentry-arroyo``'s StreamProcessor with ``RunTaskWithMultiprocessing`` (a pool of 2
  spawned processes, batches of 500 or 0.5 s) then ``CommitOffsets`` (`bench/peer_loops.py`).

The settings (the performance goals' table, docs/benchmarks.md), each on its own 8-partition
topic (``--partitions``) written once, records spread evenly (offsets 0 to N/8 - 1 in every
partition):

- cpu: ``bench.handlers:work``: about ``--work-us`` (20) microseconds of pure Python per record
  (a loop count calibrated once here, the same count in every system), ``--records`` records;
  every system with its own consumer defaults;
- trivial: ``bench.handlers:count`` (read the value, count), ``--trivial-records`` records
  (default 10 x ``--records``), the plain loop with ``fetch.queue.backoff.ms=10`` (as the
  children have it by default), so that both sides are CPU-bound rather than throttled;
- batch: the same for a batch plugin: ``bench.handlers:CountBatch`` (``handle_batch``) under
  marshal-run, ``count_batch`` on each ``consume()`` batch in the plain loop (Arroyo's task is
  per message: its trivial row stands for it, and it is not run again here).

Throughput: from the first record handled to the last, over all N records, as the handler marks
them itself: the plain loop its first and N-th record; each marshal child (one partition) its
first and its partition's last; Arroyo, whose workers share every partition's batches, each
partition's offset 0 and last offset (marked by its adapter, `bench.handlers.arroyo_task`).
Also: launch to the first handled record, launch to every partition's first record (marshal,
Arroyo), the peak RSS of the processes that ran the handler (a marshal child, an Arroyo worker,
the plain loop) and the largest RSS of any of the system's processes (a supervisor, Arroyo's
consumer) when it was done; and where the CPU went (`cpu_account`, read when the last record is
handled): seconds of CPU of the launched process (the plain loop, a supervisor), of marshal-run's
fork server and of its children (and their guardians, apart), of the broker over the run, and
the handlers' voluntary and involuntary context switches (each per-round line, and the JSON).

Every round runs every setting and every system in turn (the systems' order rotating from round
to round); ratios are to the plain loop of the same round and setting, and the table shows the
median over rounds. Before the rounds, one plain read of each topic with the trivial handler
(not counted) so that every measured read finds the data read before. With the cpu setting,
just before the rounds and just after them, what two bare processes of the work loop got
against one (`bench/cores.py`, one round each, ``--cores-seconds``): the reference for the
CPU-bound ratios, which on a virtual machine whose cores are shared moves within minutes.

Prints figures (and writes a PNG of throughput per system and setting); asserts nothing. Without
``--bootstrap-servers`` it starts a local one-node Kafka in a temporary directory and stops it.
Every process it starts is killed before it exits, whatever happens.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil
from cores import scaling
from handlers import calibrate
from peers_report import plot, table
from runtime import (
    BATCH,
    REPO,
    Processes,
    child_env,
    coordination_topic,
    create_topic,
    exited,
    marshal_run,
    produce_bulk,
    read_json_files,
    tail,
    uid,
    wait_until,
)

from marshal_workers.localkafka import StartOptions, start_cluster
from marshal_workers.localkafka.cluster import cluster_status

DEFAULT_PARTITIONS = 8
PARTITIONS = DEFAULT_PARTITIONS  # the topics' partitions (`--partitions`): one child each
SYSTEMS = ("plain", "alo", "amo", "amo-batch", "amo-narrow", "arroyo", "alo-base", "amo-base",
           "plain2")  # fmt: skip
DEFAULT_SYSTEMS = SYSTEMS[:-1]  # plain2 when asked for (`make bench-peers` runs as before)
BASELINE = ("alo-base", "amo-base")  # marshal-run of another build (--baseline), same rounds
MARSHAL_SYSTEMS = ("alo", "amo", "amo-batch", "amo-narrow", *BASELINE)  # a coordination topic each
# amo-batch: AMO reserving one batch at a time (amo_window = 2 batches), as before decision 18;
# amo-narrow: amo_window 2000 (reservations of up to 1000 records), the default before 32000
AMO_WINDOWS = {"amo-batch": 1000, "amo-narrow": 2000}
PEER_LOOPS = Path(__file__).resolve().with_name("peer_loops.py")
HB_S = 5.0
ARROYO_PROCESSES = 2


@dataclass(frozen=True, slots=True)
class Setting:
    """One row of the comparison: the handler, the records, the plain loop's consumer
    settings."""

    key: str
    label: str
    handler: str  # in bench/handlers.py (the plain loop's and Arroyo's)
    records: int
    plain_kafka: dict[str, str] = field(default_factory=dict)
    plugin: str = ""  # marshal-run's --handler in bench/handlers.py, if not ``handler``
    # Arroyo's RunTaskWithMultiprocessing calls a task per message: the batch row would run
    # the trivial row's Arroyo again (2 minutes a round), so it is not run there
    skip: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Bench:
    """What every measurement needs."""

    bootstrap: str
    procs: Processes
    work: Path
    work_iters: int
    timeout_s: float
    baseline: Path | None = None  # another build's venv bin (--baseline)
    broker_pid: int | None = None  # the local Kafka's (its CPU is accounted per run)


def settings(args: argparse.Namespace) -> list[Setting]:
    records = round_up(args.records)
    trivial = round_up(args.trivial_records or 10 * args.records)
    every = [
        Setting("cpu", f"~{args.work_us:g} µs of Python per record, {short(records)}", "work",
                records),
        Setting("trivial", f"trivial handler, {short(trivial)}, plain with a 10 ms fetch back-off",
                "count", trivial, {"fetch.queue.backoff.ms": "10"}),
        Setting("batch", f"trivial batch plugin, {short(trivial)}, plain with 10 ms back-off",
                "count_batch", trivial, {"fetch.queue.backoff.ms": "10"}, plugin="CountBatch",
                skip=("arroyo",)),
    ]  # fmt: skip
    return [s for s in every if s.key in args.settings]


def round_up(n: int) -> int:
    """``n`` rounded up to a multiple of the partitions (every partition the same count)."""
    return -(-n // PARTITIONS) * PARTITIONS


def short(n: int) -> str:
    return f"{n / 1e6:g}M records" if n >= 1_000_000 else f"{n / 1e3:g}k records"


def launch(
    bench: Bench, system: str, setting: Setting, topic: str, out: Path, coordination: str
) -> Any:
    """Start ``system`` on ``topic``; its handler writes its marks to ``out``. (marshal-run's
    ``coordination`` topic is created before, so that the launch time does not count it.)"""
    share = setting.records // PARTITIONS
    env = {
        "BENCH_OUT": str(out),
        # the handler's "last" mark: the plain loop handles every record, a child its partition's
        "BENCH_TARGET": str(
            {"plain": setting.records, "plain2": setting.records // 2, "arroyo": 0}.get(
                system, share
            )
        ),
        # Arroyo's adapter marks each partition's offset 0 and last offset instead
        "BENCH_LAST_OFFSET": str(share - 1),
        "BENCH_WORK_ITERS": str(bench.work_iters),
        "BENCH_HANDLER": setting.handler,
    }
    log = bench.work / f"{out.name}.log"
    if system in MARSHAL_SYSTEMS:
        binary, cwd = None, REPO
        if system in BASELINE and bench.baseline is not None:
            binary = bench.baseline / "marshal-run"
            cwd = baseline_root(bench.baseline)  # on its fork server's path: its package, not
            env["PYTHONPATH"] = str(cwd)  # ours (a module moved since broke every child)
        return marshal_run(
            bench.procs, log, handler=f"bench.handlers:{setting.plugin or setting.handler}",
            binary=binary, cwd=cwd,
            mode=system.split("-", maxsplit=1)[0],
            extra=["--amo-window", str(AMO_WINDOWS[system])] if system in AMO_WINDOWS else None,
            topic=topic, group=f"g_{uid()}", client_id=f"bench-{out.name}",
            bootstrap=bench.bootstrap, coordination=coordination,
            hb=HB_S, batch_size=BATCH, env=env,
        )  # fmt: skip
    command = [sys.executable, str(PEER_LOOPS), system, "--bootstrap-servers", bench.bootstrap,
               "--topic", topic, "--handler", setting.handler]  # fmt: skip
    if system in ("plain", "plain2"):
        command += ["--records", str(setting.records), "--partitions", str(PARTITIONS)]
        command += [x for k, v in setting.plain_kafka.items() for x in ("--kafka", f"{k}={v}")]
    else:
        command += ["--processes", str(ARROYO_PROCESSES), "--batch", str(BATCH)]
    return bench.procs.start(command, log, child_env(**env))


def baseline_root(bin_dir: Path) -> Path:
    """The checkout a baseline venv's bin directory belongs to (``ROOT/.venv/bin``)."""
    return bin_dir.resolve().parents[1]


def imported_from(bin_dir: Path) -> Path:
    """Where the baseline's Python imports marshal_workers from, with the PYTHONPATH its
    marshal-run gets (the root of the checkout holding the package)."""
    env = {**os.environ, "PYTHONPATH": str(baseline_root(bin_dir))}
    code = "import marshal_workers, pathlib; print(pathlib.Path(marshal_workers.__file__).parent)"
    # from / : no checkout on sys.path[0], as for a console script
    out = subprocess.run([str(bin_dir / "python"), "-c", code], env=env, capture_output=True,
                         text=True, check=True, cwd="/")  # fmt: skip
    return Path(out.stdout.strip()).resolve().parent


def earliest_per_partition(rows: list[dict[str, Any]]) -> dict[int, float]:
    """Each partition's earliest mark (a redelivered record marks again: the first counts)."""
    out: dict[int, float] = {}
    for row in rows:
        p = row["partition"]
        out[p] = min(out.get(p, row["monotonic"]), row["monotonic"])
    return out


def rss_mb(pid: int, marks: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    """In MB: the peak resident set of the processes that ran the handler (from their marks),
    and the largest of those and of the tree's live processes now (a supervisor, Arroyo's
    consumer)."""
    handler = [row["maxrss_kb"] * 1024 for row in marks if "maxrss_kb" in row]
    every = list(handler)
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        for p in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                if p.status() != psutil.STATUS_ZOMBIE:
                    every.append(p.memory_info().rss)
    return (max(handler) / 1e6 if handler else None, max(every) / 1e6 if every else None)


def cpu_account(pid: int, broker_s: float) -> dict[str, Any]:
    """Where the CPU went, in seconds since each process started: the process ``pid`` (the
    plain loop, a supervisor, Arroyo's consumer), a marshal-run's fork server and the children
    it forked (the handlers; their guardians are counted apart), anything else in the tree
    (``other``: plain2's loops while they run), the children of ``pid`` that ended and were
    waited for (``ended_children``: a plain2 loop done first); of the handlers' processes also
    the part their threads other than the main one took (``*_threads``: librdkafka's, the
    watchdog); ``broker_s`` the broker's over the same run;
    and the context switches of the handlers' main threads (the plain loop's own when it has no
    children). Read while the processes live, once the last record is handled.

    A process's seconds are its user and system time (the threads that ended included), which
    Linux samples at the timer tick; that misses the short bursts of librdkafka's threads (0
    there), so the ``*_threads`` split is the scheduler's own count of each live thread
    (``se.sum_exec_runtime``, /proc/PID/task/*/sched; Linux only)."""
    seconds: dict[str, float] = {}
    switches = [0, 0]  # voluntary, involuntary

    def count(key: str, value: float) -> None:
        seconds[key] = seconds.get(key, 0.0) + value

    def add(kind: str, proc: psutil.Process, handler: bool = False) -> None:
        with contextlib.suppress(psutil.Error, OSError):
            t = proc.cpu_times()
            count(kind, t.user + t.system)
            if handler:
                ran = thread_runtimes(proc.pid) or {}
                count(f"{kind}_threads", sum(s for tid, s in ran.items() if tid != proc.pid))
                ctx = proc.num_ctx_switches()  # the main thread's (/proc/PID/status)
                switches[0] += ctx.voluntary
                switches[1] += ctx.involuntary

    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        below = root.children()
        add("main", root, handler=not below)
        t = root.cpu_times()  # its children that ended and were waited for (plain2's loops)
        if t.children_user + t.children_system:
            count("ended_children", t.children_user + t.children_system)
        for proc in below:
            with contextlib.suppress(psutil.Error):
                server = "forkserver" in " ".join(proc.cmdline())
                add("forkserver" if server else "other", proc)
                for child in proc.children():
                    add("children" if server else "other", child, handler=server)
                    with contextlib.suppress(psutil.Error):
                        for rest in child.children(recursive=True):
                            add("guardians" if server else "other", rest)
    return {
        **{k: round(v, 2) for k, v in seconds.items()},
        "broker": round(broker_s, 2),
        "ctx_voluntary": switches[0],
        "ctx_involuntary": switches[1],
    }


def thread_runtimes(pid: int) -> dict[int, float] | None:
    """Each live thread's CPU seconds by the scheduler's count (Linux), or None without it."""
    tasks = Path(f"/proc/{pid}/task")
    if not tasks.is_dir():
        return None
    out: dict[int, float] = {}
    for task in tasks.iterdir():
        with contextlib.suppress(OSError, ValueError):
            for line in (task / "sched").read_text().splitlines():
                if line.startswith("se.sum_exec_runtime"):
                    out[int(task.name)] = float(line.split(":")[1]) / 1e3  # ms -> s
    return out or None


def process_cpu_s(pid: int | None) -> float:
    """A process's CPU seconds so far (0 if there is none or it is gone)."""
    if pid is None:
        return 0.0
    with contextlib.suppress(psutil.Error):
        t = psutil.Process(pid).cpu_times()
        return float(t.user + t.system)
    return 0.0


def measure(bench: Bench, system: str, setting: Setting, topic: str) -> dict[str, Any]:
    """One run of ``system`` over the whole topic: its figures, or ``{"error": ...}``."""
    out = bench.work / f"{setting.key}-{system}-{uid()}"
    out.mkdir(parents=True)
    coordination = coordination_topic(bench.bootstrap) if system in MARSHAL_SYSTEMS else ""
    launched = time.monotonic()
    broker_before = process_cpu_s(bench.broker_pid)
    proc = launch(bench, system, setting, topic, out, coordination)
    # The end: the plain loop's N-th record; each child's (= partition's) last; Arroyo's
    # partitions' last offsets. Every partition's start: each child's first record; Arroyo's
    # partitions' offset 0 (the plain loop's one process has no per-partition mark).
    ends_of = {"plain": ("last", 1), "plain2": ("last", 2), "arroyo": ("pend", PARTITIONS)}
    end_kind, expected = ends_of.get(system, ("last", PARTITIONS))
    try:
        done = wait_until(
            lambda: (
                len(earliest_per_partition(read_json_files(out, end_kind))) >= expected
                or (exited(proc) and "exited")
            ),
            bench.timeout_s,
            poll=0.05,
        )
        ends = earliest_per_partition(read_json_files(out, end_kind))
        if len(ends) < expected:
            why = "exited early" if done == "exited" else f"not done in {bench.timeout_s:.0f} s"
            log = bench.work / f"{out.name}.log"
            return {"error": f"{why}: {len(ends)}/{expected} ends marked", "log": tail(log)}
        cpu = cpu_account(proc.pid, process_cpu_s(bench.broker_pid) - broker_before)
        firsts = read_json_files(out, "first")
        handler_rss, any_rss = rss_mb(proc.pid, [*read_json_files(out, end_kind), *firsts])
        partition_firsts = earliest_per_partition(
            read_json_files(out, "pfirst") if system == "arroyo" else firsts
        )
        start = min(r["monotonic"] for r in [*firsts, *read_json_files(out, "pfirst")])
        every = None
        if system != "plain" and len(partition_firsts) == PARTITIONS:
            every = max(partition_firsts.values()) - launched
        return {
            "records_per_s": setting.records / (max(ends.values()) - start),
            "launch_to_first_s": start - launched,
            "launch_to_every_partition_s": every,
            "handler_rss_mb": handler_rss,
            "max_rss_mb": any_rss,
            "cpu_s": cpu,
        }
    finally:
        bench.procs.stop(proc, timeout=10)


def warm_up(bench: Bench, setting: Setting, topic: str) -> None:
    """One plain read of the whole topic with the trivial handler, not counted."""
    res = measure(bench, "plain", Setting("warm", "warm-up", "count", setting.records), topic)
    note(f"  warm-up read of {topic} (not counted): {show(res)}")


def run(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    chosen = settings(args)
    topics: dict[str, str] = {}
    for setting in chosen:
        topics[setting.key] = create_topic(bench.bootstrap, PARTITIONS)
        seconds = produce_bulk(bench.bootstrap, topics[setting.key], setting.records, PARTITIONS)
        note(f"produced {setting.records:,} records to {topics[setting.key]} in {seconds:.1f} s")
        warm_up(bench, setting, topics[setting.key])
    # What the cores gave two bare processes of the work loop just before the rounds and just
    # after them (one round each, `bench/cores.py`): the CPU-bound ratios' reference, noisy.
    measured = args.cores_seconds > 0 and any(s.key == "cpu" for s in chosen)
    cores_before = scaling(args.cores_seconds) if measured else None
    rounds: dict[str, dict[str, list[dict[str, Any]]]] = {s.key: {} for s in chosen}
    systems = [s for s in SYSTEMS if s in args.systems]
    for r in range(args.rounds):
        order = systems[r % len(systems) :] + systems[: r % len(systems)]
        for setting in chosen:
            for system in order:
                if system in setting.skip:
                    continue
                res = measure(bench, system, setting, topics[setting.key])
                rounds[setting.key].setdefault(system, []).append(res)
                note(f"round {r + 1}, {setting.key}: {system:6} {show(res)}")
    cores_after = scaling(args.cores_seconds) if measured else None
    return {
        "work_us": args.work_us,
        "work_iters": bench.work_iters,
        "partitions": PARTITIONS,
        "rounds": args.rounds,
        "settings": {
            s.key: {
                "label": s.label,
                "records": s.records,
                "handler": s.handler,
                "plain_kafka": s.plain_kafka,
                "topic": topics[s.key],
            }
            for s in chosen
        },
        "runs": rounds,
        "summary": summarise(rounds),
        "cores": {"before": cores_before, "after": cores_after},
    }


def summarise(rounds: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Per setting and system: medians over the rounds that gave a figure, and the medians of
    the round-by-round throughput ratios to each other system (``ratios``; ``ratio_to_plain``
    the one to the plain loop)."""
    out: dict[str, Any] = {}
    for key, by_system in rounds.items():
        out[key] = {}
        for system, runs in by_system.items():
            ok = [x for x in runs if "error" not in x]
            row: dict[str, Any] = {"rounds_ok": len(ok), "rounds": len(runs)}
            for name in ("records_per_s", "launch_to_first_s", "launch_to_every_partition_s",
                         "handler_rss_mb", "max_rss_mb"):  # fmt: skip
                values = [x[name] for x in ok if x.get(name) is not None]
                row[name] = statistics.median(values) if values else None
            row["ratios"] = {
                other: round_ratios(runs, other_runs)
                for other, other_runs in by_system.items()
                if other != system
            }
            row["ratio_to_plain"] = row["ratios"].get("plain", 1.0 if system == "plain" else None)
            out[key][system] = row
    return out


def round_ratios(runs: list[dict[str, Any]], others: list[dict[str, Any]]) -> float | None:
    """The median over rounds of ``runs``' throughput over ``others``' in the same round."""
    ratios = [
        x["records_per_s"] / o["records_per_s"]
        for x, o in zip(runs, others, strict=False)
        if "error" not in x and "error" not in o
    ]
    return statistics.median(ratios) if ratios else None


def show(res: dict[str, Any]) -> str:
    if "error" in res:
        return f"no figure: {res['error']}\n{res.get('log', '')}"
    every = res["launch_to_every_partition_s"]
    return (
        f"{res['records_per_s']:,.0f} records/s; launch to first record "
        f"{res['launch_to_first_s']:.2f} s, to every partition "
        + (f"{every:.2f} s" if every is not None else "-")
        + (f"; RSS {res['handler_rss_mb']:.0f} MB" if res["handler_rss_mb"] else "")
        + (f" (any process {res['max_rss_mb']:.0f} MB)" if res["max_rss_mb"] else "")
        + "; CPU s "
        + ", ".join(f"{k} {v}" for k, v in res.get("cpu_s", {}).items())
    )


def note(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def exit_on_signal(signum: int, frame: object) -> None:
    """SIGTERM or SIGHUP: leave through the ``finally`` blocks, which kill what was started."""
    raise SystemExit(128 + signum)


def main() -> None:
    signal.signal(signal.SIGTERM, exit_on_signal)
    signal.signal(signal.SIGHUP, exit_on_signal)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bootstrap-servers", help="an existing Kafka (default: start a local one)")
    ap.add_argument("--records", type=int, default=240_000, help="records, CPU-bound setting")
    ap.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS,
                    help="the topics' partitions: one child each (1: one child alone beside a "
                    "plain loop of one partition; plain2 needs an even count)")  # fmt: skip
    ap.add_argument("--trivial-records", type=int, help="records, trivial (10 x --records)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work-us", type=float, default=20.0, help="CPU-bound handler's work")
    ap.add_argument("--work-iters", type=int, help="its loop count (default: calibrated here)")
    ap.add_argument("--systems", type=lambda s: s.split(","), default=list(DEFAULT_SYSTEMS),
                    help="a subset of " + ",".join(SYSTEMS))  # fmt: skip
    ap.add_argument("--settings", type=lambda s: s.split(","), default=["cpu", "trivial", "batch"],
                    help="a subset of cpu,trivial,batch")  # fmt: skip
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    ap.add_argument("--cores-seconds", type=float, default=3.0,
                    help="with the cpu setting, just before the rounds and just after them: the "
                    "work loop in one bare process this long, then in two at once "
                    "(bench/cores.py): what the cores gave two processes then, one noisy round "
                    "each (0: not measured)")  # fmt: skip
    ap.add_argument("--plot", default=str(REPO / "docs" / "peers.png"), help="the PNG's path")
    ap.add_argument("--timeout", type=float, help="seconds per run (default from the records)")
    ap.add_argument(
        "--baseline",
        type=Path,
        help="another build's venv bin directory (a "
        "worktree of main, say): alo-base and amo-base run its marshal-run in the "
        "same interleaved rounds: a change measured beside what it changes",
    )
    args = ap.parse_args()
    global PARTITIONS  # noqa: PLW0603 (the script's one setting of it, before any use)
    PARTITIONS = args.partitions
    if "plain2" in args.systems and PARTITIONS % 2:
        ap.error("--systems plain2 needs an even --partitions")
    if args.baseline is None:
        args.systems = [s for s in args.systems if s not in BASELINE]
    elif not (args.baseline / "marshal-run").exists():
        ap.error(f"--baseline {args.baseline}: no marshal-run there")
    elif (found := imported_from(args.baseline)) != baseline_root(args.baseline):
        ap.error(f"--baseline {args.baseline} imports marshal_workers from {found}, not its own")
    elif not set(BASELINE) & set(args.systems):
        args.systems += [s for s in BASELINE if s.split("-")[0] in args.systems]
    if "plain" not in args.systems:
        ap.error("--systems must include plain (the ratios' base)")
    iters = args.work_iters or calibrate(args.work_us)
    note(f"work handler: {iters} loop turns per record (about {args.work_us:g} µs here)")
    biggest = max(s.records for s in settings(args))
    timeout = args.timeout or max(120.0, biggest / 1500)
    procs = Processes()
    with tempfile.TemporaryDirectory(prefix="marshal-bench-peers-") as tmp:
        work = Path(tmp)
        cluster = None
        broker_pid = None
        try:
            bootstrap = args.bootstrap_servers
            if bootstrap is None:
                cluster = start_cluster(StartOptions(directory=work / "kafka", nodes=1))
                bootstrap = cluster.bootstrap
                status = cluster_status(work / "kafka")
                broker_pid = status.state.nodes[0].pid if status is not None else None
                note(f"local Kafka (1 node) at {bootstrap}")
            bench = Bench(bootstrap, procs, work, iters, timeout, args.baseline, broker_pid)
            doc = run(bench, args)
        finally:
            for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                signal.signal(signum, signal.SIG_IGN)  # a second signal must not cut this short
            procs.kill_all()
            if cluster is not None:
                cluster.stop()
    doc["plot"] = str(plot(doc, Path(args.plot)))
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(table(doc))
        print(f"\nplot: {doc['plot']}")


if __name__ == "__main__":
    main()
