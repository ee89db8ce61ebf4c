"""Reading and writing the coordination topic's pinned partition count on a real broker.

`marshal-admin init` records the count (a CoordinationTopic record, see `metadata`) on
coordination partition 0 when it creates the topic, or once on an existing topic that has no
record. Members do not use this module: they find the record in their own fold of the log.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from marshal_workers.clients import roles
from marshal_workers.clients.kafkaconfig import client_config
from marshal_workers.clients.rdkafka import error_text
from marshal_workers.common.errors import MarshalError
from marshal_workers.protocol.metadata import (
    METADATA_PARTITION,
    TOPIC_RECORD_KEY,
    TopicRecord,
    decode_metadata,
    encode_metadata,
)
from marshal_workers.protocol.wire import DecodeError

# Errors that mean the broker will not take the record from this principal.
_REFUSED = frozenset(
    {
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError._AUTHENTICATION,
    }
)


def _topic_record(value: bytes | None) -> TopicRecord | None:
    try:
        meta = decode_metadata(value)
    except DecodeError:
        return None
    return meta if isinstance(meta, TopicRecord) else None


def _end_offset(consumer: Consumer, topic: str, deadline: float) -> int:
    """Partition 0's high watermark, retrying while the partition has no leader yet (a topic
    just created)."""
    tp = TopicPartition(topic, METADATA_PARTITION)
    while True:
        remaining = max(deadline - time.monotonic(), 0.1)
        try:
            return int(consumer.get_watermark_offsets(tp, timeout=remaining, cached=False)[1])
        except KafkaException:
            if time.monotonic() >= deadline:  # NOT_LEADER is not flagged retriable
                raise
        time.sleep(0.1)


def read_topic_record(
    bootstrap: str, topic: str, timeout_s: float, extra: Mapping[str, str] | None = None
) -> TopicRecord | None:
    """The newest CoordinationTopic record on partition 0 of ``topic``, or None."""
    consumer = roles.coordination_reader(
        client_config(
            bootstrap,
            extra,
            fixed={
                "group.id": f"marshal-meta-{uuid.uuid4().hex[:8]}",
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
            },
        )
    )
    deadline = time.monotonic() + timeout_s
    found: TopicRecord | None = None
    try:
        high = _end_offset(consumer, topic, deadline)
        if high <= 0:
            return None
        consumer.assign([TopicPartition(topic, METADATA_PARTITION, OFFSET_BEGINNING)])
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise MarshalError(f"could not read {topic}[0] to its end within {timeout_s:.0f}s")
            for m in consumer.consume(num_messages=10_000, timeout=min(remaining, 0.5)):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return found
                    continue
                if m.key() == TOPIC_RECORD_KEY:
                    found = _topic_record(m.value()) or found
                if (m.offset() or 0) + 1 >= high:
                    return found
    except KafkaException as exc:
        raise MarshalError(f"cannot read {topic}[0]: {error_text(exc)}") from None
    finally:
        consumer.close()


def write_topic_record(
    bootstrap: str,
    topic: str,
    partitions: int,
    client_id: str,
    timeout_s: float,
    extra: Mapping[str, str] | None = None,
    placed: bool = False,
) -> None:
    """Append the CoordinationTopic record (``partitions``; version 2 if ``placed``) to
    partition 0 and wait for the acknowledgement (acks=all); MarshalError if it is not
    acknowledged."""
    errors: list[str] = []
    delivered: list[bool] = []

    def on_error(err: KafkaError) -> None:
        # a fatal error (no producer id: the principal may not write) ends the wait; without
        # this callback librdkafka raises it from inside the delivery callback's poll
        if err.fatal() or err.code() in _REFUSED:
            errors.append(error_text(err))

    def on_delivery(err: Any, _msg: Any) -> None:
        delivered.append(True)
        if err is not None:
            errors.append(error_text(err))

    producer = roles.coordination_producer(
        client_config(bootstrap, extra, fixed={"error_cb": on_error})
    )
    instance = f"init-{uuid.uuid4().hex[:12]}"
    record = TopicRecord(int(time.time()), instance, client_id, partitions, placed=placed)
    try:
        producer.produce(
            topic,
            key=TOPIC_RECORD_KEY,
            value=encode_metadata(record),
            partition=METADATA_PARTITION,
            on_delivery=on_delivery,
        )
        deadline = time.monotonic() + timeout_s
        while not delivered and not errors and time.monotonic() < deadline:
            producer.poll(0.1)
    except KafkaException as exc:
        errors.append(error_text(exc))
    if errors or not delivered:
        why = errors[0] if errors else f"no acknowledgement within {timeout_s:.0f}s"
        raise MarshalError(
            f"cannot record the partition count on {topic}[0]: {why} (the principal needs Read "
            "and Write on the topic: marshal-admin acls --role init)"
        )
