"""The audit's Spark jobs: distribute the pure functions, never restate them.

Each job is a DataFrame shuffle that puts what belongs together in one Spark partition, in
order, and a ``mapInArrow`` that runs a pure function of this package over it:

- `fold_by_claim`: records annotated by a window over each coordination partition (in the
  JVM), then by claim and offset -> `claimfold.fold_claim_batches`: as many folds in parallel
  as there are claims, however few coordination partitions hold them.
- `table`: packed rows -> one table's own columns (and `finalize.add_lag` for lag).
- `check`: ledger rows by (topic, partition, start) -> `checks.check_partition` against the
  claim intervals, which are small and travel inside the function's closure.

The fold's output (every table, packed as Arrow IPC batches, see `schema.PACKED_DDL`) is
persisted on disk once, so each table is written without folding again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from marshal_workers.audit import arrow
from marshal_workers.audit.checks import CheckStats, ClaimIndex, check_partition
from marshal_workers.audit.claimfold import (
    ANNOTATED,
    CLAIM_TYPES,
    FOLD_KEY,
    GROUP_TYPES,
    PLACED,
    Context,
    fold_claim_batches,
)
from marshal_workers.audit.finalize import add_lag
from marshal_workers.audit.fold import FoldSettings
from marshal_workers.audit.ledger import entries_of, is_complete
from marshal_workers.audit.schema import PACKED_DDL, columns, ddl, described
from marshal_workers.audit.tables import Row, Window
from marshal_workers.common.ledgerfile import LedgerRow
from marshal_workers.protocol.wire import MAX_LOG_TIME_MS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CHECK_DDL: Final = ddl("violations") + ", `stats` string"


ARROW_BATCH_KEY: Final = "spark.sql.execution.arrow.maxRecordsPerBatch"
Transform = Callable[[list[Row]], list[Row]]


def fold_by_claim(
    placed: DataFrame, settings: FoldSettings, partitions: int, context: Context
) -> DataFrame:
    """Every table's rows, packed (`schema.PACKED_DDL`), from the records annotated
    (`annotated`), folded per claim (`claimfold`) with the groups' records (``context``,
    `claimfold.context_of`); persisted on disk.

    A packed row holds megabytes, so the session must not keep many in memory at once: the
    cache's column batches are bounded in bytes by Spark, and `session.spark_conf` makes Java
    serialization forget each cached batch once written (``objectStreamReset``)."""
    from pyspark import StorageLevel  # noqa: PLC0415

    def run(batches: Iterable[Any]) -> Iterator[Any]:
        return fold_claim_batches(batches, settings, context)

    packed = fold_input(placed, partitions).mapInArrow(run, PACKED_DDL)
    return packed.persist(StorageLevel.DISK_ONLY)


def fold_input(routed: DataFrame, partitions: int) -> DataFrame:
    """Annotated records as the fold's tasks take them: spread by fold key (claim), each
    fold's records together and in offset order."""
    ordered = routed.repartition(partitions, *FOLD_KEY).sortWithinPartitions(*FOLD_KEY, *_ORDER)
    return ordered.select(*ANNOTATED)


_ORDER: Final = ("offset", "timestamp_ms", "key", "value")
"""A partition's records in offset order (the rest only orders copies of an offset, which no
Kafka log has but a dump file may)."""


def annotated(records: DataFrame) -> DataFrame:
    """The records with `claimfold.annotate`'s facts (one window per coordination partition,
    in the JVM) and their fold's key (`claimfold.route`, on the value's fields)."""
    from pyspark.sql import Window  # noqa: PLC0415
    from pyspark.sql import functions as f  # noqa: PLC0415

    order = Window.partitionBy("partition").orderBy(*_ORDER)
    upto = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    offset, stamp = f.col("offset"), f.col("timestamp_ms")
    with_previous = records.withColumn("previous", f.lag("offset").over(order))
    previous = f.col("previous")
    behind = previous.isNotNull() & (offset <= previous)
    follows_gap = ~behind & (offset > f.coalesce(previous + 1, f.lit(0)))
    valid = f.when(~behind & (stamp <= MAX_LOG_TIME_MS), stamp)
    timed = with_previous.select(
        "*",
        behind.alias("behind"),
        follows_gap.alias("follows_gap"),
        f.greatest(f.coalesce(f.max(valid).over(upto), f.lit(0)), f.lit(0)).alias("log_time"),
    )
    gapped = timed.select(
        "*",
        f.last(f.when(f.col("follows_gap"), offset), ignorenulls=True)
        .over(upto)
        .alias("gap_offset"),
        f.last(f.when(f.col("follows_gap"), f.col("log_time")), ignorenulls=True)
        .over(upto)
        .alias("gap_time"),
    )
    fields = f.split(f.col("value").cast("string"), "/", 9)
    kind, count = f.get(fields, 0), f.size(fields)
    part = f.get(fields, 7).try_cast("bigint")
    claim = kind.isin(*CLAIM_TYPES) & (count >= 8) & part.isNotNull()
    group = kind.isin(*GROUP_TYPES) & (count >= 6)
    return gapped.select(
        *PLACED,
        f.when(claim | group, f.get(fields, 5)).alias("fold_group"),
        f.when(claim, f.get(fields, 6)).alias("fold_topic"),
        f.when(claim, part).alias("fold_part"),
    )


def table(packed: DataFrame, name: str, transform: Transform | None = None) -> DataFrame:
    """One table of the fold's output, unpacked into its own columns (by the executors)."""

    def run(batches: Iterable[Any]) -> Iterator[Any]:
        for batch in batches:
            for data in batch.column("data").to_pylist():
                unpacked = arrow.unpack(data)
                if transform is None:
                    yield unpacked
                else:
                    yield arrow.table_batch(name, transform(arrow.rows_of(unpacked, name)))

    return packed.where(packed["table"] == name).select("data").mapInArrow(run, ddl(name))


def collect_tables(packed: DataFrame, names: Sequence[str]) -> dict[str, list[Row]]:
    """Several small tables of the fold's output, unpacked on the driver, in one pass."""
    out: dict[str, list[Row]] = {name: [] for name in names}
    for r in packed.where(packed["table"].isin(list(names))).collect():
        out[r["table"]].extend(arrow.rows_of(arrow.unpack(r["data"]), r["table"]))
    return out


def lag_transform(watermarks: Mapping[tuple[str, int], int]) -> Transform:
    """`finalize.add_lag` with the high watermarks read at audit time."""
    marks = dict(watermarks)

    def run(rows: list[Row]) -> list[Row]:
        return add_lag(rows, marks)

    return run


@contextmanager
def _one_packed_row_per_batch(spark: SparkSession) -> Iterator[None]:
    """Hand packed rows (megabytes each) to Python one per Arrow batch, not thousands."""
    old = spark.conf.get(ARROW_BATCH_KEY) or "10000"
    spark.conf.set(ARROW_BATCH_KEY, "1")
    try:
        yield
    finally:
        spark.conf.set(ARROW_BATCH_KEY, old)


def write_table(
    packed: DataFrame, out: Path, name: str, transform: Transform | None = None
) -> None:
    """Unpack a big table and write it as Parquet into ``out/name`` (replacing an old one)."""
    frame = table(packed, name, transform)
    with _one_packed_row_per_batch(packed.sparkSession):
        frame.write.mode("overwrite").parquet(str(out / name))


def claim_reservations(spark: SparkSession, path: Path, claims: set[tuple[Any, ...]]) -> list[Row]:
    """The rows of the ``reservations`` table written at ``path`` of these claims (group,
    topic, partition, client, instance, token; `amo.abandoned_claims`): a few claims' rows out
    of a table of one row per reservation, by a broadcast semi-join."""
    if not claims:
        return []
    from pyspark.sql.functions import broadcast  # noqa: PLC0415

    keys = columns("reservations")[:6]
    schema = ", ".join(f"`{n}` {k}" for n, k, _ in described("reservations")[:6])
    wanted = spark.createDataFrame(sorted(claims, key=str), schema)
    frame = spark.read.parquet(str(path)).join(broadcast(wanted), list(keys), "left_semi")
    names = columns("reservations")
    return [tuple(r[n] for n in names) for r in frame.collect()]


def check(
    ledger: DataFrame, index: ClaimIndex, tolerance_s: float, window: Window, partitions: int
) -> tuple[list[Row], CheckStats, set[tuple[str, int]]]:
    """Violations, counts, and the data partitions the ledger covers.

    Incomplete ledger lines (nulls) travel along and are counted, so one job does it all."""

    def run(batches: Iterable[Any]) -> Iterator[Any]:
        return _check_batches(batches, index, tolerance_s, window)

    ordered = ledger.repartition(partitions, "topic", "partition").sortWithinPartitions(
        "topic", "partition", "start", "offset"
    )
    violations: list[Row] = []
    stats = CheckStats()
    seen: set[tuple[str, int]] = set()
    names = columns("violations")
    for r in ordered.mapInArrow(run, CHECK_DDL).collect():
        if r["stats"] is None:
            violations.append(tuple(r[c] for c in names))
            continue
        stats.add(CheckStats(**json.loads(r["stats"])))
        if r["topic"] is not None:
            seen.add((r["topic"], r["partition"]))
    return violations, stats, seen


def _check_batches(
    batches: Iterable[Any], index: ClaimIndex, tolerance_s: float, window: Window
) -> Iterator[Any]:
    current: tuple[str, int] | None = None
    rows: list[LedgerRow] = []
    incomplete = 0
    for batch in batches:
        for entry in entries_of(batch):
            if not is_complete(entry):  # a torn line; older rows lack only optional fields
                incomplete += 1
                continue
            key = (entry.topic, entry.partition)
            if key != current and current is not None:
                yield _checked(current, rows, index, tolerance_s, window)
                rows = []
            current = key
            rows.append(entry)
    if current is not None:
        yield _checked(current, rows, index, tolerance_s, window)
    if incomplete:
        yield _stats_batch([], None, CheckStats(incomplete_lines=incomplete))


def _checked(
    key: tuple[str, int],
    rows: list[LedgerRow],
    index: ClaimIndex,
    tolerance_s: float,
    window: Window,
) -> Any:
    found, stats = check_partition(key[0], key[1], rows, index, tolerance_s, window)
    return _stats_batch(found, key, stats)


def _stats_batch(found: list[Row], key: tuple[str, int] | None, stats: CheckStats) -> Any:
    """Violations plus one row carrying the counts (and which partition they are of)."""
    import pyarrow as pa  # noqa: PLC0415

    topic, partition = key if key is not None else (None, None)
    stats_row = ("", None, topic, partition, None, None, None, None, None, None, None, None, None)
    batch = arrow.table_batch("violations", [*found, stats_row])
    stats_col = [None] * len(found) + [json.dumps(asdict(stats))]
    return pa.RecordBatch.from_arrays(
        [*batch.columns, pa.array(stats_col, pa.string())],
        names=[*batch.schema.names, "stats"],
    )
