"""The audit on Spark, from the inputs to the tables, the checks and the report.

1. Read the coordination records (Kafka source or dump file) as a DataFrame.
2. Fold them (`spark_jobs.fold_by_claim`: Spark annotates each coordination partition in
   the JVM and distributes the claims, the workers' own fold runs on each, `claimfold`) into
   every table's rows at once, persisted on disk.
3. Collect the small tables (and the groups' claim keys, `schema.PARTS`), settle them
   (`model.finish_small`) and write them from the driver; write the big ones (events,
   reservations, lag) from Spark.
4. Check the ledgers against the claim intervals (`spark_jobs.check`).
5. Write report.html.

`local.run_local` does the same in one process; the tests hold this to it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from marshal_workers.audit import ledger as ledger_io
from marshal_workers.audit import output, sources, spark_jobs
from marshal_workers.audit.amo import abandoned_claims, date_abandoned, loss_order
from marshal_workers.audit.checks import check_unledgered, unledgered_note
from marshal_workers.audit.claimfold import context_of
from marshal_workers.audit.exitcodes import AuditFailedError, AuditUsageError
from marshal_workers.audit.fold import FoldSettings
from marshal_workers.audit.model import (
    SMALL,
    AuditConfig,
    AuditResult,
    KafkaInput,
    finish_small,
)
from marshal_workers.audit.progress import Progress, silent
from marshal_workers.audit.schema import PARTS
from marshal_workers.audit.session import SessionOptions, error_line, start_session
from marshal_workers.common.errors import MarshalError
from marshal_workers.protocol.slicing import data_topic

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

T = TypeVar("T")


def run(
    config: AuditConfig, progress: Progress | None = None, spark: SparkSession | None = None
) -> AuditResult:
    """The audit on Spark (a session is started unless one is given); see the module doc."""
    progress = progress or Progress(silent)
    config = config.absolute()
    created = not config.out.exists()
    try:
        config.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AuditUsageError(f"cannot create --out {config.out}: {exc.strerror}") from None
    try:
        return _checked_run(config, progress, spark)
    except AuditUsageError:  # a refused command line leaves no empty --out behind
        if created:
            with contextlib.suppress(OSError):  # (only if still empty)
                config.out.rmdir()
        raise


def _checked_run(
    config: AuditConfig, progress: Progress, spark: SparkSession | None
) -> AuditResult:
    files = ledger_io.ledger_files(config.ledgers)
    if config.ledger_topic is not None and not isinstance(config.source, KafkaInput):
        raise AuditUsageError("--ledger-topic needs --bootstrap-servers")
    num_partitions = None
    if isinstance(config.source, KafkaInput):  # before Spark starts: a bad address fails fast
        from marshal_workers.audit import kafka_meta  # noqa: PLC0415

        num_partitions = kafka_meta.coordination_partitions(config.source, progress)
    if spark is None:
        spark = _start(config, progress)
    with progress.watch(spark):
        return _run(config, progress, spark, files, num_partitions)


def _start(config: AuditConfig, progress: Progress) -> SparkSession:
    from marshal_workers.audit import jars  # noqa: PLC0415

    options = config.session
    if isinstance(config.source, KafkaInput) or config.ledger_topic is not None:
        found = jars.resolve(progress=progress.step)
        options = SessionOptions(
            options.master, options.driver_memory, options.shuffle_partitions,
            tuple(found), options.extra, options.app_name,
        )  # fmt: skip
    progress.step(f"starting Spark ({options.master})")
    return start_session(options)


def _run(
    config: AuditConfig,
    progress: Progress,
    spark: SparkSession,
    files: list[Path],
    num_partitions: int | None,
) -> AuditResult:
    from pyspark import StorageLevel  # noqa: PLC0415

    source = config.source
    if isinstance(source, KafkaInput):
        from marshal_workers.audit import kafka_meta  # noqa: PLC0415

        ends = kafka_meta.coordination_ends(source)  # one moment for every job's read
        records = sources.kafka_topic(
            spark, source.bootstrap_servers, source.topic, source.kafka, ends
        )
    else:
        records = sources.dump_file(spark, source.path)
    # annotated once (a window per coordination partition): the groups' records are read from
    # it with their log times, and the fold reads it again. Persisting plans the query, which
    # for a Kafka source reads offsets from the broker: a failure there is one line too.
    placed = _spark(lambda: spark_jobs.annotated(records).persist(StorageLevel.DISK_ONLY))
    try:
        return _fold_and_check(config, progress, spark, files, num_partitions, placed)
    finally:
        placed.unpersist()


def _fold_and_check(
    config: AuditConfig,
    progress: Progress,
    spark: SparkSession,
    files: list[Path],
    num_partitions: int | None,
    placed: DataFrame,
) -> AuditResult:
    from marshal_workers.audit import kafka_meta  # noqa: PLC0415

    source, out = config.source, config.out
    group_records = _spark(lambda: sources.group_records(placed))
    config = config.with_heartbeats(group_records)
    settings = FoldSettings(
        config.rationalizer(num_partitions), config.window, heartbeats=config.heartbeats
    )
    spread = _fold_tasks(spark, config)
    progress.step(f"folding {source} ({_intervals_text(config)}) in {spread} tasks")
    context = context_of(group_records)
    packed = _spark(lambda: spark_jobs.fold_by_claim(placed, settings, spread, context))
    try:
        raw = _spark(lambda: spark_jobs.collect_tables(packed, (*SMALL, *PARTS)))
        tables, end_ms, index = finish_small(raw, config)
        result = AuditResult(config, tables, end_ms, index)
        folded = sum(int(r[1]) for r in tables["coordination"])
        progress.step(f"folded {folded} records; writing tables to {out}")
        _spark(lambda: spark_jobs.write_table(packed, out, "events"))
        _spark(lambda: spark_jobs.write_table(packed, out, "reservations"))
        topics = sorted({data_topic(str(r[1])) for r in tables["claims"]})
        marks = {}
        if isinstance(source, KafkaInput):
            marks = kafka_meta.data_watermarks(source, topics, progress)
        lag = spark_jobs.lag_transform(marks)
        _spark(lambda: spark_jobs.write_table(packed, out, "lag", lag))
    finally:
        packed.unpersist()
    tables["violations"] = []
    if config.has_ledger:
        _check(spark, config, progress, result, files)
    for name in (*SMALL, "amo_losses", "violations"):
        output.write_small(out, name, tables[name])
    if config.report:
        from marshal_workers.audit import report  # noqa: PLC0415

        lag_frame = spark.read.parquet(str(out / "lag"))
        result.lag_points = _spark(lambda: report.lag_points_spark(lag_frame))
        result.report_path = report.write_report(result, out / "report.html")
        progress.step(f"report: {result.report_path}")
    return result


def _fold_tasks(spark: SparkSession, config: AuditConfig) -> int:
    """How many tasks fold the claims: the session's shuffle partitions (also as given in
    ``MARSHAL_AUDIT_SPARK_CONF``), and at least one per core Spark has."""
    given = spark.conf.get("spark.sql.shuffle.partitions") or config.session.shuffle_partitions
    return max(int(given), spark.sparkContext.defaultParallelism)


def _intervals_text(config: AuditConfig) -> str:
    """The heartbeat intervals the fold judges with, for the progress line."""
    recorded = config.heartbeats.newest_ms if config.heartbeats is not None else {}
    default = f"heartbeat interval {config.heartbeat_interval_ms} ms"
    if not recorded:
        return default
    groups = ", ".join(f"{g} {ms} ms" for g, ms in sorted(recorded.items()))
    return f"heartbeat intervals recorded in the log: {groups}; otherwise {default}"


def _check(
    spark: SparkSession,
    config: AuditConfig,
    progress: Progress,
    result: AuditResult,
    files: list[Path],
) -> None:
    frames = []
    if files:
        frames.append(ledger_io.spark_files(spark, files))
    if config.ledger_topic is not None:
        assert isinstance(config.source, KafkaInput)
        frames.append(
            ledger_io.spark_topic(
                spark, config.source.bootstrap_servers, config.ledger_topic, config.source.kafka
            )
        )
    # Never empty: a --ledger path without a ledger file was refused (`ledger.ledger_files`).
    ledger = frames[0]
    for other in frames[1:]:
        ledger = ledger.unionByName(other)
    index = result.index.with_ledger_groups(_spark(lambda: ledger_io.ledger_groups(ledger)))
    claims = result.tables["claims"]
    progress.step(f"checking the ledger against {len(claims)} claim intervals")
    spread = config.session.shuffle_partitions
    found, stats, seen = _spark(
        lambda: spark_jobs.check(ledger, index, config.tolerance_s, config.window, spread)
    )
    more, more_stats = check_unledgered(index, seen, config.window)
    stats.add(more_stats)
    result.tables["violations"] = sorted([*found, *more], key=lambda r: tuple(map(str, r)))
    losses = [tuple(r) for r in stats.amo_losses]
    reservations = _spark(
        lambda: spark_jobs.claim_reservations(
            spark, config.out / "reservations", abandoned_claims(losses)
        )
    )
    losses = date_abandoned(losses, reservations)
    result.tables["amo_losses"] = sorted(losses, key=loss_order)
    result.check = stats
    progress.step(f"checked {stats.ledger_rows} ledger rows: {len(found) + len(more)} violations")
    if stats.unledgered:
        progress.step(unledgered_note(stats.unledgered))


def _spark(action: Callable[[], T]) -> T:
    """Run a Spark action; a JVM or Python-worker failure becomes one line (exit 3)."""
    try:
        return action()
    except MarshalError:
        raise
    except Exception as exc:
        raise AuditFailedError(f"Spark failed: {error_line(exc)}") from None
