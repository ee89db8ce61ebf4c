"""What `bench/hot.py` runs: the systems, how each is launched, and the keyed topic they read."""

from __future__ import annotations

import functools
import math
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from runtime import MARSHAL_RUN, Processes, child_env, coordination_topic, marshal_run, uid

from marshal_workers.clients.rdkafka import RDKAFKA_LOG

SYSTEMS = ("partition", "unordered", "key", "unordered-child", "key-child", "share-default",
           "share-tuned", "plain")  # fmt: skip
MARSHAL = ("partition", "unordered", "key", "unordered-child", "key-child")
ORDERED = ("unordered", "key", "unordered-child", "key-child")  # marshal-run --ordering
CHILD_READS = ("unordered-child", "key-child")  # marshal-run --slice-reads child
SHARE = ("share-default", "share-tuned")
ONCE = ("partition", "plain")  # one worker whatever N: run at the first N only
MEMBERS = 2
KEYS = 1000
HB_S = 5.0
BATCH = 100  # marshal-run --batch-size: 0.5 s of the io handler
DEFAULT_LOCK_S = 30.0  # share.record.lock.duration.ms's default (group.share.record.lock...)
TUNED_LOCK_MS = 15_000  # the broker's default floor (group.share.min.record.lock.duration.ms)
TUNED_POLL_RECORDS = 10
HOT_LOOPS = Path(__file__).resolve().with_name("hot_loops.py")


@functools.cache
def _run_help() -> str:
    shown = subprocess.run([str(MARSHAL_RUN), "--help"], capture_output=True, text=True,
                           check=False, env=child_env())  # fmt: skip
    return shown.stdout


def has_ordering() -> bool:
    """Whether this marshal-run has the ordering modes (``--ordering``)."""
    return "--ordering" in _run_help()


def has_slice_reads() -> bool:
    """Whether this marshal-run chooses who reads a sliced partition (``--slice-reads``)."""
    return "--slice-reads" in _run_help()


def ordering_of(system: str) -> str:
    """The ``--ordering`` of an ordering system: ``unordered-child`` is ``unordered``."""
    return system.removesuffix("-child")


def produce_keyed(bootstrap: str, topic: str, n: int, batch: int) -> float:
    """Write ``n`` records to partition 0, keys ``k0``..``k999`` round robin, in producer
    batches of at most ``batch`` records; return the seconds it took."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "logger": RDKAFKA_LOG,
            "linger.ms": 20,
            "batch.num.messages": batch,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, b"v%d" % i, key=b"k%d" % (i % KEYS), partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise SystemExit("the producer did not flush")
    return time.perf_counter() - start


def configure_share_group(bootstrap: str, group: str, lock_ms: int | None) -> None:
    """The group's settings, before any member joins: earliest, and a lock duration if given."""
    entries = [("share.auto.offset.reset", "earliest")]
    if lock_ms is not None:
        entries.append(("share.record.lock.duration.ms", str(lock_ms)))
    configs = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in entries]
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": RDKAFKA_LOG})  # type: ignore[dict-item]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=configs)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def split(n: int) -> list[int]:
    """N workers over the members: N/2 each (the first takes the odd one; none is empty)."""
    return [k for k in (math.ceil(n / MEMBERS), n // MEMBERS) if k]


def launch(
    procs: Processes,
    bootstrap: str,
    topic: str,
    system: str,
    n: int,
    handler: str,
    env: dict[str, str],
    log: Path,
    tuned: tuple[int, int] = (TUNED_LOCK_MS, TUNED_POLL_RECORDS),
) -> tuple[list[subprocess.Popen[bytes]], float | None]:
    """Start ``system``'s members; return them and the record lock (share groups) in seconds.
    ``tuned``: share-tuned's lock duration (ms) and ``max.poll.records``."""
    group = f"hot_{uid()}"
    if system in MARSHAL:
        coordination = coordination_topic(bootstrap)
        extra = []
        if system in ORDERED:
            # N slices of the partition for the fleet: fair share gives each member N/2
            extra = ["--ordering", ordering_of(system), "--workers-per-partition", str(n)]
            if system in CHILD_READS and not has_slice_reads():
                raise SystemExit(f"{system}: this marshal-run has no --slice-reads")
            if has_slice_reads():
                # said even for the default (host), so that MARSHAL_SLICE_READS in the
                # environment cannot make `unordered` measure what `unordered-child` does
                reads = "child" if system in CHILD_READS else "host"
                extra += ["--slice-reads", reads]
        members = [
            marshal_run(procs, log, handler=f"bench.hot_handlers:{handler}", mode="alo",
                        topic=topic, group=group, client_id=f"hot-{i}-{uid()}",
                        bootstrap=bootstrap, coordination=coordination, hb=HB_S,
                        batch_size=BATCH, env=env, extra=extra)
            for i in range(MEMBERS)
        ]  # fmt: skip
        return members, None
    base = [sys.executable, str(HOT_LOOPS)]
    common = ["--bootstrap-servers", bootstrap, "--topic", topic, "--handler", handler]
    if system == "plain":
        return [procs.start([*base, "plain", *common], log, child_env(**env))], None
    is_tuned = system == "share-tuned"
    lock_ms = tuned[0] if is_tuned else None
    configure_share_group(bootstrap, group, lock_ms)
    lock_s = lock_ms / 1000 if lock_ms is not None else DEFAULT_LOCK_S
    kafka = ["--kafka", f"max.poll.records={tuned[1]}"] if is_tuned else []
    members = [
        procs.start([*base, "member", *common, "--group", group, "--consumers", str(k),
                     "--lock-s", str(lock_s), *kafka], log, child_env(**env))
        for k in split(n)
    ]  # fmt: skip
    return members, lock_s
