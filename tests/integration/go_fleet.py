"""Writing a Marshal Go fleet's records to real Kafka, as the Go library does: the exact text
format, no record key, the ``marshal-go`` partitioner (md5 of the topic), a plain producer."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from pathlib import Path

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from marshal_workers.clients.rdkafka import RDKAFKA_LOG
from marshal_workers.log.topicadmin import coordination_topic_config
from marshal_workers.protocol.wire import Partitioner, coordination_partition, decode

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "marshal_go_log.txt"


def fixture_lines(group: str, topic: str) -> list[bytes]:
    """The fixture's records with its group and topic renamed (``shop.billing``/``orders``)."""
    out = []
    for line in FIXTURE.read_text().splitlines():
        if line and not line.startswith("#"):
            out.append(line.replace("/shop.billing/orders/", f"/{group}/{topic}/").encode())
    return out


def create_go_topic(bootstrap: str, partitions: int, *, compacted: bool = False) -> str:
    """A coordination topic as a Go team would have it: delete policy (Go's records have no
    key, which compaction refuses), LogAppendTime or not, it does not matter to Go."""
    name = f"__marshal_go_{uuid.uuid4().hex[:8]}"
    config = coordination_topic_config(1)
    if not compacted:
        config["cleanup.policy"] = "delete"
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": RDKAFKA_LOG})
    admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(30)
    return name


def write_go_records(
    bootstrap: str, topic: str, partitions: int, lines: Iterable[bytes]
) -> list[KafkaError | None]:
    """Produce each line keyless to its Go coordination partition; the delivery errors."""
    producer = Producer({"bootstrap.servers": bootstrap, "logger": RDKAFKA_LOG, "acks": "all"})
    errors: list[KafkaError | None] = []
    for line in lines:
        msg = decode(line)
        home = coordination_partition(msg.topic, msg.partition, partitions, Partitioner.MARSHAL_GO)
        producer.produce(
            topic, value=line, partition=home, on_delivery=lambda e, _m: errors.append(e)
        )
    assert producer.flush(30) == 0
    return errors
