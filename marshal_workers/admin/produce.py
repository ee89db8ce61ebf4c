"""`marshal-admin produce`: write records to a data topic on any cluster, one per input line
(`produce`), read and checked first (`parse_records`).

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
from typing import IO, Any, Final

import click

from marshal_workers.admin.options import json_option
from marshal_workers.clients import roles
from marshal_workers.clients.kafkaconfig import client_config
from marshal_workers.clients.rdkafka import error_text
from marshal_workers.common.errors import ConfigError, MarshalError
from marshal_workers.config.toolconfig import FleetSettings, kafka_options
from marshal_workers.log.topicadmin import (
    admin_client,
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


@click.command("produce")
@kafka_options
@click.argument("topic_name", metavar="TOPIC")
@click.option(
    "--file",
    "source",
    type=click.File("rb"),  # decoded line by line: a line that is not UTF-8 is named
    default="-",
    show_default="stdin",
    help="Read the records from this file, one per line.",
)
@click.option(
    "--key-field",
    default=None,
    metavar="K",
    help="Lines are JSON objects, written as they are, keyed by their field K. Without it, "
    'lines are "KEY<TAB>VALUE" (a line without a tab: no key, the line is the value).',
)
@json_option
def produce_command(
    *,
    fleet: FleetSettings,
    topic_name: str,
    source: IO[bytes],
    key_field: str | None,
    as_json: bool,
) -> None:
    """Write records to TOPIC, one per line of --file or stdin (blank lines skipped).

    Every line is checked before anything is written (a bad line: exit 2, nothing written);
    keys are hashed as the Java producer hashes them. Exits 0 once every record is
    acknowledged (acks=all). --json: {"topic", "records", "partitions": {P: {"records",
    "first_offset", "last_offset"}}}.
    """
    records = parse_records(source, key_field)
    done = produce(fleet.bootstrap_servers, topic_name, records, kafka=fleet.kafka)
    click.echo(json.dumps(done.to_json()) if as_json else done.line())
