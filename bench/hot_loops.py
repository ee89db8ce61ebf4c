"""The peers that `bench/hot.py` runs as processes of their own (not marshal-run):

    python bench/hot_loops.py plain  --bootstrap-servers B --topic T --handler io|cpu
    python bench/hot_loops.py member --bootstrap-servers B --topic T --handler io|cpu
                                     --group G --consumers K --lock-s S [--kafka KEY=VALUE ...]
    python bench/hot_loops.py share  (the same options but --consumers: one consumer)

``plain``: one confluent-kafka consumer ``assign()``-ed to partition 0 at offset 0, the handler
on each message in turn, until SIGTERM. ``member``: one member (a host's worth) of a share
group: it starts ``--consumers`` processes of ``share`` and waits; SIGTERM ends them; they
die with it (PR_SET_PDEATHSIG), so a kill -9 of the member is a crash of the whole host.
``share``: one confluent-kafka ``ShareConsumer`` (KIP-932) with explicit acknowledgement:
``poll()``, then each record handled and acknowledged (ACCEPT) in turn; the acknowledgements
go to the broker with the next ``poll()``. ``--kafka`` settings are the consumer's (e.g.
``max.poll.records``). Each handled record is a ledger line (`bench/hot_handlers.py`), with
the time the poll returned (``acquired``) and the group's lock duration (``lock_s``).
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.hot_handlers import handle_and_record  # noqa: E402

_QUIET = logging.getLogger("bench.hot.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False
_running = True


def _stop(signum: int, frame: object) -> None:
    global _running  # noqa: PLW0603 (the loop's one flag)
    _running = False


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG = SIGKILL: this process ends when its parent does (Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)


def _ts(message: Any) -> int:
    return int(message.timestamp()[1])


def plain(args: argparse.Namespace) -> None:
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap_servers,
            "group.id": "hot_plain",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "logger": _QUIET,
        }
    )
    consumer.assign([TopicPartition(args.topic, 0, 0)])
    try:
        while _running:
            for msg in consumer.consume(500, 0.2):
                if msg.error() is None:
                    handle_and_record(args.handler, msg.offset(), _ts(msg))
    finally:
        consumer.close()


def share(args: argparse.Namespace) -> None:
    from confluent_kafka import IllegalStateException, KafkaException, ShareConsumer  # noqa: PLC0415

    _die_with_parent()
    kafka = dict(item.split("=", 1) for item in args.kafka)
    consumer = ShareConsumer(
        {
            "bootstrap.servers": args.bootstrap_servers,
            "group.id": args.group,
            "share.acknowledgement.mode": "explicit",
            "logger": _QUIET,
            **kafka,
        }
    )
    consumer.subscribe([args.topic])
    refused = 0
    try:
        while _running:
            messages = consumer.poll(0.5)
            acquired = time.time()
            for msg in messages:
                if msg.error() is not None:
                    continue
                handle_and_record(args.handler, msg.offset(), _ts(msg), acquired=acquired,
                                  lock_s=args.lock_s)  # fmt: skip
                try:
                    consumer.acknowledge(msg)
                except (IllegalStateException, KafkaException):  # the lock ended, as it knows
                    refused += 1
    finally:
        consumer.close()
    print(f"acknowledgements refused: {refused}", flush=True)


def member(args: argparse.Namespace) -> None:
    command = [sys.executable, __file__, "share", "--bootstrap-servers", args.bootstrap_servers,
               "--topic", args.topic, "--handler", args.handler, "--group", args.group,
               "--lock-s", str(args.lock_s)]  # fmt: skip
    command += [x for item in args.kafka for x in ("--kafka", item)]
    children = [subprocess.Popen(command) for _ in range(args.consumers)]
    while _running and any(c.poll() is None for c in children):
        time.sleep(0.2)
    for child in children:
        if child.poll() is None:
            child.terminate()
    for child in children:
        try:
            child.wait(15)
        except subprocess.TimeoutExpired:
            child.kill()


def main() -> None:
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("kind", choices=["plain", "member", "share"])
    ap.add_argument("--bootstrap-servers", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--handler", choices=["io", "cpu"], required=True)
    ap.add_argument("--group", default="")
    ap.add_argument("--consumers", type=int, default=1)
    ap.add_argument("--lock-s", type=float, default=30.0)
    ap.add_argument("--kafka", action="append", default=[], help="KEY=VALUE for the consumer")
    args = ap.parse_args()
    {"plain": plain, "member": member, "share": share}[args.kind](args)


if __name__ == "__main__":
    main()
