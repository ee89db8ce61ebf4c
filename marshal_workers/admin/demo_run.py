"""`marshal-admin demo`: the whole product on one machine, start to finish, in under a minute.

It starts a local Kafka, writes sample orders to an 8-partition topic, runs a small fleet of
`marshal-run` supervisors with the ledger handler, prints who holds what and how much each has
handled every second, kills one member with SIGKILL halfway to show failover, starts it again
to show the fleet rebalancing, stops everyone with TERM once every order is handled, and
checks the ledger: never two processes on one partition at once, and, in ALO mode, no record
skipped (handled twice is allowed after the kill -9); in AMO mode, no record handled twice
(skipped is allowed after the kill -9: the batch the killed member had reserved is lost, so
the fleet is done when the log's positions reach the end rather than when every order is).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from marshal_workers.clients import roles
from marshal_workers.clients.kafkaconfig import client_config
from marshal_workers.common.errors import MarshalError
from marshal_workers.common.ledgerfile import (
    LedgerRow,
    find_duplicates,
    find_gaps,
    find_overlaps,
    read_ledger,
)
from marshal_workers.localkafka import StartOptions, start_cluster
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.kafkalog import KafkaLog
from marshal_workers.log.topicadmin import admin_client, ensure_coordination_topic
from marshal_workers.protocol.members import is_live
from marshal_workers.protocol.rationalizer import RationalizerConfig
from marshal_workers.protocol.slicing import Slice, data_topic, split_topic

TOPIC = "demo.orders"
HOT_TOPIC = "demo.hot"  # one partition, shared by --hot N workers (ordering key)
HB_S = 1.0
CUSTOMERS = 97
Say = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """What the demo runs."""

    directory: Path
    members: int = 3
    records: int = 12000
    partitions: int = 8
    mode: str = "alo"
    chaos: bool = True
    keep_kafka: bool = False
    delay_ms: int = 10
    hot: int | None = None  # one partition cut into this many key slices

    @property
    def topic(self) -> str:
        """The data topic: the hot one (one partition) or the usual one."""
        return HOT_TOPIC if self.hot else TOPIC

    @property
    def claims(self) -> int:
        """How many claims the fleet holds when it holds everything."""
        return self.hot or self.partitions


class Demo:
    """One run of the demo."""

    def __init__(self, options: DemoOptions, say: Say) -> None:
        self.o = options
        self.say = say
        if options.hot:
            options = replace(options, partitions=1)
            self.o = options
        self.group = f"demo.billing.{int(time.time())}"
        self.ledger_dir = options.directory / "ledger" / self.group
        self.logs = options.directory / "logs"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.bootstrap = ""

    def run(self) -> int:
        self.say("starting a local Apache Kafka (KRaft, one node, loopback only)...")
        t0 = time.monotonic()
        cluster = start_cluster(StartOptions(directory=self.o.directory / "kafka", nodes=1))
        self.bootstrap = cluster.bootstrap
        reused = " (already running)" if cluster.already_running else ""
        self.say(f"Kafka up at {self.bootstrap}{reused} in {time.monotonic() - t0:.1f}s")
        try:
            self._data()
            reader = FoldedLog(KafkaLog(self.bootstrap), RationalizerConfig(int(HB_S * 1000)))
            try:
                return self._fleet(reader)
            finally:
                self._kill_all()
                reader.log.close()
        finally:
            if not cluster.already_running and not self.o.keep_kafka:
                self.say("stopping the local Kafka")
                cluster.stop()

    def _data(self) -> None:
        ensure_coordination_topic(self.bootstrap, "__marshal", 2, placed=True)
        admin = admin_client(self.bootstrap)
        topic = self.o.topic
        if topic not in admin.list_topics(timeout=10).topics:
            admin.create_topics([NewTopic(topic, self.o.partitions, 1)])[topic].result(30)
        producer = roles.data_producer(client_config(self.bootstrap, tuned={"linger.ms": 5}))
        start = self._ends()
        for i in range(self.o.records):
            customer = f"c{i % CUSTOMERS}"
            order = {"order": i, "customer": customer, "amount": round(5 + (i * 7.3) % 95, 2)}
            producer.produce(
                topic,
                json.dumps(order).encode(),
                key=customer.encode(),
                partition=i % self.o.partitions,
            )
            producer.poll(0)
        producer.flush(30)
        self.first = start
        self.say(
            f"wrote {self.o.records} sample orders to {topic} "
            f"({self.o.partitions} partitions); group {self.group}"
        )
        if self.o.hot:
            self.say(
                f"ordering key: the partition is cut into {self.o.hot} slices by customer, each "
                "claimed, leased and fenced like a partition"
            )

    def _ends(self) -> dict[int, int]:
        c = roles.data_consumer(client_config(self.bootstrap, fixed={"group.id": "demo-probe"}))
        deadline = time.monotonic() + 30
        try:
            while True:  # a topic just created may not have its leaders yet
                try:
                    return {
                        p: c.get_watermark_offsets(TopicPartition(self.o.topic, p), 10)[1]
                        for p in range(self.o.partitions)
                    }
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        finally:
            c.close()

    def _start(self, client: str) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        command = [
            str(Path(sys.executable).with_name("marshal-run")),
            "--handler",
            "ledger",
            "--mode",
            self.o.mode,
            "--topic",
            self.o.topic,
            "--group",
            self.group,
            "--client-id",
            client,
            "--bootstrap-servers",
            self.bootstrap,
            "--heartbeat-interval",
            str(HB_S),
            "--batch-size",
            "100",
            "--log-format",
            "json",
        ]
        if self.o.hot:
            command += ["--ordering", "key", "--workers-per-partition", str(self.o.hot)]
        env = {
            **os.environ,
            "MARSHAL_LEDGER_DIR": str(self.ledger_dir),
            "MARSHAL_LEDGER_DELAY_MS": str(self.o.delay_ms),
        }
        with open(self.logs / f"{client}.log", "ab") as out:
            self.procs[client] = subprocess.Popen(
                command, env=env, stdout=out, stderr=out, start_new_session=True
            )
        self.say(f"started member {client} (pid {self.procs[client].pid})")

    def _rows(self) -> list[LedgerRow]:
        first = self.first  # this run's orders (the topic may hold an earlier run's too)
        return [
            r
            for r in read_ledger(self.ledger_dir)
            if r.topic == self.o.topic and r.offset >= first.get(r.partition, 0)
        ]

    def _holders(self, reader: FoldedLog) -> Counter[str]:
        reader.poll(0.1)
        now = int(time.time() * 1000)
        return Counter(
            s.holder_client
            for w in reader.worlds.values()
            for k, s in w.claims.items()
            if k.group == self.group
            and data_topic(k.topic) == self.o.topic
            and s.holder_client is not None
            and is_live(s, now, int(HB_S * 1000))
        )

    def _at_end(self, reader: FoldedLog, ends: dict[int, int]) -> bool:
        """Whether the log's committed position of every partition is at its end (AMO: the
        records a killed member had reserved are never handled, so `done` stays short)."""
        committed = [
            (k.partition, split_topic(k.topic)[1], s.committed)
            for w in reader.worlds.values()
            for k, s in w.claims.items()
            if k.group == self.group and data_topic(k.topic) == self.o.topic
        ]
        if len(committed) < self.o.claims:
            return False
        return all((c or 0) >= self._end_of(p, part, ends[p]) for p, part, c in committed)

    def _end_of(self, partition: int, part: Slice | None, end: int) -> int:
        """Where a claim's position stands once it handled all of ``partition`` below ``end``:
        a slice's, after its own last record (AMO reserves no further)."""
        if part is None:
            return end
        first = self.first[partition]
        for offset in range(end - 1, first - 1, -1):
            if part.takes(offset, self._customer(offset).encode()):
                return offset + 1
        return 0

    def _customer(self, offset: int) -> str:
        """The key of the hot topic's record at ``offset`` (one partition: order i at first+i)."""
        return f"c{(offset - self.first[0]) % CUSTOMERS}"

    def _fleet(self, reader: FoldedLog) -> int:
        clients = [f"demo-{i + 1}" for i in range(self.o.members)]
        for client in clients:
            self._start(client)
        ends = self._ends()
        total = sum(ends[p] - self.first[p] for p in ends)
        victim, phase, killed_at = clients[-1], "run", 0.0
        coming = 0  # claims the victim gets back when it returns
        t0 = time.monotonic()
        while True:
            time.sleep(1.0)
            rows = self._rows()
            done = len({(r.partition, r.offset) for r in rows})
            held = self._holders(reader)
            handled = Counter(r.client_id for r in rows)
            parts = " | ".join(
                f"{c}: {held.get(c, 0)} held, {handled.get(c, 0)} done" for c in clients
            )
            self.say(f"t={time.monotonic() - t0:3.0f}s  {parts} | {done}/{total} orders")
            if self.o.chaos and phase == "run" and done >= 0.3 * total:
                self.say(
                    f"*** kill -9 {victim}: its children die with it; the others take its "
                    f"partitions once its claims go stale (2 x HB = {2 * HB_S:.0f}s)"
                )
                self.procs[victim].send_signal(signal.SIGKILL)
                self.procs[victim].wait()
                phase, killed_at = "failover", time.monotonic()
            elif (
                self.o.chaos
                and phase == "failover"
                and sum(held.values()) == self.o.claims
                and (victim not in held)
            ):
                coming = returning_share(held, len(clients), self.o.claims)
                self.say(
                    f"*** failover done {time.monotonic() - killed_at:.1f}s after the kill; "
                    + rejoin_story(victim, coming, len(clients), self.o.claims)
                )
                self._start(victim)
                phase = "rejoin"
            elif (
                phase == "rejoin"
                and sum(held.values()) == self.o.claims
                and held.get(victim, 0) >= coming
                and max(held.values()) <= fair_share(self.o.claims, len(clients))
            ):
                split = "/".join(str(held.get(c, 0)) for c in clients)
                self.say(f"*** {'rebalanced' if coming else 'settled'}: {split}")
                phase = "settled"
            if done >= total:
                self.say("every order handled: stopping the fleet with TERM (graceful)")
                break
            if self.o.mode == "amo" and self._at_end(reader, ends):
                self.say("every position at the end of the topic: stopping the fleet with TERM")
                break
            if time.monotonic() - t0 > 180:
                raise MarshalError(f"the demo fleet did not finish in 3 minutes: see {self.logs}")
        return self._finish(clients, ends)

    def _finish(self, clients: list[str], ends: dict[int, int]) -> int:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = {c: p.wait(60) for c, p in self.procs.items()}
        rows = self._rows()
        expected = {(self.o.topic, p): range(self.first[p], ends[p]) for p in ends}
        gaps = find_gaps(rows, expected)
        overlaps = find_overlaps(rows)
        redone = len(find_duplicates(rows))
        per_member = Counter(r.client_id for r in rows)
        self.say("")
        self.say("summary")
        for client in clients:
            self.say(
                f"  {client}: handled {per_member.get(client, 0)} orders, exit code {codes[client]}"
            )
        if self.o.mode == "amo":  # at most once: a batch reserved by a killed member is lost
            self.say(f"  orders never handled (AMO allows it after a kill -9): {len(gaps)}")
            self.say(f"  two processes on a partition at once:  {len(overlaps)}")
            self.say(f"  orders handled twice:                  {redone}")
            sound = not overlaps and not redone and (self.o.chaos or not gaps)
        else:  # at least once: a batch handled by a killed member is handled again
            self.say(f"  orders never handled:                  {len(gaps)}")
            self.say(f"  two processes on a partition at once:  {len(overlaps)}")
            self.say(f"  orders handled twice (ALO allows it after a kill -9): {redone}")
            sound = not gaps and not overlaps
        if self.o.hot:
            disorder = out_of_key_order(rows, self._customer)
            self.say(f"  customers whose orders were out of order or two at once: {disorder}")
            sound = sound and not disorder
        self.say(f"verdict: {'OK' if sound else 'FAILED'}  (ledger in {self.ledger_dir})")
        return 0 if sound else 1

    def _kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def fair_share(claims: int, members: int) -> int:
    """What no member holds more of: ceil(claims / members) (`core.planning.fair_share`)."""
    return -(-claims // max(1, members))


def returning_share(held: Counter[str], members: int, claims: int) -> int:
    """How many claims a member coming back gets: what the others hold over the fair share
    counted with it (they release that excess; a member at its share releases nothing)."""
    share = fair_share(claims, members)
    return sum(max(0, n - share) for n in held.values())


def rejoin_story(victim: str, coming: int, members: int, claims: int) -> str:
    """What the demo says will happen when ``victim`` comes back."""
    share = fair_share(claims, members)
    if coming:
        return (
            f"{victim} comes back and the fleet rebalances by graceful releases: the others "
            f"release the {coming} claim(s) they hold over the fair share of {share}"
        )
    return (
        f"{victim} comes back and holds nothing: {claims} claims among {members} members make "
        f"a fair share of {share}, and no member holds more, so none is released; {victim} "
        "stands by, announced, and claims at once what another member releases"
    )


def out_of_key_order(rows: list[LedgerRow], key_of: Callable[[int], str]) -> int:
    """How many keys were handled out of order: two of its records at once, or a record
    handled for the first time before an earlier one of its key (a redelivery after a crash
    repeats records in order, and is not out of order)."""
    by_key: dict[str, list[LedgerRow]] = {}
    for row in rows:
        by_key.setdefault(key_of(row.offset), []).append(row)
    bad = 0
    for handled in by_key.values():
        handled.sort(key=lambda r: r.start)
        at_once = any(a.end > b.start for a, b in itertools.pairwise(handled))
        firsts: list[int] = []
        for row in handled:
            if row.offset not in firsts:
                firsts.append(row.offset)
        bad += at_once or firsts != sorted(firsts)
    return bad


def run_demo(options: DemoOptions, say: Say) -> int:
    """Run the demo; return the exit code (0 when the ledger is sound)."""
    return Demo(options, say).run()
