"""Reading a Marshal Go fleet's coordination topic, read-only, and what the admin shows of it.

`marshal-admin status --go-topic NAME` and `dump --go-topic NAME` read a Go fleet's topic
(dropbox/marshal): a plain consumer that is only `assign()`ed, never subscribes, commits or
writes, reads every partition from its first stored offset to the end it had at the start.
Records need no key, any cleanup policy will do, and the Kafka timestamp plays no part: the
fold is Go's own (`gofold`), on the senders' clocks. `read_go_state` also serves
`marshal-admin import-go`, which seeds our coordination log with the positions it finds.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from marshal_workers.clients import roles
from marshal_workers.clients.kafkaconfig import client_config
from marshal_workers.clients.rdkafka import error_text
from marshal_workers.common.errors import ConfigError, MarshalError
from marshal_workers.log.topicadmin import admin_client, high_watermarks
from marshal_workers.protocol.gofold import GoWorld, as_worlds, fold_go
from marshal_workers.protocol.groupstatus import group_status, iso_ms, render_table
from marshal_workers.protocol.wire import CoordRecord


def read_go_records(
    bootstrap_servers: str,
    topic: str,
    timeout_s: float,
    extra_config: Mapping[str, str] | None = None,
) -> Iterator[CoordRecord]:
    """Every record of ``topic`` up to its end at the start, in offset order per partition."""
    fixed = {
        "group.id": f"marshal-admin-go-{uuid.uuid4().hex[:8]}",  # never joined
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "allow.auto.create.topics": False,
    }
    consumer = roles.coordination_reader(
        client_config(bootstrap_servers, extra_config, fixed=fixed)
    )
    try:
        deadline = time.monotonic() + timeout_s
        ranges = _ranges(consumer, bootstrap_servers, topic, timeout_s)
        wanted = {p: high for p, (low, high) in ranges.items() if high > low}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in wanted])
        while wanted:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise MarshalError(f"could not read {topic} to its end within {timeout_s:.0f}s")
            for m in consumer.consume(num_messages=10_000, timeout=min(remaining, 0.5)):
                error = m.error()
                if error is not None:
                    if error.retriable():
                        continue
                    raise MarshalError(f"reading {topic}: {error_text(error)}")
                p, offset = m.partition(), m.offset()
                if p is None or offset is None:
                    continue
                if p in wanted and offset < wanted[p]:
                    yield CoordRecord(p, offset, m.timestamp()[1], m.key(), m.value())
                if p in wanted and offset >= wanted[p] - 1:
                    del wanted[p]
    finally:
        consumer.close()


def _ranges(
    consumer: Consumer, bootstrap: str, topic: str, timeout_s: float
) -> dict[int, tuple[int, int]]:
    """Each partition's (first stored offset, end)."""
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise ConfigError(f"Marshal Go topic {topic!r} does not exist on {bootstrap}")
        out = {}
        for p in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=timeout_s, cached=False
            )
            out[p] = (int(low), int(high))
        return out
    except KafkaException as exc:
        raise MarshalError(f"cannot read {topic} on {bootstrap}: {error_text(exc)}") from None


def read_go_state(
    bootstrap_servers: str,
    topic: str,
    hb_s: int,
    timeout_s: float,
    extra_config: Mapping[str, str] | None = None,
) -> GoWorld:
    """The Go fleet's state: its whole topic folded as Go folds it."""
    world = GoWorld(hb_s)
    for record in read_go_records(bootstrap_servers, topic, timeout_s, extra_config):
        fold_go(world, record)
    return world


def go_status(
    bootstrap_servers: str,
    topic: str,
    group: str,
    hb_s: int,
    as_json: bool,
    timeout_s: float,
    extra_config: Mapping[str, str] | None = None,
    now_ms: int | None = None,
) -> str:
    """`status --go-topic`: who the Go fleet believes holds what, and its positions (freshness
    at the wall clock, with Go's heartbeat interval; lag from the data topics' ends)."""
    world = read_go_state(bootstrap_servers, topic, hb_s, timeout_s, extra_config)
    worlds = as_worlds(world)
    topics = {k.topic for k in world.claims if k.group == group}
    highs = high_watermarks(
        admin_client(bootstrap_servers, extra_config), bootstrap_servers, topics
    )
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    status = group_status(group, worlds, hb_s * 1000, now, highs)
    if as_json:
        return json.dumps({**status.to_json(), "source": "marshal-go", "topic": topic})
    return f"Marshal Go fleet on {topic} (read-only; sender clocks)\n{render_table(status)}"


def go_dump(
    bootstrap_servers: str,
    topic: str,
    hb_s: int,
    as_json: bool,
    timeout_s: float,
    extra_config: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """`dump --go-topic`: every record with what a Go reader did with it."""
    world = GoWorld(hb_s)
    for record in read_go_records(bootstrap_servers, topic, timeout_s, extra_config):
        verdict = fold_go(world, record)
        entry: dict[str, Any] = {
            "partition": record.partition,
            "offset": record.offset,
            "log_time": iso_ms(record.timestamp_ms),
            "key": None if record.key is None else record.key.decode(errors="backslashreplace"),
            "message": (record.value or b"").decode(errors="backslashreplace"),
            "verdict": "applied" if verdict.applied else "ignored",
            "reason": verdict.what,
        }
        if as_json:
            yield json.dumps(entry)
        else:
            yield (
                f"{record.partition}:{record.offset}  {entry['log_time']}  {entry['message']}"
                f"  -> {entry['verdict']}: {verdict.what}"
            )
