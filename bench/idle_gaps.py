"""Benchmark: how long a partition stands idle when it changes hands in a graceful operation.

    .venv/bin/python bench/idle_gaps.py [--bootstrap-servers HOST:PORT] [--hb 4,10]
                                        [--scenarios rolling,scale-down,scale-down-after-join]
                                        [--partitions 8] [--rounds 1] [--json]

Real `marshal-run` supervisors (ALO, the ledger handler) on a real Kafka with a steady producer
(50 records/s per partition, so a partition always has work within 20 ms). Each scenario at
each heartbeat interval gets a fresh data topic, coordination topic and group:

- ``rolling``: three members share 8 partitions; each in turn gets TERM, comes back with the
  same client id, and the next gets TERM once it works again (holds a partition and handles
  records on every partition it holds).
- ``scale-down``: three members, settled for 2 HB; one gets TERM and is not started again.
- ``scale-down-after-join``: two members share the partitions; a third joins, and once it
  works on its share (the others just handed partitions to it, as in every rolling deploy and
  every scale-down after a scale-up) it gets TERM.

The figure is the idle gap of each hand-over, read from the ledger (one line per record, with
the handling process's pid and wall-clock start and end): on each partition, wherever two
consecutive records were handled by different processes, the time from the first process's
last record's end to the next one's first record's start. Every hand-over of the run is listed
(the rebalances the scenario causes included), with what the scenario did last before it.

Prints figures; asserts nothing (these machines are noisy); exits 0. Without
``--bootstrap-servers`` it starts a local one-node Kafka in a temporary directory and stops it.
Every process it starts is stopped before it exits, whatever happens.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from marshal_workers.clients.rdkafka import RDKAFKA_LOG
from marshal_workers.common.ledgerfile import LedgerRow, read_ledger
from marshal_workers.localkafka import StartOptions, start_cluster
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.kafkalog import KafkaLog
from marshal_workers.log.topicadmin import ensure_coordination_topic
from marshal_workers.protocol.members import is_live
from marshal_workers.protocol.rationalizer import RationalizerConfig

MARSHAL_RUN = Path(sys.executable).with_name("marshal-run")
SCENARIOS = ("rolling", "scale-down", "scale-down-after-join")
PER_PARTITION_RATE = 50  # records per second and partition
GOAL_S = 1.0


@dataclass
class Gap:
    """One hand-over of a partition between two processes."""

    partition: int
    before: str  # client id (pid) of the last record before
    after: str  # of the first record after
    idle_s: float
    at_s: float  # the previous holder's last record, from the scenario's start
    cause: str  # what the scenario did last before that record


@dataclass
class Outcome:
    """One scenario at one heartbeat interval."""

    scenario: str
    hb: float
    gaps: list[Gap] = field(default_factory=list)
    note: str = ""

    @property
    def worst(self) -> float:
        return max((g.idle_s for g in self.gaps), default=0.0)


class Run:
    """Supervisors, a steady producer and a view of the claims, for one scenario."""

    def __init__(self, bootstrap: str, root: Path, hb: float, partitions: int) -> None:
        uid = uuid.uuid4().hex[:8]
        self.bootstrap, self.root, self.hb, self.partitions = bootstrap, root, hb, partitions
        self.coordination, self.topic, self.group = f"__marshal_{uid}", f"idle_{uid}", f"g_{uid}"
        self.ledger_dir = root / f"ledger-{uid}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.every: list[subprocess.Popen[bytes]] = []
        self.actions: list[tuple[float, str]] = []
        ensure_coordination_topic(bootstrap, self.coordination, 2)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(self.topic, partitions, -1)])[self.topic].result(30)
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "logger": RDKAFKA_LOG}
        )
        self._producing = threading.Event()
        self._thread: threading.Thread | None = None
        log = KafkaLog(bootstrap, self.coordination)
        self.reader = FoldedLog(log, RationalizerConfig(int(hb * 1000), log.num_partitions))
        self.t0 = time.time()

    # ---- the data -----------------------------------------------------------------------------

    def produce_steadily(self) -> None:
        self._producing.set()

        def loop() -> None:
            sent = 0
            while self._producing.is_set():
                for p in range(self.partitions):
                    self._producer.produce(self.topic, f"r{sent}".encode(), partition=p)
                sent += 1
                self._producer.poll(0)
                time.sleep(1 / PER_PARTITION_RATE)
            self._producer.flush(30)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    # ---- members ------------------------------------------------------------------------------

    def start(self, client_id: str) -> None:
        command = [
            str(MARSHAL_RUN), "--handler", "ledger", "--mode", "alo", "--topic", self.topic,
            "--group", self.group, "--client-id", client_id, "--bootstrap-servers",
            self.bootstrap, "--coordination-topic", self.coordination,
            "--heartbeat-interval", str(self.hb), "--log-format", "json",
        ]  # fmt: skip
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")},
            "MARSHAL_LEDGER_DIR": str(self.ledger_dir),
            "XDG_RUNTIME_DIR": str(self.root / "run"),
        }
        log = open(self.root / f"{self.group}-{client_id}.log", "ab")  # noqa: SIM115
        proc = subprocess.Popen(
            command, env=env, stdout=log, stderr=log, start_new_session=True
        )
        log.close()
        self.procs[client_id] = proc
        self.every.append(proc)
        self.mark(f"{client_id} starts")

    def term(self, client_id: str, wait: bool = True) -> None:
        proc = self.procs[client_id]
        self.mark(f"{client_id} TERM")
        proc.send_signal(signal.SIGTERM)
        if wait:
            code = proc.wait(120)
            self.mark(f"{client_id} exited {code}")

    def mark(self, what: str) -> None:
        self.actions.append((time.time() - self.t0, what))
        print(f"    {time.time() - self.t0:7.2f}s  {what}", flush=True)

    # ---- what the log and the ledger show -----------------------------------------------------

    def holders(self) -> dict[int, str]:
        self.reader.poll(0.2)
        now, hb_ms = int(time.time() * 1000), int(self.hb * 1000)
        return {
            key.partition: state.holder_client
            for world in self.reader.worlds.values()
            for key, state in world.claims.items()
            if key.topic == self.topic
            and state.holder_client is not None
            and is_live(state, now, hb_ms)
        }

    def rows(self) -> list[LedgerRow]:
        if not self.ledger_dir.exists():
            return []
        return [r for r in read_ledger(self.ledger_dir) if r.topic == self.topic]

    def works(self, client_id: str, at_least: int = 1) -> bool:
        """``client_id`` (its current process) holds at least ``at_least`` partitions and has
        handled a record on each of them in the last second."""
        proc = self.procs[client_id]
        held = {p for p, c in self.holders().items() if c == client_id}
        if len(held) < at_least:
            return False
        since = time.time() - 1.0
        children = {r.partition for r in self.rows() if r.end >= since and r.client_id
                    == client_id and _descends(r.pid, proc.pid)}  # fmt: skip
        return held <= children

    def all_work(self, clients: list[str]) -> bool:
        holders = self.holders()
        if set(range(self.partitions)) - set(holders) or set(holders.values()) - set(clients):
            return False
        since = time.time() - 1.0
        moving = {r.partition for r in self.rows() if r.end >= since}
        return moving >= set(range(self.partitions))

    def wait_for(self, check: Callable[[], bool], what: str, timeout: float = 180) -> None:
        start = time.monotonic()
        while not check():
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"no {what} after {timeout:.0f}s: holders {self.holders()}")
            time.sleep(0.1)
        self.mark(what)

    def gaps(self) -> list[Gap]:
        rows = self.rows()
        found: list[Gap] = []
        by_partition: dict[int, list[LedgerRow]] = {}
        for r in rows:
            by_partition.setdefault(r.partition, []).append(r)
        for partition, mine in sorted(by_partition.items()):
            mine.sort(key=lambda r: r.start)
            for before, after in itertools.pairwise(mine):
                if before.pid == after.pid:
                    continue
                at = before.end - self.t0
                cause = next((w for t, w in reversed(self.actions) if t <= at), "start")
                found.append(
                    Gap(
                        partition,
                        f"{before.client_id}({before.pid})",
                        f"{after.client_id}({after.pid})",
                        round(after.start - before.end, 3),
                        round(at, 2),
                        cause,
                    )
                )
        return found

    def close(self) -> None:
        for proc in self.every:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.every:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self._producing.clear()
        if self._thread is not None:
            self._thread.join(30)
        self.reader.log.close()


def _descends(pid: int, ancestor: int) -> bool:
    """Whether process ``pid`` is ``ancestor`` or one of its descendants (while it runs)."""
    try:
        while pid > 1:
            if pid == ancestor:
                return True
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        return False
    return False


# ---- the scenarios ------------------------------------------------------------------------------


def rolling(run: Run) -> None:
    clients = ["a", "b", "c"]
    for c in clients:
        run.start(c)
    run.wait_for(lambda: run.all_work(clients), "all partitions worked on")
    run.wait_for(lambda: sorted(_counts(run).values()) == [2, 3, 3], "a 2/3/3 split")
    for c in clients:
        run.term(c)
        run.start(c)
        run.wait_for(lambda c=c: run.works(c), f"{c} works again")  # type: ignore[misc]
    run.wait_for(lambda: run.all_work(clients), "all partitions worked on")
    time.sleep(2 * run.hb)
    run.wait_for(lambda: run.all_work(clients), "all partitions worked on")


def scale_down(run: Run) -> None:
    clients = ["a", "b", "c"]
    for c in clients:
        run.start(c)
    run.wait_for(lambda: sorted(_counts(run).values()) == [2, 3, 3], "a 2/3/3 split")
    run.wait_for(lambda: run.all_work(clients), "all partitions worked on")
    time.sleep(2 * run.hb)
    run.mark("settled for 2 HB")
    run.term("c")
    run.wait_for(lambda: run.all_work(["a", "b"]), "a and b work on every partition")
    time.sleep(1)


def scale_down_after_join(run: Run) -> None:
    run.start("a")
    run.start("b")
    run.wait_for(lambda: sorted(_counts(run).values()) == [4, 4], "a 4/4 split")
    run.wait_for(lambda: run.all_work(["a", "b"]), "all partitions worked on")
    run.start("c")
    run.wait_for(lambda: run.works("c", 2), "c works on its share")
    run.term("c")
    run.wait_for(lambda: run.all_work(["a", "b"]), "a and b work on every partition")
    time.sleep(1)


def _counts(run: Run) -> dict[str, int]:
    counts: dict[str, int] = {}
    for client in run.holders().values():
        counts[client] = counts.get(client, 0) + 1
    return counts


PLAYS: dict[str, Callable[[Run], None]] = {
    "rolling": rolling,
    "scale-down": scale_down,
    "scale-down-after-join": scale_down_after_join,
}


def measure(bootstrap: str, work: Path, scenario: str, hb: float, partitions: int) -> Outcome:
    print(f"\n== {scenario}, HB = {hb:g} s", flush=True)
    run = Run(bootstrap, work, hb, partitions)
    outcome = Outcome(scenario, hb)
    try:
        run.produce_steadily()
        PLAYS[scenario](run)
    except TimeoutError as e:
        outcome.note = str(e)
        print(f"    {e}")
    finally:
        run.close()
    outcome.gaps = run.gaps()
    for g in outcome.gaps:
        flag = "  OVER" if g.idle_s > GOAL_S else ""
        print(f"    p{g.partition}  {g.before:>14} -> {g.after:<14} idle {g.idle_s:6.3f} s"
              f"  at {g.at_s:6.2f}s after: {g.cause}{flag}")  # fmt: skip
    return outcome


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bootstrap-servers")
    ap.add_argument("--hb", default="4,10", help="heartbeat intervals (seconds), comma-separated")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="also print every gap as one JSON line")
    ap.add_argument("--keep", type=Path, help="keep the logs and ledgers here")
    args = ap.parse_args()
    hbs = [float(h) for h in args.hb.split(",")]
    scenarios = args.scenarios.split(",")
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown:
        ap.error(f"unknown scenarios {sorted(unknown)}; choose from {', '.join(SCENARIOS)}")
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="marshal-bench-idle-") as tmp:
        work = Path(tmp) if args.keep is None else args.keep
        work.mkdir(parents=True, exist_ok=True)

        def all_runs(bootstrap: str) -> None:
            for _ in range(args.rounds):
                for hb in hbs:
                    for scenario in scenarios:
                        outcomes.append(measure(bootstrap, work, scenario, hb, args.partitions))

        if args.bootstrap_servers:
            all_runs(args.bootstrap_servers)
        else:
            cluster = start_cluster(StartOptions(directory=work / "kafka", nodes=1))
            try:
                all_runs(cluster.bootstrap)
            finally:
                cluster.stop()
    print("\nsummary: idle seconds of each hand-over, largest first (goal: at most 1 s)")
    for o in outcomes:
        gaps = sorted((g.idle_s for g in o.gaps), reverse=True)
        over = sum(1 for g in gaps if g > GOAL_S)
        shown = " ".join(f"{g:.2f}" for g in gaps)
        note = f"  ({o.note})" if o.note else ""
        print(f"  {o.scenario:<22} HB {o.hb:>4g} s  hand-overs {len(gaps):>2}  over 1 s {over:>2}"
              f"  worst {o.worst:5.2f}  [{shown}]{note}")  # fmt: skip
    if args.json:
        for o in outcomes:
            print(json.dumps({"scenario": o.scenario, "hb": o.hb, "note": o.note,
                              "gaps": [asdict(g) for g in o.gaps]}))  # fmt: skip


if __name__ == "__main__":
    main()
