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


def reservation_size(batch_size: int, amo_window: int) -> int:
    """The most records one reservation covers: the window holds the reservation in hand and
    the ones asked ahead (``AHEAD + 1``), so a crash loses at most ``amo_window`` records;
    never less than one batch."""
    return max(batch_size, amo_window // (AHEAD + 1))


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
