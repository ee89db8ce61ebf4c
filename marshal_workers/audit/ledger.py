"""Ledgers: what the handlers say they processed (the format: `common.ledgerfile`).

One JSON object per line: ``topic, partition, offset, client_id, pid, token, start, end,
group, instance_id, slice`` (``start``/``end``: the handler host's ``time.time()``). A ``--ledger``
path is a file, or a directory whose ``*.jsonl`` files are all read; ``--ledger-topic`` reads
the same lines as the values of a Kafka topic. A line that is not a complete row (a process
killed mid-write) is counted and skipped, never fatal. ``group`` and ``instance_id`` are
optional: ledgers written before they existed lack them, and their rows are read with None
there (on both paths: the Spark schema names them, so a missing key is a null).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from marshal_workers.audit.checks import REQUIRED_FIELDS, LedgerEntry
from marshal_workers.audit.exitcodes import AuditUsageError
from marshal_workers.audit.sources import kafka_frame

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

LEDGER_DDL: Final = (
    "`topic` string, `partition` long, `offset` long, `client_id` string, `pid` long, "
    "`token` long, `start` double, `end` double, `group` string, `instance_id` string, "
    "`slice` string, `key_hash` long"
)


def ledger_files(paths: Iterable[Path]) -> list[Path]:
    """The files behind ``--ledger`` paths (directories expanded to their ``*.jsonl``)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(path.glob("*.jsonl")))
        elif path.is_file():
            files.append(path)
        else:
            raise AuditUsageError(f"--ledger {path} does not exist")
    return files


def parse_line(line: str) -> LedgerEntry | None:
    """One ledger line as an entry, or None if it is not a complete row."""
    try:
        obj = json.loads(line)
        return LedgerEntry(
            str(obj["topic"]), int(obj["partition"]), int(obj["offset"]), str(obj["client_id"]),
            int(obj["pid"]), int(obj["token"]), float(obj["start"]), float(obj["end"]),
            _optional_str(obj.get("group")), _optional_str(obj.get("instance_id")),
            _optional_str(obj.get("slice")), _optional_int(obj.get("key_hash")),
        )  # fmt: skip
    except (ValueError, KeyError, TypeError):
        return None


def _optional_str(value: object) -> str | None:
    """An optional field (absent or null in older ledgers: None)."""
    return None if value is None else str(value)


def _optional_int(value: object) -> int | None:
    """An optional integer field (absent or null: None)."""
    return None if value is None else int(str(value))


def is_complete(entry: LedgerEntry) -> bool:
    """Whether a row read by Spark has every required field (optional ones may be null)."""
    return all(getattr(entry, name) is not None for name in REQUIRED_FIELDS)


def read_entries(files: Sequence[Path]) -> tuple[list[LedgerEntry], int]:
    """Every complete row of the files (single-process path), and how many lines were not."""
    rows: list[LedgerEntry] = []
    bad = 0
    for path in files:
        for line in path.read_text("utf-8", "replace").splitlines():
            if not line.strip():
                continue
            entry = parse_line(line)
            if entry is None:
                bad += 1
            else:
                rows.append(entry)
    return rows, bad


def spark_files(spark: SparkSession, files: Sequence[Path]) -> DataFrame:
    """A DataFrame of every line of the files (incomplete rows have nulls)."""
    return spark.read.schema(LEDGER_DDL).option("mode", "PERMISSIVE").json([str(f) for f in files])


def spark_topic(spark: SparkSession, bootstrap_servers: str, topic: str) -> DataFrame:
    """A DataFrame of the ledger lines stored as the values of a Kafka topic."""
    raw = kafka_frame(spark, bootstrap_servers, topic)
    return raw.selectExpr(f"from_json(CAST(`value` AS STRING), '{LEDGER_DDL}') AS `row`").select(
        "row.*"
    )


def entries_of(batch: Any) -> Iterator[LedgerEntry]:
    """The entries of an Arrow batch with the ledger columns."""
    cols = [batch.column(name).to_pylist() for name in LedgerEntry._fields]
    for values in zip(*cols, strict=True):
        yield LedgerEntry(*values)
