"""Rows to Arrow and back: how the audit's tables travel between Python and Spark.

Spark hands the fold Arrow record batches of coordination records and takes back *packed*
batches (`schema.PACKED_DDL`): a row per table holding a whole Arrow batch of that table's
rows as IPC bytes. Only pyarrow here, no Spark.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import pyarrow as pa
import pyarrow.ipc

from marshal_workers.audit.schema import described
from marshal_workers.audit.tables import Row
from marshal_workers.protocol.wire import CoordRecord

_TYPES: Final[dict[str, Any]] = {
    "string": pa.string(),
    "long": pa.int64(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
}

RECORD_SCHEMA: Final = pa.schema(
    [
        ("partition", pa.int64()),
        ("offset", pa.int64()),
        ("timestamp_ms", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
    ]
)
"""The coordination records the fold reads, whatever their source."""


def arrow_schema(table: str) -> Any:
    """The Arrow schema of one table."""
    return pa.schema([(name, _TYPES[kind]) for name, kind, _ in described(table)])


PACKED_SCHEMA: Final = pa.schema(
    [("table", pa.string()), ("rows", pa.int64()), ("data", pa.binary())]
)


def pack(table: str, rows: Sequence[Row]) -> bytes:
    """Rows of one table as an Arrow IPC stream (one batch in the table's schema)."""
    batch = table_batch(table, rows)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue())


def unpack(data: bytes) -> Any:
    """The record batch of a `pack`ed blob."""
    return pa.ipc.open_stream(data).read_next_batch()


def packed_batch(tables: Mapping[str, Sequence[Row]]) -> Any:
    """One `PACKED_SCHEMA` batch: a row per table with rows."""
    names = [name for name, rows in tables.items() if rows]
    return pa.RecordBatch.from_arrays(
        [
            pa.array(names, pa.string()),
            pa.array([len(tables[n]) for n in names], pa.int64()),
            pa.array([pack(n, tables[n]) for n in names], pa.binary()),
        ],
        schema=PACKED_SCHEMA,
    )


def table_batch(table: str, rows: Sequence[Row]) -> Any:
    """A record batch of one table in its own schema."""
    schema = arrow_schema(table)
    transposed: list[Sequence[Any]] = (
        list(zip(*rows, strict=True)) if rows else [[] for _ in schema]
    )
    arrays = [pa.array(col, f.type) for col, f in zip(transposed, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def rows_of(batch: Any, table: str) -> list[Row]:
    """The rows of a batch in the table's schema, as tuples in column order."""
    names = [name for name, _, _ in described(table)]
    cols = [batch.column(name).to_pylist() for name in names]
    return list(zip(*cols, strict=True)) if cols else []


def records_of(batch: Any) -> Iterator[CoordRecord]:
    """The coordination records of a batch in `RECORD_SCHEMA`."""
    cols = [batch.column(name).to_pylist() for name in RECORD_SCHEMA.names]
    for p, o, t, k, v in zip(*cols, strict=True):
        yield CoordRecord(p, o, t, k, v)


def record_batch(records: Iterable[CoordRecord]) -> Any:
    """A batch in `RECORD_SCHEMA` from coordination records."""
    rs = list(records)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r.partition for r in rs], pa.int64()),
            pa.array([r.offset for r in rs], pa.int64()),
            pa.array([r.timestamp_ms for r in rs], pa.int64()),
            pa.array([r.key for r in rs], pa.binary()),
            pa.array([r.value for r in rs], pa.binary()),
        ],
        schema=RECORD_SCHEMA,
    )
