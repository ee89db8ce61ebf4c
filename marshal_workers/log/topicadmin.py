"""Creating and checking the coordination topic (docs/design.md, its log), and data-topic ends.

The coordination topic must stamp records with the broker's clock (LogAppendTime: every
claim is decided on it, so anything else is fatal), must not lose acknowledged records
(no unclean leader election, ``min.insync.replicas`` = min(2, RF)), and is compacted by key
so that the newest record of every claim (its last known offset) survives forever, while
``min.compaction.lag.ms`` keeps a window of full history and short segments let the cleaner
run. `diff_topic_config` is the pure check; the rest talks to the broker.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException, TopicPartition

# confluent_kafka.admin re-exports these without an __all__, which mypy --strict refuses.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from marshal_workers.clients import roles
from marshal_workers.clients.kafkaconfig import client_config
from marshal_workers.clients.rdkafka import ErrorMemory, error_text, refusal_hint
from marshal_workers.common.errors import MarshalError
from marshal_workers.log.partitioncount import read_topic_record, write_topic_record
from marshal_workers.protocol.leases import min_compaction_lag_ms

HISTORY_WINDOW_MS: Final = 7 * 24 * 3600 * 1000
SEGMENT_MS: Final = 3600 * 1000
MAX_SEGMENT_MS: Final = 24 * 3600 * 1000
ADMIN_TIMEOUT_S: Final = 10.0
INIT_CLIENT_ID: Final = "marshal-admin-init"


def coordination_topic_config(
    replication_factor: int,
    history_window_ms: int = HISTORY_WINDOW_MS,
    segment_ms: int = SEGMENT_MS,
) -> dict[str, str]:
    """The topic configuration `marshal-admin init` creates the coordination topic with."""
    return {
        "message.timestamp.type": "LogAppendTime",
        "unclean.leader.election.enable": "false",
        "min.insync.replicas": str(min(2, replication_factor)),
        "cleanup.policy": "compact",
        "min.compaction.lag.ms": str(history_window_ms),
        "segment.ms": str(segment_ms),
    }


@dataclass(frozen=True, slots=True)
class ConfigDifference:
    """One way an existing coordination topic differs from what it should be."""

    setting: str
    actual: str
    expected: str
    fatal: bool
    why: str

    def __str__(self) -> str:
        level = "fatal" if self.fatal else "warning"
        verb = "must" if self.fatal else "should"
        return f"{level}: {self.setting} is {self.actual}, {verb} be {self.expected} ({self.why})"


def _as_int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def diff_topic_config(
    actual: Mapping[str, str],
    replication_factor: int,
    history_window_ms: int = HISTORY_WINDOW_MS,
    heartbeat_interval_s: float | None = None,
) -> list[ConfigDifference]:
    """Every setting of ``actual`` (a topic's effective config) that breaks docs/design.md.

    Fatal: a timestamp type other than LogAppendTime, a ``min.insync.replicas`` above the
    replication factor (no acks=all write could ever succeed), and, for a member whose
    heartbeat interval is ``heartbeat_interval_s``, a ``min.compaction.lag.ms`` below the safe
    window (`min_compaction_lag_ms`); the rest warn.
    """
    out: list[ConfigDifference] = []

    def get(name: str) -> str:
        return actual.get(name, "unset")

    if get("message.timestamp.type") != "LogAppendTime":
        out.append(
            ConfigDifference(
                "message.timestamp.type",
                get("message.timestamp.type"),
                "LogAppendTime",
                True,
                "claims are decided on the broker's clock, never the sender's",
            )
        )
    if get("unclean.leader.election.enable") != "false":
        out.append(
            ConfigDifference(
                "unclean.leader.election.enable",
                get("unclean.leader.election.enable"),
                "false",
                False,
                "an unclean election can lose acknowledged claims",
            )
        )
    want_isr = min(2, replication_factor)
    isr = _as_int(actual.get("min.insync.replicas"))
    if isr is None or isr != want_isr:
        too_high = isr is not None and isr > replication_factor
        why = (
            f"above the replication factor {replication_factor}: no write can be acknowledged"
            if too_high
            else f"with replication factor {replication_factor}"
        )
        out.append(
            ConfigDifference(
                "min.insync.replicas", get("min.insync.replicas"), str(want_isr), too_high, why
            )
        )
    if get("cleanup.policy") != "compact":
        out.append(
            ConfigDifference(
                "cleanup.policy",
                get("cleanup.policy"),
                "compact",
                False,
                "deletion would forget the last offset of an idle claim",
            )
        )
    lag = _as_int(actual.get("min.compaction.lag.ms"))
    safe = None if heartbeat_interval_s is None else min_compaction_lag_ms(heartbeat_interval_s)
    if safe is not None and (lag is None or lag < safe):
        out.append(
            ConfigDifference(
                "min.compaction.lag.ms",
                get("min.compaction.lag.ms"),
                f">= {safe}",
                True,
                f"below 4 heartbeat intervals the cleaner can remove records of a lease "
                f"still running; `marshal-admin init` sets {history_window_ms}",
            )
        )
    elif lag is None or lag < history_window_ms:
        out.append(
            ConfigDifference(
                "min.compaction.lag.ms",
                get("min.compaction.lag.ms"),
                f">= {history_window_ms}",
                False,
                "full history should be kept for the history window",
            )
        )
    segment = _as_int(actual.get("segment.ms"))
    if segment is None or segment > MAX_SEGMENT_MS:
        out.append(
            ConfigDifference(
                "segment.ms",
                get("segment.ms"),
                f"<= {MAX_SEGMENT_MS}",
                False,
                "the cleaner only compacts closed segments",
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """What the broker says about an existing topic."""

    name: str
    partitions: int
    replication_factor: int
    config: dict[str, str]


def admin_client(
    bootstrap_servers: str, extra_config: Mapping[str, str] | None = None
) -> AdminClient:
    """An AdminClient whose librdkafka log goes to Python logging (not stderr), and whose errors
    are remembered (``errors``: an authentication failure is named as such)."""
    errors = ErrorMemory(log=True)
    admin = roles.admin(client_config(bootstrap_servers, extra_config, fixed={"error_cb": errors}))
    admin.errors = errors  # type: ignore[attr-defined]
    return admin


def cluster_metadata(
    admin: AdminClient, bootstrap: str, topic: str | None, timeout_s: float
) -> Any:
    """The cluster's metadata (of ``topic``, or every topic), or MarshalError: the one line of
    an unreachable cluster, naming an authentication failure as such."""
    try:
        return admin.list_topics(topic, timeout=timeout_s)
    except KafkaException as exc:
        errors = getattr(admin, "errors", None)
        if not isinstance(errors, ErrorMemory):
            raise MarshalError(
                f"cannot reach Kafka at {bootstrap} within {timeout_s:.0f}s: {error_text(exc)}"
            ) from None
        admin.poll(0)  # serve the error callbacks
        within = f" within {timeout_s:.0f}s"
        raise MarshalError(errors.unreachable(bootstrap, error_text(exc), within)) from None


def _result(future: Future[Any], what: str, timeout_s: float) -> Any:
    try:
        return future.result(timeout=timeout_s)
    except KafkaException as exc:
        raise MarshalError(f"{what}: {exc.args[0].str()}") from None
    except TimeoutError:
        raise MarshalError(f"{what}: no answer within {timeout_s:.0f}s") from None


def broker_count(admin: AdminClient, bootstrap: str, timeout_s: float = ADMIN_TIMEOUT_S) -> int:
    """How many brokers the cluster has."""
    return len(cluster_metadata(admin, bootstrap, None, timeout_s).brokers)


def describe_topic(
    admin: AdminClient, bootstrap: str, topic: str, timeout_s: float = ADMIN_TIMEOUT_S
) -> TopicInfo | None:
    """The topic's partitions, replication factor and effective config; None if it is missing."""
    meta = cluster_metadata(admin, bootstrap, topic, timeout_s).topics.get(topic)
    if meta is None or (
        meta.error is not None and meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    ):
        return None
    if meta.error is not None:
        raise MarshalError(
            f"cannot describe topic {topic}: {meta.error.str()}{refusal_hint(meta.error)}"
        )
    replicas = min((len(p.replicas) for p in meta.partitions.values()), default=0)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    futures = admin.describe_configs([resource], request_timeout=timeout_s)
    entries = _result(futures[resource], f"cannot read the config of {topic}", timeout_s)
    config = {name: entry.value for name, entry in entries.items() if entry.value is not None}
    return TopicInfo(topic, len(meta.partitions), replicas, config)


def await_topic(admin: AdminClient, bootstrap: str, topic: str, timeout_s: float) -> TopicInfo:
    """Describe a topic just created, waiting for the metadata to show it (and for every broker
    to know it: on a new multi-node cluster, reading its config can race its creation)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            info = describe_topic(admin, bootstrap, topic, timeout_s)
        except MarshalError:  # "Unknown topic or partition" from a broker that lags behind
            if time.monotonic() > deadline:
                raise
            info = None
        if info is not None and info.partitions > 0:
            return info
        if time.monotonic() > deadline:
            raise MarshalError(
                f"topic {topic} was created but is not visible after {timeout_s:.0f}s"
            )
        time.sleep(0.1)


@dataclass(frozen=True, slots=True)
class InitResult:
    """What `ensure_coordination_topic` did: created the topic, or found it with differences."""

    topic: TopicInfo
    created: bool
    differences: list[ConfigDifference]
    recorded_partitions: int | None = None  # the pinned count (`metadata`), None if unknown
    newly_recorded: bool = False  # this call wrote the record
    placed: bool = False  # the topic record is version 2: new groups on it are placed


def ensure_coordination_topic(
    bootstrap_servers: str,
    topic: str,
    partitions: int,
    replication_factor: int | None = None,
    *,
    partitions_requested: bool = True,
    history_window_ms: int = HISTORY_WINDOW_MS,
    timeout_s: float = ADMIN_TIMEOUT_S,
    extra_config: Mapping[str, str] | None = None,
    placed: bool = False,
    enable_placement: bool = False,
) -> InitResult:
    """Create the coordination topic, or check an existing one (never changed: only reported).

    ``replication_factor`` defaults to min(3, brokers). ``partitions_requested`` says whether
    the caller asked for ``partitions`` explicitly (then a different count is reported).
    ``placed``: a topic created now (or without a pinned count) gets a version-2 topic record,
    so that its new groups are placed; ``enable_placement``: so does an existing topic whose
    record is version 1 (`metadata`: members from before placement refuse to start once the
    cleaner has compacted the version-1 record away).
    """
    if partitions < 1:
        raise MarshalError("--partitions must be at least 1")
    admin = admin_client(bootstrap_servers, extra_config)
    rf = replication_factor or min(3, broker_count(admin, bootstrap_servers, timeout_s))
    created = False
    info = describe_topic(admin, bootstrap_servers, topic, timeout_s)
    if info is None:
        new = NewTopic(
            topic,
            num_partitions=partitions,
            replication_factor=rf,
            config=coordination_topic_config(rf, history_window_ms),
        )
        futures = admin.create_topics([new], request_timeout=timeout_s)
        try:
            futures[topic].result(timeout=timeout_s)
            created = True
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise MarshalError(f"cannot create {topic}: {exc.args[0].str()}") from None
        info = await_topic(admin, bootstrap_servers, topic, timeout_s)
    diffs = diff_topic_config(info.config, info.replication_factor, history_window_ms)
    if not created and partitions_requested and info.partitions != partitions:
        diffs.append(
            ConfigDifference(
                "partitions",
                str(info.partitions),
                f"{partitions} as asked",
                False,
                "the count of an existing coordination topic must never change: left as is",
            )
        )
    if not created and info.replication_factor < rf:
        diffs.append(
            ConfigDifference(
                "replication factor",
                str(info.replication_factor),
                str(rf),
                False,
                "a broker failure can lose the coordination log",
            )
        )
    pin = _pin_partition_count(
        bootstrap_servers,
        topic,
        info,
        (created, placed or enable_placement, enable_placement),
        diffs,
        timeout_s,
        extra_config,
    )
    return InitResult(info, created, diffs, *pin)


def _pin_partition_count(
    bootstrap: str,
    topic: str,
    info: TopicInfo,
    how: tuple[bool, bool, bool],
    diffs: list[ConfigDifference],
    timeout_s: float,
    extra_config: Mapping[str, str] | None,
) -> tuple[int, bool, bool]:
    """Record the partition count if the topic has no record yet (a topic just created, or
    once on an older one), version 2 if ``how`` says placed; turn a version-1 record into a
    version-2 one if ``how`` says enable; report a count that differs from the record as
    fatal. ``how``: (created, placed, enable); returns (count, written now, placed)."""
    created, placed, enable = how
    record = read_topic_record(bootstrap, topic, timeout_s, extra_config)
    if record is None:
        write_topic_record(
            bootstrap, topic, info.partitions, INIT_CLIENT_ID, timeout_s, extra_config, placed
        )
        if not created:
            diffs.append(
                ConfigDifference(
                    "recorded partition count",
                    "none",
                    str(info.partitions),
                    False,
                    "recorded now; it must be the count the fleet has always used",
                )
            )
        return info.partitions, True, placed
    if record.partitions != info.partitions:
        diffs.append(
            ConfigDifference(
                "partitions",
                str(info.partitions),
                f"{record.partitions} (recorded at init)",
                True,
                "claims would move to other coordination partitions; use a new coordination "
                "topic instead (docs/operating.md)",
            )
        )
        return record.partitions, False, record.placed
    if enable and not record.placed:
        write_topic_record(
            bootstrap, topic, record.partitions, INIT_CLIENT_ID, timeout_s, extra_config, True
        )
        return record.partitions, True, True
    return record.partitions, False, record.placed


def high_watermarks(
    admin: AdminClient,
    bootstrap: str,
    topics: Iterable[str],
    timeout_s: float = ADMIN_TIMEOUT_S,
) -> dict[tuple[str, int], int]:
    """The high watermark of every partition of ``topics`` (missing topics are left out)."""
    wanted = sorted(set(topics))
    if not wanted:
        return {}
    metadata = cluster_metadata(admin, bootstrap, None, timeout_s)
    specs: dict[TopicPartition, OffsetSpec] = {}
    for topic in wanted:
        meta = metadata.topics.get(topic)
        if meta is None or meta.error is not None:
            continue
        for p in meta.partitions:
            specs[TopicPartition(topic, p)] = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    if not specs:
        return {}
    futures = admin.list_offsets(specs, request_timeout=timeout_s)
    out: dict[tuple[str, int], int] = {}
    for tp, future in futures.items():
        info = _result(future, f"cannot read the end of {tp.topic}[{tp.partition}]", timeout_s)
        out[(tp.topic, tp.partition)] = int(info.offset)
    return out


def delete_topic(
    admin: AdminClient, bootstrap: str, topic: str, timeout_s: float = ADMIN_TIMEOUT_S
) -> bool:
    """Delete a topic and wait for the answer; False if it did not exist."""
    futures = admin.delete_topics([topic], request_timeout=timeout_s)
    try:
        futures[topic].result(timeout=timeout_s)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return False
        raise MarshalError(f"cannot delete {topic} on {bootstrap}: {exc.args[0].str()}") from None
    return True
