"""One rationalizer: each coordination partition folded in offset order by `rationalizer.fold`.

The audit never re-states a rule. Spark only distributes: it hash-partitions the records by
coordination partition, sorts each of its partitions by (coordination partition, offset), and
hands the sorted records to `fold_batches` (through ``mapInArrow``), which runs the very fold
the supervisors run, one `World` per coordination partition, and feeds each event to
`tables.Tables`. Because the input is sorted, a coordination partition's records arrive
contiguous and in order, so the function streams: it holds one world at a time and hands
rows on in batches, never a whole partition's events.

Each group is judged with its own heartbeat interval (`heartbeats`): when the log's groups
record several, each coordination partition is folded once per interval, in step, and each
record takes the verdict of the world folded with its group's interval at that record. A log
whose groups share one interval (the usual case) is folded once.

`fold_records` is the same thing without Spark, for tests and the single-process baseline.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from marshal_workers.audit import arrow
from marshal_workers.audit.heartbeats import Heartbeats
from marshal_workers.audit.tables import Row, Tables, Window
from marshal_workers.protocol import events as ev
from marshal_workers.protocol import recordfailures as rf
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.wire import CoordRecord


@dataclass(frozen=True, slots=True)
class FoldSettings:
    """How to fold (what the workers use) and what to report."""

    config: RationalizerConfig
    window: Window = field(default_factory=Window)
    batch_rows: int = 16_384
    heartbeats: Heartbeats | None = None  # each group's interval; None: config's for all


class OrderError(RuntimeError):
    """The records did not come sorted by (coordination partition, offset)."""


def _group_of(event: ev.Event) -> str | None:
    """The group a record's event is about (None: malformed or the topic record)."""
    if isinstance(event, ev.Verdict | rf.PoisonVerdict):
        return event.message.group_id
    if isinstance(event, ev.GroupSettingsRecorded):
        return event.group
    return None


class Worlds:
    """One coordination partition folded with every heartbeat interval a group there uses."""

    def __init__(self, settings: FoldSettings, partition: int) -> None:
        config, self.heartbeats = settings.config, settings.heartbeats
        intervals: tuple[int, ...] = (config.heartbeat_interval_ms,)
        if self.heartbeats is not None:
            intervals = self.heartbeats.intervals()
        self.worlds = {
            ms: World(dataclasses.replace(config, heartbeat_interval_ms=ms), partition)
            for ms in intervals
        }
        self.first = next(iter(self.worlds.values()))
        self.partition = partition
        self.single = len(self.worlds) == 1

    def fold(self, record: CoordRecord, tables: Tables) -> None:
        """Fold the next record into every world; ``tables`` takes the verdict its group's."""
        if self.single:
            tables.add(fold(self.first, record))
            return
        tables.hb, event = self.verdict(record)
        tables.add(event)

    def verdict(self, record: CoordRecord) -> tuple[int, ev.Event]:
        """Fold the next record into every world: the interval its group's verdict is judged
        with, and that verdict."""
        if self.single:
            return self.first.config.heartbeat_interval_ms, fold(self.first, record)
        events = {ms: fold(world, record) for ms, world in self.worlds.items()}
        assert self.heartbeats is not None
        hb = self.heartbeats.at(_group_of(events[self.first.config.heartbeat_interval_ms]),
                                self.first.group_settings)  # fmt: skip
        return hb, events[hb]


class _Folder:
    """Folds consecutive coordination partitions, one world and one `Tables` at a time."""

    def __init__(self, settings: FoldSettings) -> None:
        self.settings = settings
        self.worlds: Worlds | None = None
        self.tables: Tables | None = None
        self.done: set[int] = set()

    def start(self, partition: int) -> tuple[Worlds, Tables]:
        if partition in self.done:
            raise OrderError(f"coordination partition {partition} came back after it ended")
        s = self.settings
        self.worlds = Worlds(s, partition)
        self.tables = Tables(partition, s.config.heartbeat_interval_ms, s.window)
        return self.worlds, self.tables

    def end(self) -> None:
        if self.worlds is not None and self.tables is not None:
            self.tables.finish()
            self.done.add(self.worlds.partition)


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
            world.fold(record, tables)
        folder.end()
        for name, rows in tables.take().items():
            out.setdefault(name, []).extend(rows)
    return out


def fold_batches(batches: Iterable[Any], settings: FoldSettings) -> Iterator[Any]:
    """Arrow batches of records sorted by (partition, offset) -> packed table batches."""
    folder = _Folder(settings)
    world: Worlds | None = None
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
            world.fold(record, tables)
        if tables is not None and tables.pending() >= limit:
            yield arrow.packed_batch(tables.take())
    folder.end()
    if tables is not None and tables.pending():
        yield arrow.packed_batch(tables.take())
