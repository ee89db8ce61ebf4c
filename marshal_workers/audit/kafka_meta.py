"""What the audit asks Kafka besides the records: partition count, timestamps, watermarks.

Through the same admin client as ``marshal-admin`` (confluent-kafka), not through Spark: the
coordination topic's partition count as recorded at init (so that the fold checks each
record's home partition with the count the supervisors used), whether its timestamps are
LogAppendTime (else "log time" is the senders' clocks, and the audit says so), and the data
partitions' high watermarks for lag.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from marshal_workers.audit.exitcodes import AuditFailedError, AuditUsageError
from marshal_workers.audit.progress import Progress
from marshal_workers.common.errors import MarshalError
from marshal_workers.log.partitioncount import read_topic_record
from marshal_workers.log.topicadmin import admin_client, describe_topic, high_watermarks

if TYPE_CHECKING:
    from marshal_workers.audit.model import KafkaInput

TIMEOUT_S = 20.0


def coordination_partitions(source: KafkaInput, progress: Progress) -> int:
    """The coordination topic's partition count; a warning if it is not LogAppendTime."""
    admin = admin_client(source.bootstrap_servers, source.kafka)
    try:
        info = describe_topic(admin, source.bootstrap_servers, source.topic, TIMEOUT_S)
    except MarshalError as exc:
        raise AuditFailedError(str(exc)) from None
    if info is None:
        raise AuditUsageError(
            f"coordination topic {source.topic} does not exist on {source.bootstrap_servers}"
        )
    kind = info.config.get("message.timestamp.type")
    if kind != "LogAppendTime":
        progress.step(
            f"warning: {source.topic} has message.timestamp.type={kind}: log times are the "
            "senders' clocks, not the broker's (see marshal-admin init)"
        )
    try:
        record = read_topic_record(source.bootstrap_servers, source.topic, TIMEOUT_S, source.kafka)
    except MarshalError as exc:
        raise AuditFailedError(str(exc)) from None
    if record is None:
        progress.step(
            f"warning: {source.topic} has no recorded partition count (marshal-admin init "
            f"records it): folding with its {info.partitions} partitions"
        )
        return info.partitions
    if record.partitions != info.partitions:
        progress.step(
            f"warning: {source.topic} has {info.partitions} partitions but {record.partitions} "
            "were recorded at init: folding with the recorded count, as the fleet did"
        )
    return record.partitions


def coordination_ends(source: KafkaInput) -> dict[int, int]:
    """Where the read of the coordination topic ends: every partition's end now, asked once in
    one request, so that every Spark job over the records reads to the same moment. With
    ``latest`` the end was resolved again by a job that read a partition later, and the
    partitions' reads ended seconds apart: a group whose home was read less far looked silent
    against the newest log time (90 false zombie_work on a live fleet; a review)."""
    admin = admin_client(source.bootstrap_servers, source.kafka)
    try:
        ends = high_watermarks(admin, source.bootstrap_servers, [source.topic], TIMEOUT_S)
    except MarshalError as exc:
        raise AuditFailedError(str(exc)) from None
    return {partition: end for (_, partition), end in ends.items()}


def data_watermarks(
    source: KafkaInput, topics: Sequence[str], progress: Progress
) -> dict[tuple[str, int], int]:
    """The high watermark of every partition of ``topics`` now (empty if Kafka will not say)."""
    if not topics:
        return {}
    try:
        admin = admin_client(source.bootstrap_servers, source.kafka)
        return high_watermarks(admin, source.bootstrap_servers, topics, TIMEOUT_S)
    except MarshalError as exc:
        progress.step(f"warning: no high watermarks, so no lag: {exc}")
        return {}
