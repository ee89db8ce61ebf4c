"""The two peers that `bench/peers.py` runs as processes of their own (not marshal-run):

    python bench/peer_loops.py plain  --bootstrap-servers B --topic T --records N --handler H
                                      [--partitions 8] [--first-partition 0] [--kafka KEY=VALUE ...]
    python bench/peer_loops.py plain2 (the same options)
    python bench/peer_loops.py arroyo --bootstrap-servers B --topic T --handler H
                                      [--processes 2] [--batch 500] [--batch-time 0.5]

``plain``: one process, one confluent-kafka consumer ``assign()``-ed to every partition at
offset 0, ``consume(500)`` batches, the handler called on each message in turn; it stops after
N records (a batch handler, ``count_batch``: called once per ``consume()`` batch).
``plain2``: two ``plain`` processes side by side, each on half the partitions and N/2 records,
and nothing else: what two cores give a handler run in two processes with no coordination at
all, a reference for any runner that spreads partitions over processes (the runtime goal's
"the limit is 2.0x" as this machine gives it, `bench/peers.py`).
``arroyo``: Sentry's Arroyo (``sentry-arroyo``), its ``StreamProcessor`` on a fresh
consumer group (``subscribe()``, earliest) with ``RunTaskWithMultiprocessing`` (a pool of
``--processes`` spawned workers running `bench.handlers.arroyo_task`) then ``CommitOffsets``; it
runs until SIGTERM or SIGINT. H is ``count`` or ``work`` from `bench/handlers.py`; the handler
itself writes the marks that the benchmark reads (``$BENCH_OUT``).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # bench.handlers, by that name (Arroyo's workers unpickle it)

from bench.handlers import BATCH_HANDLERS, HANDLERS  # noqa: E402

BATCH = 500


def plain(args: argparse.Namespace) -> None:
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    batch = BATCH_HANDLERS.get(args.handler)
    handler = HANDLERS.get(args.handler)
    kafka = dict(item.split("=", 1) for item in args.kafka)
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap_servers,
            "group.id": f"plain_{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            **kafka,
        }
    )
    first = args.first_partition
    partitions = range(first, first + args.partitions)
    consumer.assign([TopicPartition(args.topic, p, 0) for p in partitions])
    handled = 0
    try:
        while handled < args.records:
            messages = consumer.consume(BATCH, 0.2)
            if batch is not None:  # a batch handler: one call per batch of good messages
                good = [m for m in messages if m.error() is None]
                if good:
                    batch(good, None)
                    handled += len(good)
                continue
            assert handler is not None
            for msg in messages:
                if msg.error() is None:
                    handler(msg, None)
                    handled += 1
    finally:
        consumer.close()


def plain2(args: argparse.Namespace) -> None:
    """Two `plain` loops, each on half the partitions and half the records; until both end.
    A SIGTERM or SIGINT is passed on to them (they are this process's, in its group)."""
    if args.partitions % 2 or args.records % 2 or args.first_partition:
        raise SystemExit("plain2: an even --partitions and --records, from partition 0")
    half = args.partitions // 2
    common = [sys.executable, __file__, "plain", "--bootstrap-servers", args.bootstrap_servers,
              "--topic", args.topic, "--handler", args.handler, "--records",
              str(args.records // 2), "--partitions", str(half)]  # fmt: skip
    common += [x for item in args.kafka for x in ("--kafka", item)]
    loops = [subprocess.Popen([*common, "--first-partition", str(p)]) for p in (0, half)]

    def stop(signum: int, frame: Any) -> None:
        for loop in loops:
            loop.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # each reaped as it ends, whichever first: the bench counts a reaped child's CPU only
    while any(loop.poll() is None for loop in loops):
        time.sleep(0.01)


def arroyo(args: argparse.Namespace) -> None:
    # Arroyo's API as of sentry-arroyo 2.x (checked against 2.48's source).
    from arroyo.backends.kafka import (  # noqa: PLC0415
        KafkaConsumer,
        KafkaPayload,
        build_kafka_consumer_configuration,
    )
    from arroyo.processing import StreamProcessor  # noqa: PLC0415
    from arroyo.processing.strategies import (  # noqa: PLC0415
        CommitOffsets,
        ProcessingStrategy,
        ProcessingStrategyFactory,
        RunTaskWithMultiprocessing,
    )
    from arroyo.processing.strategies.run_task_with_multiprocessing import (  # noqa: PLC0415
        MultiprocessingPool,
    )
    from arroyo.types import Commit, Partition, Topic  # noqa: PLC0415

    from bench.handlers import arroyo_task  # noqa: PLC0415

    pool = MultiprocessingPool(num_processes=args.processes)

    class Factory(ProcessingStrategyFactory[KafkaPayload]):
        def create_with_partitions(
            self, commit: Commit, partitions: Mapping[Partition, int]
        ) -> ProcessingStrategy[KafkaPayload]:
            return RunTaskWithMultiprocessing(
                function=arroyo_task,
                next_step=CommitOffsets(commit),
                max_batch_size=args.batch,
                max_batch_time=args.batch_time,
                pool=pool,
            )

    consumer = KafkaConsumer(
        build_kafka_consumer_configuration(
            default_config={},
            bootstrap_servers=[args.bootstrap_servers],
            auto_offset_reset="earliest",
            group_id=f"arroyo_{uuid.uuid4().hex[:8]}",
        )
    )
    processor = StreamProcessor(consumer, Topic(args.topic), Factory())

    def stop(signum: int, frame: Any) -> None:
        processor.signal_shutdown()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        processor.run()
    finally:
        pool.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("system", choices=("plain", "plain2", "arroyo"))
    ap.add_argument("--bootstrap-servers", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--handler", choices=sorted({*HANDLERS, *BATCH_HANDLERS}), default="count")
    ap.add_argument("--records", type=int, default=0, help="plain: stop after this many")
    ap.add_argument("--partitions", type=int, default=8, help="plain: assign N partitions")
    ap.add_argument("--first-partition", type=int, default=0, help="plain: from this one")
    ap.add_argument("--kafka", action="append", default=[], help="plain: KEY=VALUE")
    ap.add_argument("--processes", type=int, default=2, help="arroyo: the pool's size")
    ap.add_argument("--batch", type=int, default=BATCH, help="arroyo: max_batch_size")
    ap.add_argument("--batch-time", type=float, default=0.5, help="arroyo: max_batch_time (s)")
    args = ap.parse_args()
    if args.system == "plain":
        plain(args)
    elif args.system == "plain2":
        plain2(args)
    else:
        arroyo(args)


if __name__ == "__main__":
    main()
