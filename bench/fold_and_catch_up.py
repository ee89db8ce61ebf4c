"""Benchmark: fold throughput, and how long a fresh reader takes to catch up on a real broker.

    .venv/bin/python bench/fold_and_catch_up.py [--records 1000000] [--catch-up 100000,1000000]
                                               [--bootstrap-servers HOST:PORT] [--skip-kafka]

Prints figures; asserts nothing about time (these machines are noisy). Without
--bootstrap-servers it starts a local one-node Kafka in a temporary directory and stops it.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import Producer

from marshal_workers.localkafka import StartOptions, start_cluster
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.kafkalog import KafkaLog
from marshal_workers.log.topicadmin import ensure_coordination_topic
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.wire import (
    ClaimingMessages,
    ClaimingPartition,
    CoordRecord,
    Heartbeat,
    Message,
    ReleasingPartition,
    encode,
    record_key,
)

HB_MS = 10_000
FOLD_TARGET = 300_000
CATCH_UP_TARGET_S = 10.0


def synthetic(n: int, partitions: int = 256, clients: int = 16, seed: int = 7) -> Iterator[Message]:
    """A busy fleet's log: claims, heartbeats every step, AMO reservations, some rebalancing."""
    rng = random.Random(seed)
    holder = {p: f"client-{p % clients}" for p in range(partitions)}
    for p in range(min(n, partitions)):
        yield ClaimingPartition(0, f"{holder[p]}-i", holder[p], "shop.billing", "orders", p)
    offsets = dict.fromkeys(range(partitions), 0)
    for _ in range(n - min(n, partitions)):
        p = rng.randrange(partitions)
        c = holder[p]
        roll = rng.random()
        if roll < 0.45:
            offsets[p] += 500
            yield ClaimingMessages(0, f"{c}-i", c, "shop.billing", "orders", p, offsets[p])
        elif roll < 0.995:
            yield Heartbeat(0, f"{c}-i", c, "shop.billing", "orders", p, offsets[p])
        else:  # a graceful hand-over to another client
            yield ReleasingPartition(0, f"{c}-i", c, "shop.billing", "orders", p, offsets[p])
            holder[p] = f"client-{rng.randrange(clients)}"
            yield ClaimingPartition(0, f"{holder[p]}-i", holder[p], "shop.billing", "orders", p)


def bench_fold(n: int) -> float:
    """Decode and fold ``n`` records of one coordination partition; return records/s."""
    records = [
        CoordRecord(0, i, 1_700_000_000_000 + i, record_key(m), encode(m))
        for i, m in enumerate(synthetic(n))
    ]
    world = World(RationalizerConfig(HB_MS), 0)
    start = time.perf_counter()
    for r in records:
        fold(world, r)
    elapsed = time.perf_counter() - start
    assert world.malformed == 0 and world.next_offset == len(records)
    return len(records) / elapsed


def produce(bootstrap: str, topic: str, n: int) -> None:
    """Write ``n`` synthetic coordination records to ``topic`` (partition 0), batched."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "lz4",
        }
    )
    for m in synthetic(n, seed=11):
        while True:
            try:
                producer.produce(topic, encode(m), record_key(m), partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(120) != 0:
        raise SystemExit("producer did not flush")


def bench_catch_up(bootstrap: str, n: int) -> tuple[float, int]:
    """Create a topic with ``n`` records; time a fresh reader's catch-up. (seconds, records)"""

    topic = f"__marshal_bench_{uuid.uuid4().hex[:8]}"
    ensure_coordination_topic(bootstrap, topic, partitions=1, replication_factor=1)
    produce(bootstrap, topic, n)
    start = time.perf_counter()
    log = KafkaLog(bootstrap, topic)
    reader = FoldedLog(log, RationalizerConfig(HB_MS))
    reader.catch_up(timeout_s=300)
    elapsed = time.perf_counter() - start
    folded = reader.worlds[0].next_offset
    log.close()
    return elapsed, folded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--catch-up", default="100000,1000000")
    ap.add_argument("--bootstrap-servers")
    ap.add_argument("--skip-kafka", action="store_true")
    args = ap.parse_args()

    rate = bench_fold(args.records)
    print(
        f"fold (decode + rationalize), {args.records:,} records, one core: {rate:,.0f} records/s"
        f"  ({rate / FOLD_TARGET:.2f}x the {FOLD_TARGET:,}/s target)"
    )
    if args.skip_kafka:
        return
    sizes = [int(s) for s in args.catch_up.split(",") if s]
    if args.bootstrap_servers:
        run_catch_up(args.bootstrap_servers, sizes)
        return
    with tempfile.TemporaryDirectory(prefix="marshal-bench-") as tmp:
        t0 = time.perf_counter()
        cluster = start_cluster(StartOptions(directory=Path(tmp), nodes=1))
        print(f"local Kafka (1 node) started in {time.perf_counter() - t0:.1f} s")
        try:
            run_catch_up(cluster.bootstrap, sizes)
        finally:
            cluster.stop()


def run_catch_up(bootstrap: str, sizes: list[int]) -> None:
    for n in sizes:
        seconds, folded = bench_catch_up(bootstrap, n)
        print(
            f"fresh reader catch-up on {folded:,} real records: {seconds:.2f} s "
            f"({folded / seconds:,.0f} records/s; target for 1M: <= {CATCH_UP_TARGET_S:.0f} s)"
        )


if __name__ == "__main__":
    main()
