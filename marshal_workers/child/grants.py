"""AMO, in the child: the runs asked for and not yet handled, and the answers on them.

A child asks for a run before it handles the run before it (up to `AHEAD` runs ahead, as the
reservation sizer allows: `protocol.reservations`), so the coordination log's round trip for
one run overlaps the handling of another. The supervisor answers each request once the log has
decided it; answers are taken in request order, and an answer read while the child waits for
something else (another answer, `Stop`, a retry's wait) is kept here until its run comes up.
Pure bookkeeping: the reserving step (`child.reserving`) sends, receives and hands on.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from marshal_workers.ipc.messages import Grant, GrantRequest
from marshal_workers.protocol.reservations import AHEAD

if TYPE_CHECKING:
    from marshal_workers.handler import Record


class Asked:
    """The runs a child asked for, oldest first, and the answers read early."""

    def __init__(self) -> None:
        self.batches: deque[tuple[GrantRequest, Sequence[Record]]] = deque()
        self.answers: dict[int, Grant] = {}
        self._last_id = 0

    def ask(self, records: Sequence[Record], *, granted: bool = False) -> GrantRequest:
        """The request for ``records`` (to send), remembered until its run is taken;
        ``granted``: the run was granted before this child started (`ChildSpec.granted_until`):
        answered here, not sent."""
        self._last_id += 1
        request = GrantRequest(self._last_id, records[0].offset, records[-1].offset + 1)
        self.batches.append((request, records))
        if granted:
            self.answers[request.request_id] = Grant(request.request_id, True, "")
        return request

    def may_ask(self, ahead: int = AHEAD) -> bool:
        """Whether to ask for another run now: no more than ``ahead`` beyond the next one, and
        no refusal read (the child ends at a refusal: asking after it is pointless)."""
        return len(self.batches) <= ahead and all(a.granted for a in self.answers.values())

    def take(self) -> tuple[GrantRequest, Sequence[Record]]:
        """The oldest run asked for (its answer is awaited next)."""
        return self.batches.popleft()

    def keep(self, grant: Grant) -> bool:
        """Keep an answer on a run asked for that is not awaited yet; False if it answers
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
