"""A host reader's lanes (`child.feedlanes`): which records of a partition go to which child."""

from __future__ import annotations

import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from marshal_workers.child.feedlanes import ROW_OVERHEAD, Lane, Lanes, Recent
from marshal_workers.ipc.feedwire import Row
from marshal_workers.protocol.slicing import Ordering, Slice

RECORDS = 120


def key_of(offset: int) -> bytes | None:
    return None if offset % 7 == 0 else f"k{offset % 11}".encode()


def row(offset: int) -> Row:
    return (offset, key_of(offset), b"v", 0, 0, None)


def slice_of(offset: int, ordering: Ordering, count: int) -> int:
    key = key_of(offset)
    if ordering is Ordering.KEY and key is not None:
        return zlib.crc32(key) % count
    return offset % count


def test_a_lane_gets_its_slice_from_its_start_and_its_next_says_how_far() -> None:
    """Key slices: a lane gets the records of its slice at or after its start, in order; after
    a read every lane's next is at least where the reader got."""
    lanes = Lanes()
    a = lanes.attach(Slice(Ordering.KEY, 4, 1), 10)
    assert lanes.seek(None) == 10
    lanes.read([row(o) for o in range(10, 40)], 40)
    expected = [o for o in range(10, 40) if slice_of(o, Ordering.KEY, 4) == 1]
    assert [r[0] for r in a.rows] == expected and expected
    assert a.next == 40


def test_a_lane_below_the_reader_makes_it_go_back_and_nobody_gets_a_record_twice() -> None:
    """A lane attached below where the reader is: the reader goes back to its start; the lane
    already ahead gets none of the records read again."""
    lanes = Lanes()
    ahead = lanes.attach(Slice(Ordering.UNORDERED, 2, 0), 50)
    lanes.read([row(o) for o in range(50, 60)], 60)
    ahead.rows.clear()
    behind = lanes.attach(Slice(Ordering.UNORDERED, 2, 1), 20)
    assert lanes.seek(60) == 20
    lanes.read([row(o) for o in range(20, 70)], 70)
    assert [r[0] for r in ahead.rows] == [60, 62, 64, 66, 68]
    assert [r[0] for r in behind.rows] == list(range(21, 70, 2))


def test_lanes_all_ahead_make_the_reader_skip_forward() -> None:
    """With every lane beyond where the reader is, it reads from the lowest start."""
    lanes = Lanes()
    lanes.attach(Slice(Ordering.UNORDERED, 2, 0), 80)
    assert lanes.seek(30) == 80
    assert lanes.seek(80) is None


def test_a_lane_cut_another_way_does_not_fit() -> None:
    """Every lane of a reader is cut the same way (a group's cut is one)."""
    lanes = Lanes()
    lanes.attach(Slice(Ordering.KEY, 4, 0), 0)
    assert lanes.fits(Slice(Ordering.KEY, 4, 3))
    assert not lanes.fits(Slice(Ordering.KEY, 8, 3))
    assert not lanes.fits(Slice(Ordering.UNORDERED, 4, 3))


def test_a_detached_lane_gets_nothing_more() -> None:
    """Detached (its child gone): no more records, and it no longer holds the reader back."""
    lanes = Lanes()
    gone = lanes.attach(Slice(Ordering.UNORDERED, 2, 0), 0)
    stays = lanes.attach(Slice(Ordering.UNORDERED, 2, 0), 30)
    lanes.detach(gone)
    assert lanes.lowest_next() == 30
    lanes.read([row(o) for o in range(30, 34)], 34)
    assert gone.rows == [] and [r[0] for r in stays.rows] == [30, 32]


# an operation on the reader: attach (slice index, start), detach (which), read (how many),
# behind (which lane falls behind), serve (which lane, how many records at most)
Op = tuple[str, int, int]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("attach"), st.integers(0, 3), st.integers(0, RECORDS)),
        st.tuples(st.just("detach"), st.integers(0, 20), st.just(0)),
        st.tuples(st.just("read"), st.integers(1, 40), st.just(0)),
        st.tuples(st.just("behind"), st.integers(0, 20), st.just(0)),
        st.tuples(st.just("serve"), st.integers(0, 20), st.integers(1, 6)),
    ),
    max_size=50,
)


class Model:
    """The reader's use of `Lanes` and `Recent`, as `child.reader.Reader` makes it, over a
    partition of `RECORDS` records less the ``compacted`` ones; each child takes what it gets."""

    def __init__(self, ordering: Ordering, kept: int, compacted: set[int]) -> None:
        self.ordering, self.compacted = ordering, compacted
        self.lanes = Lanes()
        self.recent = Recent(kept * (ROW_OVERHEAD + 4))  # keys of 2 or 3 bytes, values of 1
        self.attached: list[tuple[Lane, int]] = []
        self.got: dict[int, list[int]] = {}
        self.reading: int | None = None

    def go(self, target: int | None) -> None:
        if target is not None:
            self.reading = target
            self.recent.restart(target)

    def take(self) -> None:
        for lane, _ in self.attached:
            self.got[id(lane)].extend(r[0] for r in lane.rows)
            lane.rows.clear()

    def read(self, count: int) -> None:
        lanes, recent = self.lanes, self.recent
        if recent.full:  # as the reader does before it reads
            recent.trim(lanes.pin())
        if self.reading is None or recent.full:
            return
        end = min(RECORDS, self.reading + count)
        rows = [row(o) for o in range(self.reading, end) if o not in self.compacted]
        lanes.read(rows, end)
        recent.add(rows, end, lanes.pin())
        self.reading = end

    def serve(self, lane: Lane, limit: int) -> None:
        assert self.reading is not None
        if not lane.live and not self.lanes.serve(lane, self.recent, self.reading, limit):
            self.go(self.lanes.seek(self.reading))

    def step(self, op: str, a: int, b: int) -> None:
        lanes, attached = self.lanes, self.attached
        if op == "attach":
            lane, target = lanes.join(Slice(self.ordering, 4, a), b, self.reading, self.recent)
            attached.append((lane, b))
            self.got[id(lane)] = []
            self.go(target)
        elif op == "detach" and attached:
            lanes.detach(attached[a % len(attached)][0])
        elif op == "read":
            self.read(a)
        elif op == "behind" and attached and attached[a % len(attached)][0].live:
            lanes.fall_behind(attached[a % len(attached)][0])
        elif op == "serve" and attached and self.reading is not None:
            self.serve(attached[a % len(attached)][0], b)
        self.take()

    def to_the_end(self) -> None:
        """Every child takes all it is given: the reader reads to the end (it never waits for
        good on what is kept)."""
        for _ in range(4 * RECORDS):
            if self.reading is None or (self.reading >= RECORDS and not self.lanes.pin()):
                break
            for lane in self.lanes.all():
                self.serve(lane, 7)
            self.take()
            self.read(40)
            self.take()
        assert self.reading is None or not self.lanes.all() or self.reading == RECORDS


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from([Ordering.KEY, Ordering.UNORDERED]),
    ops,
    st.integers(0, 40),
    st.sets(st.integers(0, RECORDS), max_size=30),
)
def test_every_lane_gets_each_record_of_its_slice_below_its_next_once_in_order(
    ordering: Ordering, script: list[Op], kept: int, compacted: set[int]
) -> None:
    """Any sequence of attaches, detaches, reads (of a partition with gaps, as compaction
    leaves), lanes falling behind and being served from what is kept, the reader joining lanes,
    going where `join` and `serve` say, keeping ``kept`` records of what it read last and
    waiting while those are all pinned: each lane gets exactly the records of its slice from
    its start up to its next offset, once each and in offset order, never another slice's;
    and once every child takes what it gets, the reader reads to the end."""
    model = Model(ordering, kept, compacted)
    for op, a, b in script:
        model.step(op, a, b)
    model.to_the_end()
    for lane, start in model.attached:
        expected = [
            o
            for o in range(start, lane.next)
            if slice_of(o, ordering, 4) == lane.part.index and o not in compacted
        ]
        assert model.got[id(lane)] == expected


def test_a_lane_attached_within_what_was_read_last_is_served_from_it() -> None:
    """A child that attaches a little below the reader starts behind and is served what was
    kept, a limit at a time, and the reader does not go back; below what is kept, it goes
    back."""
    lanes = Lanes()
    recent = Recent(10 * (ROW_OVERHEAD + 4))
    _, target = lanes.join(Slice(Ordering.UNORDERED, 2, 0), 0, None, recent)
    assert target == 0
    recent.restart(0)
    rows = [row(o) for o in range(0, 30)]
    lanes.read(rows, 30)
    recent.add(rows, 30, lanes.pin())
    assert recent.low is not None and 19 <= recent.low <= 22  # about ten rows kept
    late, target = lanes.join(Slice(Ordering.UNORDERED, 2, 1), 25, 30, recent)
    assert target is None and not late.live and late.rows == []
    assert lanes.serve(late, recent, 30, limit=2) and not late.live
    assert [r[0] for r in late.rows] == [25, 27] and late.next == 28
    assert lanes.serve(late, recent, 30, limit=2) and late.live and late.next == 30
    early, target = lanes.join(Slice(Ordering.UNORDERED, 2, 1), 3, 30, recent)
    assert target == 3 and early.rows == [] and early.live and late.live


def test_what_a_behind_lane_needs_is_kept_and_the_reader_waits_when_that_is_all() -> None:
    """A lane that fell behind pins what is kept from its next offset: nothing it needs is
    dropped, and once the budget holds only such records the reader must wait; served level
    again, it unpins them."""
    lanes = Lanes()
    recent = Recent(5 * (ROW_OVERHEAD + 4))
    slow, _ = lanes.join(Slice(Ordering.UNORDERED, 2, 0), 0, None, recent)
    recent.restart(0)
    lanes.fall_behind(slow)
    rows = [row(o) for o in range(0, 10)]
    lanes.read(rows, 10)
    recent.add(rows, 10, lanes.pin())
    assert recent.full and recent.low == 0 and slow.next == 0
    assert lanes.serve(slow, recent, 10, limit=100) and slow.live and slow.next == 10
    recent.trim(lanes.pin())  # (the reader trims before it reads again)
    assert not recent.full
