"""Where the coordination records come from, as one Spark DataFrame in `arrow.RECORD_SCHEMA`.

- **Kafka**: the coordination topic read from its beginning to its end at the start (every
  partition's end asked once, `kafka_meta.coordination_ends`: one moment for all), with
  Spark's Kafka source (``spark-sql-kafka-0-10``, see `jars`). The log time is the record's
  Kafka timestamp, which is the broker's LogAppendTime on a topic made by
  ``marshal-admin init``. ``failOnDataLoss`` is off: records that retention or compaction
  removed are gaps, which the fold already treats as compacted history.
- **A dump file**: what ``marshal-admin dump --json`` prints (JSON lines with ``partition``,
  ``offset``, ``log_time_ms``, ``key``, ``message``), or the same columns in Parquet (a
  ``.parquet`` file or a directory of them). Key and message are the record's bytes as text;
  the dump's verdicts are ignored, since the audit folds the records again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from marshal_workers.audit.exitcodes import AuditFailedError, AuditUsageError
from marshal_workers.audit.javakafka import java_options
from marshal_workers.audit.placed import Placed
from marshal_workers.audit.session import error_line
from marshal_workers.common.secrets import redact_text
from marshal_workers.protocol.wire import CoordRecord

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DUMP_DDL: Final = (
    "`partition` long, `offset` long, `log_time_ms` long, `key` string, `message` string"
)
_RECORD_COLUMNS: Final = (
    "CAST(`partition` AS BIGINT) AS `partition`",
    "CAST(`offset` AS BIGINT) AS `offset`",
)


def is_parquet(path: Path) -> bool:
    """Whether an input path is Parquet (a .parquet file or a directory) or JSON lines."""
    return path.suffix == ".parquet" or path.is_dir()


def dump_file(spark: SparkSession, path: Path) -> DataFrame:
    """The records of a ``marshal-admin dump --json`` file (or its Parquet form)."""
    if not path.exists():
        raise AuditUsageError(f"--input {path} does not exist")
    reader = spark.read
    if is_parquet(path):
        frame = reader.parquet(str(path))
        missing = {"partition", "offset", "log_time_ms", "key", "message"} - set(frame.columns)
        if missing:
            raise AuditUsageError(f"--input {path} lacks the dump columns {sorted(missing)}")
    else:
        frame = reader.schema(DUMP_DDL).option("mode", "PERMISSIVE").json(str(path))
    return frame.where("`partition` IS NOT NULL AND `offset` IS NOT NULL").selectExpr(
        *_RECORD_COLUMNS,
        "CAST(`log_time_ms` AS BIGINT) AS `timestamp_ms`",
        "CAST(encode(`key`, 'UTF-8') AS BINARY) AS `key`",
        "CAST(encode(`message`, 'UTF-8') AS BINARY) AS `value`",
    )


def kafka_frame(
    spark: SparkSession,
    bootstrap_servers: str,
    topic: str,
    kafka: Mapping[str, str] | None = None,
    ends: Mapping[int, int] | None = None,
) -> DataFrame:
    """A Kafka topic as Spark's Kafka source reads it (``key``, ``value``, ``timestamp``, ...),
    from its beginning to ``ends`` (every partition's end offset; None: its end when a job
    reads it) (needs the connector), as the fleet's ``[kafka]`` table says to connect
    (translated for the Java client, `javakafka`); AuditFailedError if it cannot (its line
    shows no secret)."""
    options = java_options(kafka or {}).spark()
    ending = "latest" if ends is None else json.dumps({topic: {str(p): o for p, o in ends.items()}})
    try:
        return (
            spark.read.format("kafka")
            .options(**options)
            .option("kafka.bootstrap.servers", bootstrap_servers)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", ending)
            .option("failOnDataLoss", "false")
            .load()
        )
    except Exception as exc:  # the connector reports through Py4J
        why = redact_text(error_line(exc), options, kafka or {})
        raise AuditFailedError(f"cannot read {topic} from {bootstrap_servers}: {why}") from None


def kafka_topic(
    spark: SparkSession,
    bootstrap_servers: str,
    topic: str,
    kafka: Mapping[str, str] | None = None,
    ends: Mapping[int, int] | None = None,
) -> DataFrame:
    """The records of a Kafka topic, from its beginning to ``ends`` (`kafka_frame`; needs the
    connector)."""
    return kafka_frame(spark, bootstrap_servers, topic, kafka, ends).selectExpr(
        *_RECORD_COLUMNS,
        "unix_millis(`timestamp`) AS `timestamp_ms`",
        "`key`",
        "`value`",
    )


def group_records(placed: DataFrame) -> list[Placed]:
    """The records that may be a group's settings or pause (`claimfold.is_group_record`), with
    their partition's annotations (``placed``: `spark_jobs.annotated`): read before the fold,
    since each group's recorded heartbeat interval decides its verdicts (`heartbeats` decodes
    and checks them), and every fold of a group's claim folds them too, each at its partition's
    log time there (`claimfold.Context`)."""
    found = placed.where(
        "CAST(`value` AS STRING) LIKE 'GroupSettings/%' "
        "OR CAST(`value` AS STRING) LIKE 'ReleaseGroup/%'"
    ).collect()
    return [
        Placed(
            CoordRecord(
                int(r["partition"]),
                int(r["offset"]),
                int(r["timestamp_ms"]),
                None if r["key"] is None else bytes(r["key"]),
                bytes(r["value"]),
            ),
            int(r["log_time"]),
            None if r["gap_offset"] is None else int(r["gap_offset"]),
            None if r["gap_time"] is None else int(r["gap_time"]),
            bool(r["behind"]),
        )
        for r in found
    ]
