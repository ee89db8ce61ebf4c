"""Which of a partition's records go to which of the host's slice children (pure: no I/O).

The host's reader of a data partition (`child.reader`) reads the partition once, from the
lowest start any attached child asked for, and hands each child (a *lane*) the records of its
slice at or after that child's own next offset, in offset order, each once. A lane's ``next``
only grows, so a record the reader reads twice (after it went back for a child that attached
below where it was) is never handed to a lane twice, and a lane never gets another slice's
record. `Lanes.seek` says where the reader must read from once a lane attached.

`Recent` keeps the records the reader read last (a bounded number of bytes): a child that
attaches below where the reader is, within them, gets its records from there (`catch_up`)
instead of making the reader go back for everyone (a fleet's children start at about the same
position, a moment apart: each going back re-read the partition's start for all of them, and
held the others up while it did).
"""

from __future__ import annotations

import zlib
from bisect import bisect_left
from dataclasses import dataclass, field

from marshal_workers.ipc.feedwire import Row
from marshal_workers.protocol.slicing import Ordering, Slice


@dataclass(slots=True)
class Lane:
    """One attached child: its slice, the offset it gets next, what is ready to send."""

    part: Slice
    next: int
    rows: list[Row] = field(default_factory=list)


class Lanes:
    """The lanes of one reader, by slice index; the cut is the first lane's (all the same)."""

    def __init__(self) -> None:
        self.by_index: dict[int, list[Lane]] = {}
        self.ordering: Ordering | None = None
        self.count = 0

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_index.values())

    def fits(self, part: Slice) -> bool:
        """Whether ``part`` is cut as the lanes attached so far are (or none is attached)."""
        return not self.by_index or (part.ordering, part.count) == (self.ordering, self.count)

    def attach(self, part: Slice, start: int) -> Lane:
        """A lane for a child of ``part`` from ``start`` (`fits` first)."""
        assert self.fits(part), "a lane cut another way than the others"
        self.ordering, self.count = part.ordering, part.count
        lane = Lane(part, start)
        self.by_index.setdefault(part.index, []).append(lane)
        return lane

    def join(
        self, part: Slice, start: int, reading: int | None, recent: Recent
    ) -> tuple[Lane, int | None]:
        """Attach a lane for ``part`` from ``start`` (`fits` first) to a reader that reads
        ``reading`` next: below it, the lane gets what ``recent`` kept from ``start`` on if that
        covers it. The lane, and where the reader must read from now (None: read on; else it
        goes there and restarts ``recent``)."""
        lane = self.attach(part, start)
        if reading is not None and start < reading:
            kept = recent.since(start)
            if kept is not None:
                self.catch_up(lane, kept, reading)
        return lane, self.seek(reading)

    def detach(self, lane: Lane) -> None:
        """Forget ``lane`` (its child is gone)."""
        lanes = self.by_index.get(lane.part.index, [])
        if lane in lanes:
            lanes.remove(lane)
            if not lanes:
                del self.by_index[lane.part.index]

    def lowest_next(self) -> int | None:
        """The lowest offset any lane gets next (where the reader must read from)."""
        return min((lane.next for v in self.by_index.values() for lane in v), default=None)

    def seek(self, reading: int | None) -> int | None:
        """Where the reader, about to read ``reading`` next (None: not reading yet), must read
        from after an attach: the lowest next offset of the lanes, if that is not ``reading``
        (behind it: a new lane starts lower; ahead: every lane starts beyond it). None: read on.
        """
        low = self.lowest_next()
        return None if low is None or low == reading else low

    def read(self, rows: list[Row], reading: int) -> None:
        """The reader read ``rows`` (in offset order, maybe none) and reads ``reading`` next:
        each lane gets its slice's records, and every lane's next offset is at least
        ``reading`` (every record below it was looked at for it)."""
        self.route(rows)
        for lanes in self.by_index.values():
            for lane in lanes:
                if lane.next < reading:
                    lane.next = reading

    def catch_up(self, lane: Lane, rows: list[Row], reading: int) -> None:
        """``lane`` (attached below ``reading``) gets its slice's records of ``rows``, every
        record the reader read from the lane's next offset up to ``reading``; its next offset
        is then ``reading``, as every other lane's."""
        index, count = lane.part.index, self.count
        keyed = self.ordering is Ordering.KEY
        crc32 = zlib.crc32
        for row in rows:
            offset, key = row[0], row[1]
            if offset < lane.next:
                continue
            if (crc32(key) if keyed and key is not None else offset) % count == index:
                lane.rows.append(row)
                lane.next = offset + 1
        if lane.next < reading:
            lane.next = reading

    def route(self, rows: list[Row]) -> None:
        """Add each of ``rows`` (in offset order) to the lanes of its slice that want it."""
        by_index, count = self.by_index, self.count
        if not by_index:
            return
        keyed = self.ordering is Ordering.KEY
        crc32 = zlib.crc32
        for row in rows:
            offset, key = row[0], row[1]
            index = (crc32(key) if keyed and key is not None else offset) % count
            lanes = by_index.get(index)
            if lanes is None:
                continue
            for lane in lanes:
                if offset >= lane.next:
                    lane.rows.append(row)
                    lane.next = offset + 1

    def all(self) -> list[Lane]:
        return [lane for v in self.by_index.values() for lane in v]


ROW_OVERHEAD = 200  # about what a row's tuple, ints and bytes objects cost beyond key and value


class Recent:
    """The records the reader read last: every record from ``low`` up to where it reads next,
    at most ``budget`` bytes of them (their keys and values, and `ROW_OVERHEAD` each)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.rows: list[Row] = []
        self.first = 0  # rows before it are dropped (compacted away now and then)
        self.size = 0
        self.low: int | None = None  # None: nothing known (before the first read)

    def restart(self, at: int) -> None:
        """The reader reads from ``at`` now: what was kept is not followed on from."""
        self.rows, self.first, self.size, self.low = [], 0, 0, at

    def add(self, rows: list[Row], reading: int) -> None:
        """Keep ``rows`` (read in order up to ``reading``), dropping the oldest over budget."""
        if self.low is None:
            self.low = rows[0][0] if rows else reading
        kept = self.rows
        for row in rows:
            kept.append(row)
            self.size += _size(row)
        first = self.first
        while self.size > self.budget and first < len(kept):
            dropped = kept[first]
            self.size -= _size(dropped)
            first += 1
            self.low = dropped[0] + 1
        if first > 4096 and first * 2 > len(kept):
            del kept[:first]
            first = 0
        self.first = first

    def since(self, offset: int) -> list[Row] | None:
        """Every kept record at or after ``offset``; None if ``offset`` is below what is kept
        whole (the reader must go back for it)."""
        if self.low is None or offset < self.low:
            return None
        at = bisect_left(self.rows, offset, lo=self.first, key=_offset)
        return self.rows[at:]


def _offset(row: Row) -> int:
    return row[0]


def _size(row: Row) -> int:
    key, value = row[1], row[2]
    return ROW_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
