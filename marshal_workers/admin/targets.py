"""Where `set-position` moves a group: target offsets from the data topic's own offsets.

``--to-earliest`` and ``--to-latest`` are the partitions' low and high watermarks,
``--to-datetime`` the first offset whose record timestamp is at or after the time (the high
watermark where there is none), ``--to-offset P=O[,...]`` the offsets given, checked against
the topic's partitions and their watermarks. Offsets are Kafka's "next offset to read".

A target at the end (``--to-latest``, and ``--to-datetime`` where no record is at or after the
time) moves while the fleet runs: `Targets.ends` names those partitions, and `end_target_now`
reads such a target again when its position is set, after the holders have released (the end
read for the plan is behind what they handled meanwhile).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from confluent_kafka import KafkaException, TopicPartition

from marshal_workers.admin.connection import reach_timeout
from marshal_workers.clients import roles
from marshal_workers.clients.kafkaconfig import client_config
from marshal_workers.clients.rdkafka import ErrorMemory, error_text
from marshal_workers.common.errors import ConfigError, MarshalError
from marshal_workers.config.timearg import TimeArgError, parse_time_ms
from marshal_workers.log.kafkalog import OPEN_TIMEOUT_S


class OffsetSource(Protocol):
    """A data topic's partitions and offsets (Kafka, or a fake in tests)."""

    def partitions(self, topic: str) -> list[int]:
        """The topic's partitions; ConfigError if it does not exist."""
        ...

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """(low, high): the first offset still stored, the next offset to be written."""
        ...

    def offsets_for_time(
        self, topic: str, partitions: Sequence[int], time_ms: int
    ) -> dict[int, int | None]:
        """Per partition, the first offset whose timestamp is >= ``time_ms`` (None: none)."""
        ...


class Kind(StrEnum):
    """Which kind of target."""

    EARLIEST = "earliest"
    LATEST = "latest"
    OFFSETS = "offsets"
    DATETIME = "datetime"


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """What the operator asked for."""

    kind: Kind
    offsets: Mapping[int, int] = field(default_factory=dict)
    time_ms: int | None = None


def parse_offsets(text: str) -> dict[int, int]:
    """``P=O[,P=O...]`` as {partition: offset}; ConfigError naming what is wrong."""
    out: dict[int, int] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        p_text, sep, o_text = item.partition("=")
        if not sep or not p_text.strip().isdigit() or not o_text.strip().isdigit():
            raise ConfigError(
                f"--to-offset: {item!r} is not PARTITION=OFFSET (two non-negative integers)"
            )
        p = int(p_text)
        if p in out:
            raise ConfigError(f"--to-offset: partition {p} is given twice")
        out[p] = int(o_text)
    if not out:
        raise ConfigError("--to-offset: no PARTITION=OFFSET given")
    return out


def parse_time(text: str, what: str) -> int:
    """An ISO 8601 time or Unix seconds (see `timearg`) as Unix ms; ConfigError naming ``what``."""
    try:
        return parse_time_ms(text)
    except TimeArgError as exc:
        raise ConfigError(f"{what}: {exc}") from None


@dataclass(frozen=True, slots=True)
class Targets:
    """The target offset of each partition to move, and which of them are the partition's end
    as read now (to be read again before it is set: `end_target_now`)."""

    offsets: dict[int, int]
    ends: frozenset[int] = frozenset()


def compute_targets(source: OffsetSource, topic: str, spec: TargetSpec) -> Targets:
    """The target offset of each partition to move (ConfigError for an impossible request)."""
    partitions = source.partitions(topic)
    if spec.kind is Kind.OFFSETS:
        unknown = sorted(set(spec.offsets) - set(partitions))
        if unknown:
            raise ConfigError(
                f"--to-offset: {topic} has no partition {', '.join(map(str, unknown))} "
                f"(it has {len(partitions)}: 0 to {len(partitions) - 1})"
            )
        out: dict[int, int] = {}
        for p, offset in sorted(spec.offsets.items()):
            low, high = source.watermarks(topic, p)
            if not low <= offset <= high:
                raise ConfigError(
                    f"--to-offset: offset {offset} of {topic}[{p}] is outside {low}..{high} "
                    "(the records still stored, and the end)"
                )
            out[p] = offset
        return Targets(out)
    if spec.kind is Kind.EARLIEST:
        return Targets({p: source.watermarks(topic, p)[0] for p in partitions})
    if spec.kind is Kind.LATEST:
        return Targets(
            {p: source.watermarks(topic, p)[1] for p in partitions}, frozenset(partitions)
        )
    assert spec.time_ms is not None
    found = source.offsets_for_time(topic, partitions, spec.time_ms)
    ends = frozenset(p for p in partitions if found.get(p) is None)
    return Targets({p: _found_or_end(source, topic, p, found.get(p)) for p in partitions}, ends)


def end_target_now(source: OffsetSource, topic: str, spec: TargetSpec, partition: int) -> int:
    """The target of a partition that was at its end in `compute_targets`, read again now:
    the end now, or for ``--to-datetime`` the first record at or after the time if one has
    been written since."""
    if spec.kind is Kind.DATETIME:
        assert spec.time_ms is not None
        found = source.offsets_for_time(topic, [partition], spec.time_ms).get(partition)
        return _found_or_end(source, topic, partition, found)
    return source.watermarks(topic, partition)[1]


def _found_or_end(source: OffsetSource, topic: str, partition: int, found: int | None) -> int:
    return found if found is not None else source.watermarks(topic, partition)[1]


class KafkaOffsetSource:
    """`OffsetSource` on a real broker: a consumer that never subscribes. Each request waits at
    most `reach_timeout` of ``timeout_s`` (as long as the coordination log's open waits for the
    cluster)."""

    def __init__(
        self,
        bootstrap_servers: str,
        extra_config: Mapping[str, str] | None = None,
        timeout_s: float = OPEN_TIMEOUT_S,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.timeout_s = reach_timeout(timeout_s)
        self._errors = ErrorMemory()
        fixed = {
            "group.id": f"marshal-admin-meta-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "error_cb": self._errors,
        }
        self._consumer = roles.data_consumer(
            client_config(bootstrap_servers, extra_config, fixed=fixed)
        )

    def partitions(self, topic: str) -> list[int]:
        try:
            meta = self._consumer.list_topics(topic, timeout=self.timeout_s).topics.get(topic)
        except KafkaException as exc:
            self._consumer.poll(0)  # serve the error callback: why the cluster is unreachable
            within = f" within {self.timeout_s:.0f}s"
            said = self._errors.unreachable(self.bootstrap_servers, error_text(exc), within)
            raise MarshalError(said) from None
        if meta is None or meta.error is not None or not meta.partitions:
            raise ConfigError(f"topic {topic!r} does not exist on {self.bootstrap_servers}")
        return sorted(meta.partitions)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        try:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=self.timeout_s, cached=False
            )
        except KafkaException as exc:
            raise MarshalError(
                f"cannot read watermarks of {topic}[{partition}]: {error_text(exc)}"
            ) from None
        return int(low), int(high)

    def offsets_for_time(
        self, topic: str, partitions: Sequence[int], time_ms: int
    ) -> dict[int, int | None]:
        wanted = [TopicPartition(topic, p, time_ms) for p in partitions]
        try:
            found = self._consumer.offsets_for_times(wanted, timeout=self.timeout_s)
        except KafkaException as exc:
            raise MarshalError(
                f"cannot look up offsets by time in {topic}: {error_text(exc)}"
            ) from None
        return {tp.partition: (int(tp.offset) if tp.offset >= 0 else None) for tp in found}

    def close(self) -> None:
        """Release the consumer."""
        self._consumer.close()
