"""Writing the small tables (a row per claim or less) from the driver, with pyarrow.

The big tables (a row per record or heartbeat) are written by Spark's executors; the small
ones are already on the driver after settling, and a Spark job per small table would cost
more than the table. Both land as ``OUT/TABLE/part-*.parquet``, so ``spark.read.parquet``,
pyarrow and pandas read every table alike.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from marshal_workers.audit.arrow import table_batch
from marshal_workers.audit.tables import Row


def write_small(out: Path, name: str, rows: Sequence[Row]) -> Path:
    """Write ``rows`` of table ``name`` as ``out/name/part-00000.parquet`` (replacing it)."""
    directory = out / name
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    path = directory / "part-00000.parquet"
    pq.write_table(pa.Table.from_batches([table_batch(name, rows)]), path)
    return path


def read_table(out: Path, name: str) -> list[Row]:
    """Every row of a written table (either writer's), as tuples in column order."""
    from marshal_workers.audit.arrow import rows_of  # noqa: PLC0415

    table = pq.read_table(out / name)
    return [row for batch in table.to_batches() for row in rows_of(batch, name)]
