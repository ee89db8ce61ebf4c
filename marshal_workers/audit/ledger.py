"""Ledgers: what the handlers say they processed (the format: `common.ledgerfile`).

One JSON object per line, with the fields of `common.ledgerfile.LedgerRow` (``start``/``end``:
the handler host's ``time.time()``). The audit's `LedgerRow`, the Spark schema (`LEDGER_DDL`)
and the line parser (`parse_line`) are all read off that one row, never listed again here. A
``--ledger`` path is a file, or a directory whose ``*.jsonl`` files are all read (one
without any is a usage error, as a path that does not exist);
``--ledger-topic`` reads the same lines as the values of a Kafka topic. A line that is not a
complete row (a process killed mid-write) is counted and skipped, never fatal. The optional
fields (``group``, ``instance_id``, ``slice``, ``key_hash``) may be missing: ledgers written
before they existed lack them, and their rows are read with None there (on both paths: the
Spark schema names them, so a missing key is a null).
"""

from __future__ import annotations

import json
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Union, get_args, get_origin, get_type_hints

from marshal_workers.audit.exitcodes import AuditUsageError
from marshal_workers.audit.sources import kafka_frame
from marshal_workers.common.ledgerfile import OPTIONAL_FIELDS, REQUIRED_FIELDS, LedgerRow

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def _field_types() -> tuple[tuple[str, type], ...]:
    """Each field of the ledger row and its value type (``str | None`` gives ``str``)."""
    out = []
    for name, hint in get_type_hints(LedgerRow).items():
        kinds = get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)
        (kind,) = (k for k in kinds if k is not type(None))
        out.append((name, kind))
    return tuple(out)


FIELD_TYPES: Final = _field_types()
_SPARK_TYPES: Final = {str: "string", int: "long", float: "double"}
LEDGER_DDL: Final = ", ".join(f"`{name}` {_SPARK_TYPES[kind]}" for name, kind in FIELD_TYPES)
"""The ledger row as Spark reads it (every field nullable: a missing one is a null)."""


def ledger_files(paths: Iterable[Path]) -> list[Path]:
    """The files behind ``--ledger`` paths (directories expanded to their own ``*.jsonl``,
    not their subdirectories'). AuditUsageError (exit 2) for a path that does not exist or a
    directory without a ledger file: checking no ledger would report every committed ALO
    record as missing, a finding about the command line, not about the fleet."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(path.glob("*.jsonl"))
            if not found:
                raise AuditUsageError(
                    f"--ledger {path}: no ledger file (*.jsonl) in it; files in its"
                    " subdirectories are not read: give each directory"
                )
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise AuditUsageError(f"--ledger {path} does not exist")
    return files


def parse_line(line: str) -> LedgerRow | None:
    """One ledger line as an entry, or None if it is not a complete row."""
    try:
        obj = json.loads(line)
        return LedgerRow._make(
            _optional(obj.get(name), kind) if name in OPTIONAL_FIELDS else kind(obj[name])
            for name, kind in FIELD_TYPES
        )
    except (ValueError, KeyError, TypeError):
        return None


def _optional(value: object, kind: type) -> object:
    """An optional field (absent or null in older ledgers: None); an integer must be written
    as one (``"3"`` or ``3``, never ``3.5``)."""
    if value is None:
        return None
    return int(str(value)) if kind is int else kind(value)


def is_complete(entry: LedgerRow) -> bool:
    """Whether a row read by Spark has every required field (optional ones may be null)."""
    return all(getattr(entry, name) is not None for name in REQUIRED_FIELDS)


def read_entries(files: Sequence[Path]) -> tuple[list[LedgerRow], int]:
    """Every complete row of the files (single-process path), and how many lines were not."""
    rows: list[LedgerRow] = []
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


def spark_topic(
    spark: SparkSession, bootstrap_servers: str, topic: str, kafka: Mapping[str, str] | None = None
) -> DataFrame:
    """A DataFrame of the ledger lines stored as the values of a Kafka topic."""
    raw = kafka_frame(spark, bootstrap_servers, topic, kafka)
    return raw.selectExpr(f"from_json(CAST(`value` AS STRING), '{LEDGER_DDL}') AS `row`").select(
        "row.*"
    )


def ledger_groups(ledger: DataFrame) -> list[str | None]:
    """The groups the complete rows of a ledger name (None: an older row, naming none)."""
    complete = ledger
    for name in REQUIRED_FIELDS:
        complete = complete.where(complete[name].isNotNull())
    return [r["group"] for r in complete.select("group").distinct().collect()]


def entries_of(batch: Any) -> Iterator[LedgerRow]:
    """The entries of an Arrow batch with the ledger columns."""
    cols = [batch.column(name).to_pylist() for name in LedgerRow._fields]
    for values in zip(*cols, strict=True):
        yield LedgerRow(*values)
