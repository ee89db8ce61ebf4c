"""AMO, the reserving step without a broker: records granted before the child started
(`ChildSpec.granted_until`: what the child before it, stopped at a record boundary as its lease
was ending, had been granted and never started) are handled without asking, in runs that end
there; a stop hands them on first; and a slice's child that read past them ends at their end,
where its member's position is (a review: it ended at its own last record, and the member
reported the other slices' records between lost)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from types import SimpleNamespace

from marshal_workers.child.reporting import Reporter
from marshal_workers.child.reserving import Reserving
from marshal_workers.ipc.messages import ChildSpec
from marshal_workers.protocol.modes import Mode
from tests.unit.child.test_reserving_source_end import Handling, Lease, Log, Rec, Supervisor


class Reach:
    end: int | None = None


class SliceSource:
    """Fetches of a slice's own records; ``read``: how far each fetch read (the others')."""

    messages = False

    def __init__(self, batches: list[tuple[list[int], int | None]]) -> None:
        self.batches = deque(batches)
        self.reach = Reach()

    def fetch(self, wait: bool = True) -> Sequence[Rec]:
        if not self.batches:
            return []
        offsets, read = self.batches.popleft()
        self.reach.end = read
        return [Rec(o) for o in offsets]


def carrying(source: SliceSource, pipe: Supervisor, until: int, start: int = 0) -> tuple[
    Reserving, Handling, Reporter, SimpleNamespace
]:  # fmt: skip
    spec = ChildSpec(
        "h:handle", Mode.AMO, "b:1", "g", "c", "c-1", "t", 0, start, 1, batch_size=4,
        amo_window=8,
    )  # fmt: skip
    cells = SimpleNamespace(position=SimpleNamespace(value=-1))
    reporter = Reporter(Mode.AMO, cells, pipe, start)  # type: ignore[arg-type]
    handling = Handling()
    handling.plugin = SimpleNamespace(handle_batch=None)  # type: ignore[attr-defined]
    step = Reserving(
        replace(spec, granted_until=until), Log(), source, pipe, Lease(), handling, reporter,  # type: ignore[arg-type]
    )  # fmt: skip
    return step, handling, reporter, cells


def test_records_granted_before_it_started_are_handled_unasked_in_runs_that_end_there() -> None:
    """3..8 granted before it started: handled, nothing asked for them, no run across 8; the
    first request starts at 8."""
    pipe = Supervisor()
    source = SliceSource([(list(range(3, 12)), None)])
    step, handling, _, _ = carrying(source, pipe, until=8, start=3)
    for _ in range(20):
        step.turn()
        if pipe.asked:
            break
    assert pipe.asked and pipe.asked[0].start == 8
    assert all(r.end <= 8 or r.start >= 8 for r in pipe.asked)
    assert handling.handled[: 8 - 3] == list(range(3, 8))


def test_a_stop_hands_on_what_was_granted_before_it_started_then_asks_nothing() -> None:
    """Stopped at once: 3..8 handled all the same (a graceful stop loses nothing), nothing
    asked, and the child may end at 8."""
    pipe = Supervisor()
    pipe.stop_requested = True
    step, handling, reporter, cells = carrying(
        SliceSource([(list(range(3, 12)), None)]), pipe, 8, 3
    )
    for _ in range(20):
        if not step.pending:
            break
        step.turn()
    assert not step.pending
    assert handling.handled == list(range(3, 8))
    assert pipe.asked == []
    assert (reporter.next_offset, cells.position.value) == (8, 8)


def test_a_slice_that_read_past_the_grant_ends_at_its_end_not_at_its_own_last_record() -> None:
    """A slice's records 0 and 3 of a grant that ends at 10; its reader read to 12 (the other
    slices' records): stopped, it says 10, where its member's position is."""
    pipe = Supervisor()
    pipe.stop_requested = True
    step, handling, reporter, cells = carrying(SliceSource([([0, 3], 12)]), pipe, until=10)
    for _ in range(20):
        if not step.pending:
            break
        step.turn()
    assert not step.pending
    assert handling.handled == [0, 3]
    assert (reporter.next_offset, cells.position.value) == (10, 10)
