"""Data topics on any cluster, for an operator: `create_topic` and `produce` (what
`marshal-admin topic create` and `marshal-admin produce` do), and `parse_records`, which reads
the lines `produce` writes.

Input lines (blank lines are skipped; a trailing CR is dropped):

- by default ``KEY<TAB>VALUE`` (the value may hold more tabs), or a line without a tab: a record
  without a key whose value is the line;
- with ``key_field``: one JSON object per line, written as it is, keyed by its field
  ``key_field`` (a string as it is, anything else as JSON).

Every line is read and checked before anything is written: a bad line (not UTF-8, or not
what ``key_field`` asks for: exit 2, its number) writes nothing. Records are written with the
package's one client builder, acks=all and idempotent, and keys are hashed with murmur2 as the
Java producer and Kafka's own tools hash them, so a key lands on the partition any other
Kafka client would put it on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from marshal_workers.clients import roles
from marshal_workers.clients.kafkaconfig import client_config
from marshal_workers.clients.rdkafka import error_text
from marshal_workers.common.errors import ConfigError, MarshalError
from marshal_workers.log.topicadmin import (
    ADMIN_TIMEOUT_S,
    admin_client,
    await_topic,
    describe_topic,
)

PRODUCE_TIMEOUT_S: Final = 60.0
# The Java producer's partitioner for keyed records (keyless ones are spread at random).
PRODUCER_TUNING: Final[Mapping[str, Any]] = {"partitioner": "murmur2_random", "linger.ms": 5}

Record = tuple[bytes | None, bytes]


def parse_records(lines: Iterable[bytes | str], key_field: str | None = None) -> list[Record]:
    """The records of ``lines`` (see the module doc; bytes must be UTF-8); ConfigError naming
    the line if bad."""
    records: list[Record] = []
    for number, given in enumerate(lines, 1):
        raw = given if isinstance(given, str) else _utf8(given, number)
        line = raw.rstrip("\n").rstrip("\r")
        if not line.strip():
            continue
        if key_field is None:
            key, tab, value = line.partition("\t")
            records.append((key.encode(), value.encode()) if tab else (None, line.encode()))
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"line {number}: not a JSON object ({exc})") from None
        if not isinstance(obj, dict) or key_field not in obj:
            raise ConfigError(f"line {number}: no field {key_field!r} for the key")
        found = obj[key_field]
        key_text = found if isinstance(found, str) else json.dumps(found)
        records.append((key_text.encode(), line.encode()))
    return records


def _utf8(raw: bytes, number: int) -> str:
    """Line ``number`` as text; ConfigError naming the first byte that is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        byte = raw[exc.start]
        raise ConfigError(
            f"line {number}: not UTF-8 (byte 0x{byte:02x} at column {exc.start + 1})"
        ) from None


def create_topic(
    bootstrap_servers: str,
    name: str,
    partitions: int,
    replication_factor: int | None = None,
    *,
    if_not_exists: bool = False,
    kafka: Mapping[str, str] | None = None,
    timeout_s: float = ADMIN_TIMEOUT_S,
) -> dict[str, object]:
    """Create topic ``name`` (replication factor: the broker's default unless given); what was
    done as a JSON object. An existing topic is an error unless ``if_not_exists``."""
    admin = admin_client(bootstrap_servers, kafka)
    info = describe_topic(admin, bootstrap_servers, name, timeout_s)
    if info is not None:
        if not if_not_exists:
            raise MarshalError(
                f"topic {name} already exists on {bootstrap_servers} ({info.partitions} partitions)"
            )
        return _said(name, False, info.partitions, info.replication_factor)
    new = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor or -1)
    try:
        admin.create_topics([new], request_timeout=timeout_s)[name].result(timeout=timeout_s)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS or not if_not_exists:
            raise MarshalError(f"cannot create topic {name}: {error_text(exc)}") from None
    except TimeoutError:
        raise MarshalError(
            f"cannot create topic {name}: no answer within {timeout_s:.0f}s"
        ) from None
    made = await_topic(admin, bootstrap_servers, name, timeout_s)
    return _said(name, True, made.partitions, made.replication_factor)


def _said(name: str, created: bool, partitions: int, rf: int) -> dict[str, object]:
    return {"topic": name, "created": created, "partitions": partitions, "replication_factor": rf}


@dataclass
class Produced:
    """What `produce` wrote: per partition, the records and their first and last offsets."""

    topic: str
    offsets: dict[int, list[int]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    @property
    def records(self) -> int:
        return sum(len(o) for o in self.offsets.values())

    def to_json(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "records": self.records,
            "partitions": {
                str(p): {"records": len(o), "first_offset": min(o), "last_offset": max(o)}
                for p, o in sorted(self.offsets.items())
            },
        }

    def line(self) -> str:
        parts = ", ".join(f"partition {p}: {len(o)}" for p, o in sorted(self.offsets.items()))
        return f"produced {self.records} record(s) to {self.topic}" + (
            f" ({parts})" if parts else ""
        )


def produce(
    bootstrap_servers: str,
    topic: str,
    records: list[Record],
    *,
    kafka: Mapping[str, str] | None = None,
    timeout_s: float = PRODUCE_TIMEOUT_S,
) -> Produced:
    """Write ``records`` to the existing ``topic`` and wait for every acknowledgement;
    MarshalError saying how many were written if any was not."""
    admin = admin_client(bootstrap_servers, kafka)
    if describe_topic(admin, bootstrap_servers, topic) is None:
        raise MarshalError(
            f"topic {topic} does not exist on {bootstrap_servers}: "
            f"create it with `marshal-admin topic create {topic} --partitions N`"
        )
    done = Produced(topic)
    if not records:
        return done

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            done.errors.append(error_text(err))
        else:
            done.offsets.setdefault(msg.partition(), []).append(msg.offset())

    producer = roles.data_producer(client_config(bootstrap_servers, kafka, tuned=PRODUCER_TUNING))
    deadline = time.monotonic() + timeout_s
    for key, value in records:
        while True:
            try:
                producer.produce(topic, value=value, key=key, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                if time.monotonic() > deadline:
                    break
                producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(max(0.0, deadline - time.monotonic()))
    if done.errors or left or done.records < len(records):
        why = done.errors[0] if done.errors else f"not acknowledged within {timeout_s:.0f}s"
        raise MarshalError(f"wrote {done.records} of {len(records)} record(s) to {topic}: {why}")
    return done
