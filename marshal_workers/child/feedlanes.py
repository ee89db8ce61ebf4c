"""Which of a partition's records go to which of the host's slice children (pure: no I/O).

The host's reader of a data partition (`child.reader`) reads the partition once and hands each
child (a *lane*) the records of its slice at or after that child's own next offset, in offset
order, each once. A lane's ``next`` only grows, so a record the reader reads twice (after it
went back for a child that attached below where it was) is never handed to a lane twice, and a
lane never gets another slice's record.

A lane is *live* (it gets the records as they are read) or *behind*: `Recent` keeps the
records the reader read last, and a behind lane is served from them (`serve`), as fast as its
child takes them, while the reader reads on for the others. A child that attaches below where
the reader is, within what is kept, starts behind (`join`); a live lane whose child stops
taking records for a while (its unsent records pass a limit) is put behind (`fall_behind`)
and gets nothing more until it has taken them. `Recent` never drops a record a behind lane
still needs (its *pin*); when it is full of them the reader waits (`Recent.full`). So a child
that attaches late or falls behind costs no read from the broker and holds nobody back until
the kept records run out; only a child whose start is below what is kept makes the reader go
back (`seek`), and the lanes already past skip what they had.
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
    live: bool = True  # gets records as they are read; else served from `Recent`


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
        ``reading`` next: below it, within what ``recent`` kept, the lane starts behind. The
        lane, and where the reader must read from now (None: read on; else it goes there and
        restarts ``recent``)."""
        lane = self.attach(part, start)
        if reading is not None and start < reading and recent.since(start) is not None:
            lane.live = False
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
        from after an attach, or after a lane fell out of what is kept; None: read on.

        A live lane below ``reading`` needs the reader to go back: then every lane is live
        again, and the reader reads from the lowest next offset. With every lane live and
        beyond ``reading`` it skips forward to the lowest; with a lane behind it reads on
        (skipping forward would drop what that lane is served from)."""
        lanes = self.all()
        live = [lane.next for lane in lanes if lane.live]
        if not live:
            return None
        low = min(live)
        if reading is None or low < reading:
            for lane in lanes:
                lane.live = True
            low = min(lane.next for lane in lanes)
            return None if low == reading else low
        if low > reading and len(live) == len(lanes):
            return low
        return None

    def read(self, rows: list[Row], reading: int) -> None:
        """The reader read ``rows`` (in offset order, maybe none) and reads ``reading`` next:
        each live lane gets its slice's records, and its next offset is then at least
        ``reading`` (every record below it was looked at for it). A behind lane is left as
        it was."""
        self.route(rows)
        for lanes in self.by_index.values():
            for lane in lanes:
                if lane.live and lane.next < reading:
                    lane.next = reading

    @staticmethod
    def fall_behind(lane: Lane) -> None:
        """``lane``'s child is not taking its records: it gets nothing more as records are
        read, and is served from what is kept once it has taken what it has."""
        lane.live = False

    def serve(self, lane: Lane, recent: Recent, reading: int, limit: int) -> bool:
        """A behind ``lane`` gets up to ``limit`` of its records from what ``recent`` kept,
        from its next offset on; once it has every one below ``reading`` it is live again.
        False if ``recent`` no longer has them (the lane is live again, below ``reading``: the
        reader must go back, `seek`)."""
        kept = recent.since(lane.next)
        if kept is None:
            lane.live = True
            return False
        if self.catch_up(lane, kept, reading, limit):
            lane.live = True
        return True

    def pin(self) -> int | None:
        """The lowest next offset of a behind lane: `Recent` must keep every record from it."""
        return min((lane.next for lane in self.all() if not lane.live), default=None)

    def catch_up(self, lane: Lane, rows: list[Row], reading: int, limit: int) -> bool:
        """``lane`` gets its slice's records of ``rows`` (every record the reader read from the
        lane's next offset up to ``reading``), at most ``limit`` of them. True if it got all of
        them (its next offset is then ``reading``, as a live lane's); else its next offset is
        after the last it got."""
        index, count = lane.part.index, self.count
        keyed = self.ordering is Ordering.KEY
        crc32 = zlib.crc32
        taken = 0
        for row in rows:
            offset, key = row[0], row[1]
            if offset < lane.next:
                continue
            if (crc32(key) if keyed and key is not None else offset) % count == index:
                if taken == limit:
                    return False
                lane.rows.append(row)
                lane.next = offset + 1
                taken += 1
        if lane.next < reading:
            lane.next = reading
        return True

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
                if lane.live and offset >= lane.next:
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

    @property
    def full(self) -> bool:
        """Over budget with nothing it may drop (every record is pinned): read no more."""
        return self.size > self.budget

    def add(self, rows: list[Row], reading: int, pin: int | None = None) -> None:
        """Keep ``rows`` (read in order up to ``reading``), dropping the oldest over budget,
        but none at or after ``pin`` (a behind lane's next offset)."""
        if self.low is None:
            self.low = rows[0][0] if rows else reading
        kept = self.rows
        for row in rows:
            kept.append(row)
            self.size += _size(row)
        self.trim(pin)

    def trim(self, pin: int | None) -> None:
        """Drop the oldest records over budget, none at or after ``pin``: when what pinned them
        moved on (a behind lane served, or gone), the reader calls it before it reads again."""
        kept = self.rows
        first = self.first
        while self.size > self.budget and first < len(kept):
            dropped = kept[first]
            if pin is not None and dropped[0] >= pin:
                break
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
