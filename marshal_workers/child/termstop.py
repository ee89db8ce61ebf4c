"""The member's SIGTERM, once the child's chain runs: stop at the next record boundary.

The member TERMs a child a kill grace before the claim's lease ends, and KILLs it a third of
the grace before (`core.keeping.Keeping.end_child_in_time`). A child that ended at the TERM
took the record in its handler call with it (in AMO: reserved, maybe handled, so lost), and in
AMO what it had been granted beyond it was lost too, though the lease often runs again: the
heartbeat's verdict was only late, and the member starts another child under the same lease
(an AMO chaos test in CI lost 974..1024 that way, with the log showing no lease end).

So once the chain runs, the member's TERM (it sets ``term_asked`` in the shared cells first)
asks the child to stop, and the child ends at the next record boundary: before a handler call,
before a run is handed on, or while it waits for a grant or a fetch. It writes there in the
shared cells (``stopped_at``: it started no record at or after it) and ends by the signal as
before, so the member reads the same exit. The member's KILL still ends a call that outlives
the grace. Before the chain runs (setup, the consumer's open) the TERM ends the child at once,
as before: nothing is started there.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import NoReturn

from marshal_workers.childlink.callstate import CallCells

Words = Callable[..., None]


class TermStop:
    """The TERM asked for, and the stop at a boundary."""

    __slots__ = ("armed", "asked", "cells", "last_words")

    def __init__(self, cells: CallCells, last_words: Words | None = None) -> None:
        self.cells = cells
        self.last_words = last_words  # a line written at once (`child.main.BeforeImport`)
        self.armed = False  # the chain runs: a TERM waits for a boundary
        self.asked = [False]  # a list: the hot path reads ``asked[0]`` per record

    def request(self) -> bool:
        """The TERM came: whether it waits for a boundary (else it ends the child now). Only
        the member's does, which it says in the cells first; another (an operator's, one the
        handler sent itself) ends the child at once, inside the call, as it always did."""
        if not self.armed or not self.cells.term_asked.value:
            return False
        self.asked[0] = True
        return True

    def here(self) -> None:
        """At a boundary where the shared position is the next record to start: stop if asked."""
        if self.asked[0]:
            self.stop_at(int(self.cells.position.value))

    def mark_here(self) -> None:
        """The child ends at a boundary where the shared position is the next record to start
        (its records' source ended: the Kafka exit): it says so, as at a TERM's stop."""
        self.cells.stopped_at.value = int(self.cells.position.value)

    def stop_at(self, offset: int) -> NoReturn:
        """End the child by the TERM it was sent, having started nothing at or after
        ``offset``."""
        cells = self.cells
        cells.stopped_at.value = offset
        cells.position.value = offset
        cells.in_call.value = 0
        if self.last_words is not None:
            self.last_words("child_terminated", signal="SIGTERM", stopped_at=offset)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)
        os._exit(128 + signal.SIGTERM)  # pragma: no cover (the signal ends it first)
