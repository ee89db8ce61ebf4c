"""Benchmark: marshal-audit on Spark (local[2]) against the plain single-process fold.

    .venv/bin/python bench/audit_spark.py [--records 10000000] [--master local[2]]
                                         [--coord-partitions 16] [--keep DIR]

Writes N synthetic coordination records (a busy AMO fleet: reservations, heartbeats,
hand-overs and failovers, see `marshal_workers.audit.synthetic`) as a Parquet dump, then:

1. the plain fold: one process decodes and folds every record (`rationalizer.fold`), no tables;
2. the plain audit: one process folds and builds every table (`fold.fold_batches`), no I/O;
3. Spark: `marshal-audit --input DUMP.parquet` end to end (fold, tables, Parquet output,
   report), with the session start-up timed apart.

It prints wall times, records/s and the ratios, so the cost of Spark and where it would
break even are visible. It asserts nothing about time (these machines are noisy).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from marshal_workers.audit.arrow import RECORD_SCHEMA, records_of
from marshal_workers.audit.fold import FoldSettings, fold_batches
from marshal_workers.audit.model import AuditConfig, FileInput
from marshal_workers.audit.pipeline import run
from marshal_workers.audit.progress import Progress
from marshal_workers.audit.session import SessionOptions, start_session
from marshal_workers.audit.synthetic import Fleet, messages
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.wire import coordination_partition, encode, record_key

HB_MS = 10_000
CHUNK = 500_000
DUMP_SCHEMA = pa.schema(
    [("partition", pa.int64()), ("offset", pa.int64()), ("log_time_ms", pa.int64()),
     ("key", pa.string()), ("message", pa.string())]
)  # fmt: skip


def write_dump(path: Path, n: int, fleet: Fleet) -> float:
    """Generate ``n`` records into a Parquet dump (the dump's columns); return seconds."""
    started = time.perf_counter()
    next_offset = [0] * fleet.coord_partitions
    cols: list[list[object]] = [[], [], [], [], []]
    with pq.ParquetWriter(path, DUMP_SCHEMA) as writer:
        for t, msg in messages(n, fleet):
            part = coordination_partition(msg.topic, msg.partition, fleet.coord_partitions)
            for col, value in zip(
                cols,
                (part, next_offset[part], t, record_key(msg).decode(), encode(msg).decode()),
                strict=True,
            ):
                col.append(value)
            next_offset[part] += 1
            if len(cols[0]) >= CHUNK:
                writer.write_batch(pa.RecordBatch.from_arrays(cols, schema=DUMP_SCHEMA))
                cols = [[], [], [], [], []]
        if cols[0]:
            writer.write_batch(pa.RecordBatch.from_arrays(cols, schema=DUMP_SCHEMA))
    return time.perf_counter() - started


def record_batches(path: Path) -> list[object]:
    """The dump as record batches in `RECORD_SCHEMA`, sorted by (partition, offset)."""
    table = pq.read_table(path).sort_by([("partition", "ascending"), ("offset", "ascending")])
    table = pa.table(
        {
            "partition": table["partition"],
            "offset": table["offset"],
            "timestamp_ms": table["log_time_ms"],
            "key": pc.cast(table["key"], pa.binary()),
            "value": pc.cast(table["message"], pa.binary()),
        },
        schema=RECORD_SCHEMA,
    )
    return list(table.to_batches(max_chunksize=20_000))


def plain_fold(batches: list[object]) -> float:
    """Decode and fold every record in one process (no tables); return seconds."""
    started = time.perf_counter()
    config = RationalizerConfig(HB_MS)
    worlds: dict[int, World] = {}
    for batch in batches:
        for record in records_of(batch):
            world = worlds.get(record.partition)
            if world is None:
                world = worlds[record.partition] = World(config, record.partition)
            fold(world, record)
    assert sum(w.malformed for w in worlds.values()) == 0
    return time.perf_counter() - started


def plain_audit(batches: list[object]) -> float:
    """Fold and build every table in one process (what each Spark task runs); return s."""
    started = time.perf_counter()
    rows = 0
    for out in fold_batches(batches, FoldSettings(RationalizerConfig(HB_MS))):
        rows += out.num_rows  # type: ignore[attr-defined]
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--coord-partitions", type=int, default=16)
    ap.add_argument("--keep", type=Path, help="keep the dump and the audit output here")
    args = ap.parse_args()
    n = args.records
    fleet = Fleet(partitions=256, clients=16, coord_partitions=args.coord_partitions,
                  hb_ms=HB_MS, amo=True, batch=500, seed=7)  # fmt: skip
    root = args.keep or Path(tempfile.mkdtemp(prefix="marshal-audit-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    dump = root / "dump.parquet"
    try:
        seconds = write_dump(dump, n, fleet)
        size = os.path.getsize(dump) / 2**20
        print(f"generated {n:,} records ({size:.0f} MiB Parquet) in {seconds:.1f} s")

        batches = record_batches(dump)
        fold_s = plain_fold(batches)
        print(f"plain fold, 1 process:            {fold_s:8.1f} s  {n / fold_s:12,.0f} records/s")
        audit_s = plain_audit(batches)
        print(f"plain fold + tables, 1 process:   {audit_s:8.1f} s  {n / audit_s:12,.0f} records/s")
        del batches

        t0 = time.perf_counter()
        spark = start_session(SessionOptions(master=args.master))
        start_s = time.perf_counter() - t0
        print(f"Spark session start ({args.master}):  {start_s:8.1f} s")
        config = AuditConfig(FileInput(dump), root / "audit", HB_MS,
                             session=SessionOptions(master=args.master))  # fmt: skip
        t0 = time.perf_counter()
        result = run(config, Progress(print, interval_s=30), spark=spark)
        spark_s = time.perf_counter() - t0
        spark.stop()
        assert sum(result.verdicts.values()) == n
        print(f"Spark audit ({args.master}), end to end: {spark_s:8.1f} s  "
              f"{n / spark_s:12,.0f} records/s (+ {start_s:.1f} s start-up)")  # fmt: skip
        print(f"ratio Spark / plain fold:          {spark_s / fold_s:8.2f}x the wall time")
        print(f"ratio Spark / plain fold + tables: {spark_s / audit_s:8.2f}x the wall time")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
