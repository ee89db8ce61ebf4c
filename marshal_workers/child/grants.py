"""AMO, in the child: the batches asked for and not yet handled, and the answers on them.

A child asks for a batch before it handles the batch before it (`AHEAD` batches ahead), so the
coordination log's round trip for one batch overlaps the handling of another. The supervisor
answers each request once the log has decided it; answers are taken in request order, and an
answer read while the child waits for something else (another answer, `Stop`, a retry's wait)
is kept here until its batch comes up. Pure bookkeeping: the child loop (`childloop`) sends,
receives and handles.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from marshal_workers.ipc.messages import Grant, GrantRequest

if TYPE_CHECKING:
    from marshal_workers.handler import Record

AHEAD = 1  # reservations asked for beyond the one handled or awaited
RESERVE_TARGET_S = 0.5  # a reservation covers about this much of the child's own handling
RESERVE_MAX_BYTES = 4 << 20  # and holds about this much memory at most (its records are held)
RECORD_OVERHEAD_BYTES = 256  # a held record's memory beside key and value (~250-350 measured)


def reservation_size(batch_size: int, amo_window: int) -> int:
    """The most records one reservation covers: the window holds the reservation in hand and
    the ones asked ahead (``AHEAD + 1``), so a crash loses at most ``amo_window`` records;
    never less than one batch."""
    return max(batch_size, amo_window // (AHEAD + 1))


class ReservationSizer:
    """How many records the child's next reservation covers.

    At most `reservation_size` (so that a crash loses at most ``amo_window`` records); no more
    than the child handles in about ``target_s`` at its recent time per record (so that a slow
    handler's crash loses about a second of work, or two batches where a batch takes longer,
    not a window of minutes); no more than about ``max_bytes`` of held records (the child holds
    a reservation's records until it handles them); never less than a batch. Until a run has
    been handled a reservation is one batch. Where handling is fast, one log record thus
    reserves as much as the window allows (the log's round trip is paid once per ``target_s``
    of handling, not once per batch); where it is slow, little.

    The time per record is smoothed, not the rate: each run weighs half, so one slow run shrinks
    the next reservation at once (its cost at least halves the estimate's reach), while one fast
    run after slow ones only halves the estimate (a rate smoothed instead would let one run of
    skipped records size the next reservation for minutes of slow ones). Pure: the child loop
    times its runs and reports them here."""

    def __init__(
        self,
        batch_size: int,
        amo_window: int,
        target_s: float = RESERVE_TARGET_S,
        max_bytes: int = RESERVE_MAX_BYTES,
    ) -> None:
        self.least = batch_size
        self.most = reservation_size(batch_size, amo_window)
        self.target_s = target_s
        self.max_bytes = max_bytes
        self.cost: float | None = None  # seconds per record of the runs handled, smoothed
        self.by_time = batch_size  # the size the time per record allows (the window included)

    def handled(self, records: int, seconds: float) -> None:
        """A granted run of ``records`` took ``seconds`` to handle: size the next reservation
        from the smoothed time per record."""
        if records <= 0:
            return
        cost = max(seconds, 0.0) / records
        self.cost = cost if self.cost is None else (self.cost + cost) / 2
        reach = self.target_s / self.cost if self.cost > 0 else float(self.most)
        self.by_time = self.most if reach >= self.most else max(self.least, int(reach))

    def size(self, record_bytes: float) -> int:
        """The next reservation's most records, for records of about ``record_bytes`` of key
        and value each."""
        by_memory = int(self.max_bytes // (record_bytes + RECORD_OVERHEAD_BYTES))
        return max(self.least, min(self.by_time, by_memory))


class Asked:
    """The batches a child asked for, oldest first, and the answers read early."""

    def __init__(self, ahead: int = AHEAD) -> None:
        self.ahead = ahead
        self.batches: deque[tuple[GrantRequest, Sequence[Record]]] = deque()
        self.answers: dict[int, Grant] = {}
        self._last_id = 0

    def ask(self, records: Sequence[Record]) -> GrantRequest:
        """The request for ``records`` (to send), remembered until its batch is taken."""
        self._last_id += 1
        request = GrantRequest(self._last_id, records[0].offset, records[-1].offset + 1)
        self.batches.append((request, records))
        return request

    def may_ask(self) -> bool:
        """Whether to ask for another batch now: fewer than ``ahead`` beyond the next one, and
        no refusal read (the child ends at a refusal: asking after it is pointless)."""
        return len(self.batches) <= self.ahead and all(a.granted for a in self.answers.values())

    def full(self) -> bool:
        """Whether as many batches are asked for as may be."""
        return len(self.batches) > self.ahead

    def take(self) -> tuple[GrantRequest, Sequence[Record]]:
        """The oldest batch asked for (its answer is awaited next)."""
        return self.batches.popleft()

    def keep(self, grant: Grant) -> bool:
        """Keep an answer on a batch asked for that is not awaited yet; False if it answers
        nothing asked for."""
        if any(request.request_id == grant.request_id for request, _ in self.batches):
            self.answers[grant.request_id] = grant
            return True
        return False

    def answer(self, request: GrantRequest) -> Grant | None:
        """The answer on ``request`` if it was read early."""
        return self.answers.pop(request.request_id, None)


def record_bytes(records: Sequence[Record]) -> float:
    """About how many bytes of key and value a record of ``records`` has: the mean of the first
    and the last (two samples a run, not a pass over every record; headers are not counted)."""
    ends = (records[0], records[-1]) if records else ()
    return sum(len(r.key or b"") + len(r.value or b"") for r in ends) / 2
