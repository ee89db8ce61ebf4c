"""Benchmark: the runtime against plain confluent-kafka, measured side by side in one run.

    .venv/bin/python bench/runtime.py [--bootstrap-servers HOST:PORT] [--records 500000]
                                      [--rounds 3] [--skip-failover] [--skip-default-session]

1. Throughput of one child against a plain confluent-kafka loop on the same data: N small
   records in one partition, handled by the same trivial handler (`bench.handlers.count`) in
   (a) a plain loop (``assign()`` at offset 0, ``consume(500)`` batches), (b) ``marshal-run
   --mode alo`` and (c) ``marshal-run --mode amo --batch-size 500``. Each rate is taken by the
   handler itself, from its first to its N-th record (so process and consumer start-up are not
   counted; HB = 5 s so that heartbeats do not weigh). The plain loop hands the handler the
   confluent-kafka ``Message`` itself (no copy), the child its `Record`. Both sides get the
   same consumer settings, in two variants: librdkafka's ``fetch.queue.backoff.ms`` of 1 s
   (which throttles whoever the fetcher outruns, so both end up waiting on a timer) and 10 ms
   (the child's default; then the plain loop is CPU-bound in the handler loop and the
   comparison shows the child's own cost). Every round runs each variant's three in turn, each
   in a fresh process with a fresh group and coordination topic; the best round of each counts,
   and the ratios are also shown round by round. Also: CPU time per record of each consuming
   process (all threads, librdkafka's included), which a busy machine disturbs less than
   rates, and the AMO grant's log I/O per batch (append ClaimingMessages, fold to it, append
   the committing Heartbeat), replayed in-process as the supervisor does it.
2. Failover after kill -9: (a) two ``marshal-run`` supervisors (HB = 1 s) sharing 4 partitions
   with a steady producer (the ledger handler, ``--handler ledger``); (b) two plain consumers in a
   real consumer group (``subscribe()``), with librdkafka's default ``session.timeout.ms``
   (45 s) and with the broker's minimum (``group.min.session.timeout.ms``, 6 s by default; the
   local broker does not change it). The figure: from the kill to the first record of each of
   the killed member's partitions handled by the survivor.
3. Memory (RSS and USS) of each child and of the supervisor, with 4 partitions claimed by one
   supervisor; the time from each "child_started" log line to that child's first record, and
   from starting ``marshal-run`` to its first handled record (cold start).

Prints figures; asserts nothing about time (these machines are noisy); exits 0. Without
``--bootstrap-servers`` it starts a local one-node Kafka in a temporary directory and stops it.
Every process it starts is killed before it exits, whatever happens.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from marshal_workers.clients.rdkafka import RDKAFKA_LOG
from marshal_workers.localkafka import StartOptions, start_cluster
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.kafkalog import KafkaLog
from marshal_workers.log.topicadmin import ensure_coordination_topic
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.members import is_live
from marshal_workers.protocol.rationalizer import RationalizerConfig
from marshal_workers.protocol.wire import (
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    coordination_partition,
    encode,
    record_key,
)

REPO = Path(__file__).resolve().parents[1]
MARSHAL_RUN = Path(sys.executable).with_name("marshal-run")
HANDLER = "bench.handlers:count"
LEDGER = "ledger"
BATCH = 500
ALO_TARGET = 0.9
AMO_TARGET = 0.5
FAILOVER_HB_S = 1.0
GROUP_MIN_SESSION_MS = 6000  # Kafka's group.min.session.timeout.ms default (not overridden)
LIBRDKAFKA_SESSION_MS = 45000  # librdkafka's session.timeout.ms default
LIBRDKAFKA_HEARTBEAT_MS = 3000  # librdkafka's heartbeat.interval.ms default
# Consumer settings, the same on both sides (plain loop; marshal-run's [kafka] table), one
# variant after the other. librdkafka stops fetching for fetch.queue.backoff.ms once its queue
# passes queued.min.messages: its default (1 s) throttles any consumer that the fetcher outruns
# for a moment, the plain loop included; the child now defaults to 10 ms.
VARIANTS: dict[str, dict[str, str]] = {
    "backoff 1 s": {"fetch.queue.backoff.ms": "1000"},
    "backoff 10 ms": {"fetch.queue.backoff.ms": "10"},
}
PRODUCE_RATE = 400  # records/s over all partitions while measuring failover


def uid() -> str:
    return uuid.uuid4().hex[:8]


def child_env(**extra: str) -> dict[str, str]:
    """The environment of every process started here: the repository root importable."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


# ---------------------------------------------------------------- processes


class Processes:
    """Every process started here, each in its own session; `kill_all` ends them and their
    children (a supervisor's children lead their own process groups)."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.orphans: list[int] = []  # children of a process killed with kill9
        self.ended: set[subprocess.Popen[bytes]] = set()  # those whose tree was killed

    def start(
        self, command: list[str], log: Path, env: dict[str, str], cwd: Path = REPO
    ) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                command, env=env, stdout=out, stderr=out, start_new_session=True, cwd=cwd
            )
        self.procs.append(proc)
        return proc

    def kill9(self, proc: subprocess.Popen[bytes]) -> None:
        """kill -9 the process itself (not its group: a crash, as the tests do it). Its children
        should die with it (PR_SET_PDEATHSIG); `kill_all` makes sure."""
        with contextlib.suppress(psutil.Error):
            self.orphans += [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop(self, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
        """SIGTERM and wait; then kill it and whatever it started."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout)
        self._kill_tree(proc)

    def _kill_tree(self, proc: subprocess.Popen[bytes]) -> None:
        if proc in self.ended:  # once only: its pid, reaped, may name another process now
            return
        # Not reaped yet (running, or a zombie: `exited` looks without reaping), its pid and
        # group id are still its own; reaped before (a `poll()` elsewhere), they may be another
        # session leader's by now, which must not be killed.
        unreaped = proc.returncode is None
        pids: list[int] = []
        with contextlib.suppress(psutil.Error):
            if unreaped:
                pids = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        # its group too, even once it has exited: what it started and was not found above (its
        # children, reparented once it exited) is still there
        if unreaped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        self.ended.add(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        for pid in pids:  # PR_SET_PDEATHSIG children: make sure they went
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).wait(5)

    def kill_all(self) -> None:
        for proc in self.procs:
            self._kill_tree(proc)
        for pid in self.orphans:
            with contextlib.suppress(psutil.Error):
                orphan = psutil.Process(pid)
                if "multiprocessing" in " ".join(orphan.cmdline()):  # not a reused pid
                    orphan.kill()
                    orphan.wait(5)


def worker_children(pid: int) -> list[psutil.Process]:
    """The supervisor's partition workers: its fork server's children (not the fork server,
    multiprocessing's resource tracker, or the children's group guardians)."""
    out = []
    with contextlib.suppress(psutil.NoSuchProcess):
        for child in psutil.Process(pid).children():
            with contextlib.suppress(psutil.Error):
                if "multiprocessing.forkserver" in " ".join(child.cmdline()):
                    out.extend(child.children())
    return out


def exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether ``proc`` has ended, without reaping it: its pid (and group id) stay its own
    until `Processes` kills what it left and reaps it."""
    if proc.returncode is not None:
        return True
    try:
        found = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped by someone else
        return True
    return found is not None


def wait_until(check: Callable[[], Any], timeout: float, poll: float = 0.05) -> Any:
    """``check()``'s first truthy value, or None after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value or None
        time.sleep(poll)


# ---------------------------------------------------------------- Kafka helpers


def create_topic(bootstrap: str, partitions: int) -> str:
    topic = f"bench_{uid()}"
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": RDKAFKA_LOG})  # type: ignore[dict-item]
    admin.create_topics([NewTopic(topic, partitions, -1)])[topic].result(30)
    return topic


def coordination_topic(bootstrap: str) -> str:
    name = f"__marshal_bench_{uid()}"
    ensure_coordination_topic(bootstrap, name, 2)
    return name


def produce_bulk(bootstrap: str, topic: str, n: int, partitions: int = 1) -> float:
    """Write ``n`` small records round robin over ``partitions``; return the seconds it took."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "logger": RDKAFKA_LOG,
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, b"v%d" % i, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise SystemExit("the producer did not flush")
    return time.perf_counter() - start


class SteadyProducer:
    """Produces about ``rate`` records/s round robin over the partitions, in a thread."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int) -> None:
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "logger": RDKAFKA_LOG}
        )
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.running = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.sent = 0

    def __enter__(self) -> SteadyProducer:
        self.running.set()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.running.clear()
        self.thread.join(10)
        self.producer.flush(10)

    def _loop(self) -> None:
        step = max(1, self.rate // 20)
        while self.running.is_set():
            for _ in range(step):
                self.producer.produce(
                    self.topic, b"r%d" % self.sent, partition=self.sent % self.partitions
                )
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.05)


def marshal_run(
    procs: Processes,
    log: Path,
    *,
    handler: str,
    mode: str,
    topic: str,
    group: str,
    client_id: str,
    bootstrap: str,
    coordination: str,
    hb: float,
    batch_size: int,
    env: dict[str, str],
    extra: list[str] | None = None,
    binary: Path | None = None,
    cwd: Path = REPO,
) -> subprocess.Popen[bytes]:
    """Start ``marshal-run`` (this venv's, or ``binary``) with the bench's settings, in ``cwd``
    (the working directory goes on the supervisor's and its fork server's import path: another
    build runs in its own checkout, or its children import this checkout's package)."""
    command = [
        str(binary or MARSHAL_RUN),
        "--handler",
        handler,
        "--mode",
        mode,
        "--topic",
        topic,
        "--group",
        group,
        "--client-id",
        client_id,
        "--bootstrap-servers",
        bootstrap,
        "--coordination-topic",
        coordination,
        "--heartbeat-interval",
        str(hb),
        "--batch-size",
        str(batch_size),
        "--log-format",
        "json",
        *(extra or []),
    ]
    return procs.start(command, log, child_env(**env), cwd=cwd)


def read_json_files(directory: Path, prefix: str) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(directory.glob(f"{prefix}-*.json")):
        with contextlib.suppress(OSError, ValueError):
            rows.append(json.loads(path.read_text()))
    return rows


def log_events(log: Path, event: str) -> list[dict[str, Any]]:
    """The JSON log lines of ``event`` in a supervisor's log file."""
    rows = []
    with contextlib.suppress(OSError):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    row = json.loads(line)
                    if row.get("event") == event:
                        rows.append(row)
    return rows


def wall(iso: str) -> float:
    return datetime.datetime.fromisoformat(iso).timestamp()


def tail(log: Path, lines: int = 8) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    return ""


# ---------------------------------------------------------------- 1. throughput


@dataclass
class Measure:
    """One throughput run: records/s, and CPU microseconds per record of the consuming process
    (all its threads) and, under marshal-run, of the supervisor, between the first and the
    n-th record."""

    rate: float
    cpu_us: float
    supervisor_cpu_us: float | None


def cpu_seconds(pid: int) -> float | None:
    with contextlib.suppress(psutil.Error):
        t = psutil.Process(pid).cpu_times()
        return float(t.user + t.system)
    return None


def run_rate(
    procs: Processes,
    work: Path,
    label: str,
    n: int,
    start: Callable[[Path], subprocess.Popen[bytes]],
    supervised: bool,
) -> Measure | None:
    """Run one measurement in a fresh process; from its first to its n-th record."""
    out = work / label
    out.mkdir(parents=True)
    proc = start(out)
    timeout = max(180.0, n / 2000)
    sup_cpu: list[float | None] = []
    try:
        if supervised and wait_until(lambda: read_json_files(out, "first"), 60, poll=0.02):
            sup_cpu.append(cpu_seconds(proc.pid))
        done = wait_until(
            lambda: read_json_files(out, "last") or (exited(proc) and "exited"),
            timeout,
            poll=0.02,
        )
        if supervised:
            sup_cpu.append(cpu_seconds(proc.pid))
    finally:
        procs.stop(proc)
    last = read_json_files(out, "last")
    first = read_json_files(out, "first")
    if not last or not first:
        why = "exited early" if done == "exited" else f"not done within {timeout:.0f} s"
        print(f"  {label}: {why}; log tail:\n{tail(work / f'{label}.log')}")
        return None
    records = n - 1
    sup = None
    if len(sup_cpu) == 2 and sup_cpu[0] is not None and sup_cpu[1] is not None:
        sup = (sup_cpu[1] - sup_cpu[0]) / records * 1e6
    return Measure(
        records / (last[0]["monotonic"] - first[0]["monotonic"]),
        (last[0]["cpu"] - first[0]["cpu"]) / records * 1e6,
        sup,
    )


def throughput(
    bootstrap: str, procs: Processes, work: Path, n: int, rounds: int
) -> dict[tuple[str, str], list[Measure | None]]:
    """Every (consumer settings, kind) measured ``rounds`` times, the kinds in turn."""
    topic = create_topic(bootstrap, 1)
    seconds = produce_bulk(bootstrap, topic, n)
    print(f"  produced {n:,} records to {topic}[0] in {seconds:.1f} s")
    env = {"BENCH_TARGET": str(n)}
    runs: dict[tuple[str, str], list[Measure | None]] = {}

    def plain(out: Path, label: str, kafka: dict[str, str]) -> subprocess.Popen[bytes]:
        command = [sys.executable, str(Path(__file__).resolve()), "--role", "plain"]
        command += ["--bootstrap-servers", bootstrap, "--topic", topic, "--records", str(n)]
        for key, value in kafka.items():
            command += ["--kafka", f"{key}={value}"]
        return procs.start(command, work / f"{label}.log", child_env(BENCH_OUT=str(out), **env))

    def marshal(out: Path, label: str, mode: str, kafka: dict[str, str]) -> subprocess.Popen[bytes]:
        extra = []
        if kafka:  # the [kafka] table reaches the child's consumer (and the supervisor's clients)
            toml = work / f"{label}.toml"
            toml.write_text("[kafka]\n" + "".join(f'"{k}" = "{v}"\n' for k, v in kafka.items()))
            extra = ["--config", str(toml)]
        return marshal_run(
            procs,
            work / f"{label}.log",
            handler=HANDLER,
            mode=mode,
            topic=topic,
            group=f"g_{uid()}",
            client_id=f"bench-{label}",
            bootstrap=bootstrap,
            coordination=coordination_topic(bootstrap),
            hb=5.0,
            batch_size=BATCH,
            env={"BENCH_OUT": str(out), **env},
            extra=extra,
        )

    # One read not counted, so that every measured one finds the data read before.
    warm = run_rate(procs, work, "warm-up", n, partial(plain, label="warm-up", kafka={}), False)
    print(f"  warm-up (not counted): plain {show_measure(warm)}", flush=True)
    for r in range(1, rounds + 1):
        for variant, kafka in VARIANTS.items():
            for kind in ("plain", "alo", "amo"):
                label = f"{kind}-{variant.replace(' ', '')}-{r}"
                if kind == "plain":
                    starter = partial(plain, label=label, kafka=kafka)
                else:
                    starter = partial(marshal, label=label, mode=kind, kafka=kafka)
                m = run_rate(procs, work, label, n, starter, supervised=kind != "plain")
                runs.setdefault((variant, kind), []).append(m)
                print(f"  round {r}, {variant}: {kind:5} {show_measure(m)}", flush=True)
    return runs


def show_measure(m: Measure | None) -> str:
    if m is None:
        return "no figure"
    text = f"{m.rate:,.0f} records/s, CPU {m.cpu_us:.2f} us/record"
    if m.supervisor_cpu_us is not None:
        text += f" (+ supervisor {m.supervisor_cpu_us:.2f})"
    return text


def grant_breakdown(bootstrap: str, batches: int = 300) -> dict[str, float]:
    """The AMO grant's log I/O, replayed in-process as the supervisor does it per batch: append
    ClaimingMessages, fold up to it (checking the verdict), append the committing Heartbeat.
    Median milliseconds of each step and of the whole."""
    coordination = coordination_topic(bootstrap)
    log = KafkaLog(bootstrap, coordination, client_id="bench-grant")
    try:
        reader = FoldedLog(log, RationalizerConfig(5000, log.num_partitions))
        reader.catch_up(10)
        fields = (int(time.time()), "bench-i", "bench-grant", "g", "t", 0)
        part = coordination_partition("t", 0, log.num_partitions)

        def send(msg: Any, timeout_s: float) -> Any:
            return log.append(part, record_key(msg), encode(msg), timeout_s)

        verdict, _ = reader.wait_for(send(ClaimingPartition(*fields), 5.0), 10)
        if not isinstance(verdict, ev.ClaimGranted):
            raise SystemExit(f"grant breakdown: claim refused: {verdict}")
        steps: dict[str, list[float]] = {"reserve": [], "fold": [], "commit": [], "total": []}
        for i in range(1, batches + 1):
            t0 = time.perf_counter()
            appended = send(ClaimingMessages(*fields, i * BATCH), 5.0)
            t1 = time.perf_counter()
            verdict, _ = reader.wait_for(appended, 10)
            t2 = time.perf_counter()
            if not isinstance(verdict, ev.MessagesClaimed):
                raise SystemExit(f"grant breakdown: reservation refused: {verdict}")
            send(Heartbeat(*fields, i * BATCH), 1.0)
            t3 = time.perf_counter()
            for name, d in (("reserve", t1 - t0), ("fold", t2 - t1), ("commit", t3 - t2)):
                steps[name].append(d)
            steps["total"].append(t3 - t0)
        return {name: statistics.median(v) * 1000 for name, v in steps.items()}
    finally:
        log.close()


def plain_consumer(bootstrap: str, topic: str, n: int, kafka: dict[str, str]) -> None:
    """The plain loop (run as its own process): assign at 0, consume(500), the same handler."""
    sys.path.insert(0, str(REPO))
    from bench.handlers import count  # noqa: PLC0415 (needs the root on sys.path)

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"plain_{uid()}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            **kafka,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    handled = 0
    try:
        while handled < n:
            for msg in consumer.consume(BATCH, 0.2):
                if msg.error() is None:
                    count(msg, None)
                    handled += 1
    finally:
        consumer.close()


# ---------------------------------------------------------------- 2. failover


def read_ledger(directory: Path) -> list[dict[str, Any]]:
    rows = []
    for path in directory.glob("ledger-*.jsonl"):
        with contextlib.suppress(OSError):
            for line in path.read_text(errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    rows.append(json.loads(line))
    return rows


class Holders:
    """Who holds which data partition, per the coordination log (as tests/integration/fleet)."""

    def __init__(self, bootstrap: str, coordination: str, hb: float) -> None:
        self.log = KafkaLog(bootstrap, coordination)
        self.reader = FoldedLog(
            self.log, RationalizerConfig(int(hb * 1000), self.log.num_partitions)
        )
        self.hb_ms = int(hb * 1000)

    def __call__(self, topic: str) -> dict[int, str]:
        self.reader.poll(0.2)
        now = int(time.time() * 1000)
        out: dict[int, str] = {}
        for world in self.reader.worlds.values():
            for key, state in world.claims.items():
                holder = state.holder_client
                if key.topic == topic and holder is not None and is_live(state, now, self.hb_ms):
                    out[key.partition] = holder
        return out

    def close(self) -> None:
        self.log.close()


def failover_marshal(bootstrap: str, procs: Processes, work: Path) -> dict[str, Any]:
    """kill -9 one of two supervisors; seconds to the survivor's first record on each of its
    partitions."""
    topic = create_topic(bootstrap, 4)
    coordination = coordination_topic(bootstrap)
    group = f"g_{uid()}"
    ledger = work / "failover-ledger"
    holders = Holders(bootstrap, coordination, FAILOVER_HB_S)
    members = {}
    try:
        with SteadyProducer(bootstrap, topic, 4, PRODUCE_RATE):
            for name in ("a", "b"):
                members[name] = marshal_run(
                    procs,
                    work / f"failover-{name}.log",
                    handler=LEDGER,
                    mode="alo",
                    topic=topic,
                    group=group,
                    client_id=f"bench-{name}",
                    bootstrap=bootstrap,
                    coordination=coordination,
                    hb=FAILOVER_HB_S,
                    batch_size=50,
                    env={"MARSHAL_LEDGER_DIR": str(ledger)},
                )
            shared = wait_until(
                lambda: sorted(Counter(holders(topic).values()).values()) == [2, 2], 60, poll=0.2
            )
            if not shared:
                return {"error": f"never shared 2/2: holders {holders(topic)}"}
            time.sleep(2.0)  # steady state: both handling
            owned = holders(topic)
            killed = [p for p, c in owned.items() if c == "bench-a"]
            t_kill = time.time()
            procs.kill9(members["a"])

            def survivor_on_all() -> dict[int, float] | None:
                firsts: dict[int, float] = {}
                for row in read_ledger(ledger):
                    p = row["partition"]
                    if (
                        row["topic"] == topic
                        and p in killed
                        and row["client_id"] == "bench-b"
                        and row["start"] > t_kill
                    ):
                        firsts[p] = min(firsts.get(p, row["start"]), row["start"])
                return firsts if len(firsts) == len(killed) else None

            firsts = wait_until(survivor_on_all, 30, poll=0.1)
            if not firsts:
                return {"error": "the survivor did not take every partition within 30 s"}
            delays = {p: t - t_kill for p, t in sorted(firsts.items())}
            return {"partitions": delays, "max": max(delays.values())}
    finally:
        for proc in members.values():
            procs.stop(proc, timeout=10)
        holders.close()


def group_consumer(bootstrap: str, topic: str, group: str, session_ms: int, hb_ms: int) -> None:
    """A plain group member (run as its own process): subscribe(); for every record a line
    ``R partition offset time.time()``, and ``A partitions...`` on each assignment, to stdout."""
    out = sys.stdout

    def on_assign(consumer: Any, partitions: list[TopicPartition]) -> None:
        out.write("A " + " ".join(str(tp.partition) for tp in partitions) + f" {time.time()}\n")
        out.flush()

    def on_revoke(consumer: Any, partitions: list[TopicPartition]) -> None:
        out.write(f"V {time.time()}\n")
        out.flush()

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": hb_ms,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    try:
        while True:
            lines = [
                f"R {m.partition()} {m.offset()} {time.time()}\n"
                for m in consumer.consume(BATCH, 0.1)
                if m.error() is None
            ]
            if lines:
                out.write("".join(lines))
                out.flush()
    finally:
        consumer.close()


def parse_group_log(path: Path) -> tuple[list[int] | None, list[tuple[int, float]]]:
    """(the latest assignment, every record as (partition, time))."""
    assignment: list[int] | None = None
    records: list[tuple[int, float]] = []
    with contextlib.suppress(OSError):
        for line in path.read_text(errors="replace").splitlines():
            parts = line.split()
            if not parts:
                continue
            with contextlib.suppress(ValueError, IndexError):
                if parts[0] == "A":
                    assignment = sorted(int(p) for p in parts[1:-1])
                elif parts[0] == "V":
                    assignment = []
                elif parts[0] == "R":
                    records.append((int(parts[1]), float(parts[3])))
    return assignment, records


def failover_group(
    bootstrap: str, procs: Processes, work: Path, session_ms: int, hb_ms: int
) -> dict[str, Any]:
    """kill -9 one of two plain group members; seconds to the survivor's first record on each
    of its partitions."""
    topic = create_topic(bootstrap, 4)
    group = f"g_{uid()}"
    logs = {name: work / f"group-{session_ms}-{name}.log" for name in ("a", "b")}
    members = {}
    try:
        with SteadyProducer(bootstrap, topic, 4, PRODUCE_RATE):
            for name in ("a", "b"):
                command = [sys.executable, str(Path(__file__).resolve()), "--role", "group"]
                command += ["--bootstrap-servers", bootstrap, "--topic", topic, "--group", group]
                command += ["--session-ms", str(session_ms), "--heartbeat-ms", str(hb_ms)]
                members[name] = procs.start(command, logs[name], child_env())
                if name == "a":  # a first, alone; then b joins and the group rebalances 2/2
                    wait_until(lambda: parse_group_log(logs["a"])[0], 30, poll=0.1)

            def shared() -> bool:
                a, b = parse_group_log(logs["a"]), parse_group_log(logs["b"])
                return (
                    a[0] is not None
                    and b[0] is not None
                    and len(a[0]) == 2
                    and len(b[0]) == 2
                    and bool(b[1])
                    and bool(a[1])
                )

            if not wait_until(shared, 60, poll=0.2):
                return {"error": "the group never shared 2/2"}
            time.sleep(2.0)
            killed = parse_group_log(logs["a"])[0] or []
            t_kill = time.time()
            procs.kill9(members["a"])

            def survivor_on_all() -> dict[int, float] | None:
                firsts: dict[int, float] = {}
                for p, t in parse_group_log(logs["b"])[1]:
                    if p in killed and t > t_kill and p not in firsts:
                        firsts[p] = t
                return firsts if len(firsts) == len(killed) else None

            firsts = wait_until(survivor_on_all, session_ms / 1000 + 60, poll=0.1)
            if not firsts:
                return {"error": "the survivor did not take every partition"}
            delays = {p: t - t_kill for p, t in sorted(firsts.items())}
            return {"partitions": delays, "max": max(delays.values())}
    finally:
        for proc in members.values():
            procs.stop(proc, timeout=10)


# ---------------------------------------------------------------- 3. memory and start-up


def memory_and_start(bootstrap: str, procs: Processes, work: Path) -> dict[str, Any]:
    """One supervisor claims 4 partitions with data waiting: RSS per child and of the
    supervisor; child started -> first record; marshal-run start -> first record."""
    partitions = 4
    topic = create_topic(bootstrap, partitions)
    produce_bulk(bootstrap, topic, 4000, partitions)
    coordination = coordination_topic(bootstrap)
    out = work / "startup"
    log = work / "startup.log"
    t_start = time.time()
    proc = marshal_run(
        procs,
        log,
        handler=HANDLER,
        mode="alo",
        topic=topic,
        group=f"g_{uid()}",
        client_id="bench-mem",
        bootstrap=bootstrap,
        coordination=coordination,
        hb=5.0,
        batch_size=BATCH,
        env={"BENCH_OUT": str(out), "BENCH_TARGET": "1000"},
    )
    try:
        done = wait_until(lambda: len(read_json_files(out, "last")) == partitions, 60, poll=0.1)
        if not done:
            return {"error": f"not every child handled 1000 records; log:\n{tail(log)}"}
        time.sleep(1.0)  # idle, caught up: the resident set after real work
        children = worker_children(proc.pid)
        child_mem = []
        for child in children:
            with contextlib.suppress(psutil.Error):
                info = child.memory_full_info()
                child_mem.append((info.rss, info.uss))
        sup = psutil.Process(proc.pid).memory_full_info()
        firsts = {row["pid"]: row for row in read_json_files(out, "first")}
        started = {
            row["child_pid"]: wall(row["timestamp"]) for row in log_events(log, "child_started")
        }
        spawn_to_first = [firsts[pid]["wall"] - at for pid, at in started.items() if pid in firsts]
        cold = min(row["wall"] for row in firsts.values()) - t_start
        claimed = min(started.values()) - t_start if started else None
        return {
            "children": len(children),
            "child_rss": [r for r, _ in child_mem],
            "child_uss": [u for _, u in child_mem],
            "sup_rss": sup.rss,
            "sup_uss": sup.uss,
            "spawn_to_first": spawn_to_first,
            "cold": cold,
            "start_to_first_spawn": claimed,
        }
    finally:
        procs.stop(proc)


# ---------------------------------------------------------------- the report


def mib(n: float) -> str:
    return f"{n / 2**20:.0f} MiB"


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "-"
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}-{hi}"


def report_throughput(
    variant: str, runs: dict[str, list[Measure | None]], table: list[tuple[str, str]]
) -> None:
    """Best rates, ratios to the plain loop (best to best, and round by round), CPU/record."""
    setting = ", ".join(f"{k}={v}" for k, v in VARIANTS[variant].items())
    print(f"  {variant} ({setting} on both sides):")
    best = {
        k: max((m for m in v if m), key=lambda m: m.rate, default=None) for k, v in runs.items()
    }
    plain = best["plain"]
    for kind, target, what in (
        ("plain", None, "plain loop"),
        ("alo", ALO_TARGET, "ALO child"),
        ("amo", AMO_TARGET, "AMO child"),
    ):
        m = best[kind]
        text = f"{m.rate:,.0f} records/s" if m else "no figure"
        if target is not None and m and plain:
            ratio = m.rate / plain.rate
            verdict = "meets" if ratio >= target else "BELOW"
            per_round = [
                f"{a.rate / b.rate:.2f}" if a and b else "-"
                for a, b in zip(runs[kind], runs["plain"], strict=True)
            ]
            text += (
                f" = {ratio:.2f} of plain (target >= {target}: {verdict}); "
                f"round by round {', '.join(per_round)}"
            )
        elif m:
            text += f"; rounds {', '.join(f'{r.rate:,.0f}' if r else '-' for r in runs[kind])}"
        table.append((f"throughput, {variant}: {what}", text))
        print(f"    best, {what}: {text}")
    for kind, what in (("plain", "plain loop"), ("alo", "ALO child"), ("amo", "AMO child")):
        cpu = [m.cpu_us for m in runs[kind] if m]
        sup = [m.supervisor_cpu_us for m in runs[kind] if m and m.supervisor_cpu_us]
        text = f"{spread(cpu)} us/record"
        if sup:
            text += f" (+ its supervisor {spread(sup)})"
        table.append((f"CPU/record, {variant}: {what}", text))
        print(f"    CPU per record, {what}: {text}")


def run(bootstrap: str, args: argparse.Namespace, work: Path) -> list[tuple[str, str]]:
    table: list[tuple[str, str]] = []
    procs = Processes()
    try:
        print(f"1. throughput, {args.records:,} records, one partition, batches of {BATCH}")
        runs = throughput(bootstrap, procs, work, args.records, args.rounds)
        for variant in VARIANTS:
            report_throughput(variant, {k: v for (f, k), v in runs.items() if f == variant}, table)
        grant = grant_breakdown(bootstrap)
        text = (
            f"{grant['total']:.2f} ms = reserve {grant['reserve']:.2f} + fold "
            f"{grant['fold']:.2f} + commit {grant['commit']:.2f} (medians of 300)"
        )
        table.append(("AMO grant log I/O per batch, in-process", text))
        print(f"  AMO grant log I/O per batch, replayed in-process: {text}", flush=True)
        if not args.skip_failover:
            print("2. failover after kill -9 (4 partitions, 2 members, steady producer)")
            res = failover_marshal(bootstrap, procs, work)
            table.append(("failover: marshal-run, HB = 1 s", show_failover(res)))
            print(f"  marshal-run, HB=1s: {show_failover(res)}", flush=True)
            hb = GROUP_MIN_SESSION_MS // 3
            res = failover_group(bootstrap, procs, work, GROUP_MIN_SESSION_MS, hb)
            what = (
                f"failover: consumer group, session {GROUP_MIN_SESSION_MS} ms (broker min), "
                f"hb {hb} ms"
            )
            table.append((what, show_failover(res)))
            print(f"  {what}: {show_failover(res)}", flush=True)
            if not args.skip_default_session:
                res = failover_group(
                    bootstrap, procs, work, LIBRDKAFKA_SESSION_MS, LIBRDKAFKA_HEARTBEAT_MS
                )
                what = (
                    f"failover: consumer group, session {LIBRDKAFKA_SESSION_MS} ms "
                    f"(librdkafka default), hb {LIBRDKAFKA_HEARTBEAT_MS} ms"
                )
                table.append((what, show_failover(res)))
                print(f"  {what}: {show_failover(res)}", flush=True)
        print("3. memory and start-up (one supervisor, 4 partitions, 4 children)")
        res = memory_and_start(bootstrap, procs, work)
        if "error" in res:
            table.append(("memory and start-up", res["error"]))
            print(f"  {res['error']}")
        else:
            rss = f"RSS {spread([x / 2**20 for x in res['child_rss']], '{:.0f}')} MiB"
            uss = f"USS {spread([x / 2**20 for x in res['child_uss']], '{:.0f}')} MiB"
            table.append((f"memory per child ({res['children']} children)", f"{rss}, {uss}"))
            table.append(
                (
                    "memory of the supervisor",
                    f"RSS {mib(res['sup_rss'])}, USS {mib(res['sup_uss'])}",
                )
            )
            table.append(
                (
                    "child started -> its first record",
                    f"{spread(res['spawn_to_first'])} s",
                )
            )
            table.append(
                (
                    "marshal-run start -> first record (cold)",
                    f"{res['cold']:.2f} s (first child started after "
                    f"{res['start_to_first_spawn']:.2f} s)",
                )
            )
            for name, value in table[-4:]:
                print(f"  {name}: {value}")
    finally:
        procs.kill_all()
    return table


def show_failover(res: dict[str, Any]) -> str:
    if "error" in res:
        return f"no figure: {res['error']}"
    per = ", ".join(f"p{p} {d:.2f}" for p, d in res["partitions"].items())
    return f"{res['max']:.2f} s to the last of its partitions ({per})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bootstrap-servers")
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--rounds", type=int, default=3, help="throughput rounds (best counts)")
    ap.add_argument("--skip-failover", action="store_true")
    ap.add_argument("--skip-default-session", action="store_true", help="skip the 45 s case")
    # internal: the processes this script starts
    ap.add_argument(
        "--role", choices=("bench", "plain", "group"), default="bench", help=argparse.SUPPRESS
    )
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--kafka", action="append", default=[], help=argparse.SUPPRESS)
    ap.add_argument("--group", help=argparse.SUPPRESS)
    ap.add_argument("--session-ms", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--heartbeat-ms", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "plain":
        kafka = dict(item.split("=", 1) for item in args.kafka)
        plain_consumer(args.bootstrap_servers, args.topic, args.records, kafka)
        return
    if args.role == "group":
        group_consumer(
            args.bootstrap_servers, args.topic, args.group, args.session_ms, args.heartbeat_ms
        )
        return

    with tempfile.TemporaryDirectory(prefix="marshal-bench-runtime-") as tmp:
        work = Path(tmp)
        if args.bootstrap_servers:
            table = run(args.bootstrap_servers, args, work)
        else:
            t0 = time.perf_counter()
            cluster = start_cluster(StartOptions(directory=work / "kafka", nodes=1))
            print(f"local Kafka (1 node) started in {time.perf_counter() - t0:.1f} s")
            try:
                table = run(cluster.bootstrap, args, work)
            finally:
                cluster.stop()
    width = max(len(name) for name, _ in table)
    print("\nsummary")
    for name, value in table:
        print(f"  {name:<{width}}  {value}")


if __name__ == "__main__":
    main()
