"""One rationalizer: each coordination partition folded in offset order by `rationalizer.fold`.

The audit never re-states a rule. Spark only distributes: it hash-partitions the records by
coordination partition, sorts each of its partitions by (coordination partition, offset), and
hands the sorted records to `fold_batches` (through ``mapInArrow``), which runs the very fold
the supervisors run, one `World` per coordination partition, and feeds each event to
`tables.Tables`. Because the input is sorted, a coordination partition's records arrive
contiguous and in order, so the function streams: it holds one world at a time and hands
rows on in batches, never a whole partition's events.

`fold_records` is the same thing without Spark, for tests and the single-process baseline.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from marshal_workers.audit import arrow
from marshal_workers.audit.tables import Row, Tables, Window
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.wire import CoordRecord


@dataclass(frozen=True, slots=True)
class FoldSettings:
    """How to fold (what the workers use) and what to report."""

    config: RationalizerConfig
    window: Window = field(default_factory=Window)
    batch_rows: int = 16_384


class OrderError(RuntimeError):
    """The records did not come sorted by (coordination partition, offset)."""


class _Folder:
    """Folds consecutive coordination partitions, one world and one `Tables` at a time."""

    def __init__(self, settings: FoldSettings) -> None:
        self.settings = settings
        self.world: World | None = None
        self.tables: Tables | None = None
        self.done: set[int] = set()

    def start(self, partition: int) -> tuple[World, Tables]:
        if partition in self.done:
            raise OrderError(f"coordination partition {partition} came back after it ended")
        s = self.settings
        self.world = World(s.config, partition)
        self.tables = Tables(partition, s.config.heartbeat_interval_ms, s.window)
        return self.world, self.tables

    def end(self) -> None:
        if self.world is not None and self.tables is not None:
            self.tables.finish()
            self.done.add(self.world.partition)


def fold_records(records: Iterable[CoordRecord], settings: FoldSettings) -> dict[str, list[Row]]:
    """Fold records of any partitions (each in offset order) and build every table."""
    by_partition: dict[int, list[CoordRecord]] = {}
    for r in records:
        by_partition.setdefault(r.partition, []).append(r)
    out: dict[str, list[Row]] = {}
    for partition in sorted(by_partition):
        folder = _Folder(settings)
        world, tables = folder.start(partition)
        for record in sorted(by_partition[partition], key=lambda r: r.offset):
            tables.add(fold(world, record))
        folder.end()
        for name, rows in tables.take().items():
            out.setdefault(name, []).extend(rows)
    return out


def fold_batches(batches: Iterable[Any], settings: FoldSettings) -> Iterator[Any]:
    """Arrow batches of records sorted by (partition, offset) -> packed table batches."""
    folder = _Folder(settings)
    world: World | None = None
    tables: Tables | None = None
    current = -1
    limit = settings.batch_rows
    for batch in batches:
        for record in arrow.records_of(batch):
            if record.partition != current:
                folder.end()
                if tables is not None and tables.pending():
                    yield arrow.packed_batch(tables.take())
                world, tables = folder.start(record.partition)
                current = record.partition
            assert world is not None and tables is not None
            tables.add(fold(world, record))
        if tables is not None and tables.pending() >= limit:
            yield arrow.packed_batch(tables.take())
    folder.end()
    if tables is not None and tables.pending():
        yield arrow.packed_batch(tables.take())
