"""The child's view of its lease: the shared deadline read against the lease clock.

The supervisor writes the deadline into shared memory on the lease clock
(`common.leaseclock`: CLOCK_BOOTTIME on Linux, which counts a suspend), so every reading the
child compares with it, and every handler-call start or deadline the child publishes, comes
from that clock too: `LeaseCheck.clock`, injected in tests. The hot path reads ``clock`` and
``cell`` itself (one call and one load per record); everything else asks `require`, `valid` or
`remaining`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from marshal_workers.child.fencing import REASON_LEASE_EXPIRED
from marshal_workers.child.termstop import TermStop
from marshal_workers.childlink.sharedlease import SharedLease
from marshal_workers.common import leaseclock
from marshal_workers.ipc.exits import EXIT_LEASE_EXPIRED, ChildExit

Clock = Callable[[], float]


class LeaseCheck:
    """The claim's lease as the child checks it (``clock``: the lease clock)."""

    __slots__ = ("cell", "clock", "lease", "log", "term")

    def __init__(self, lease: SharedLease, log: Any, clock: Clock = leaseclock.now) -> None:
        self.lease = lease
        self.log = log
        self.clock = clock
        self.cell = lease.cell  # the shared deadline: ``cell.value`` (0: revoked)
        self.term = TermStop(lease.calls)  # the member's TERM: a stop at the next boundary

    @property
    def deadline(self) -> float:
        """The lease-clock time at which the lease ends (0: no lease)."""
        return float(self.cell.value)

    def remaining(self) -> float:
        """Seconds left (negative once expired)."""
        return self.deadline - self.clock()

    def valid(self) -> bool:
        """Whether the child may still process."""
        return self.clock() < self.deadline

    def require(self, stop_at: int | None = None) -> None:
        """End the child (`EXIT_LEASE_EXPIRED`) unless the lease still runs; ``stop_at``: at a
        record boundary, where it stops (it started nothing at or after it: the shared
        ``stopped_at``, as at the member's TERM, `child.termstop`)."""
        if self.valid():
            return
        if stop_at is not None:
            self.term.cells.stopped_at.value = stop_at
        self.log.warning("lease_expired", deadline=self.deadline)
        raise ChildExit(EXIT_LEASE_EXPIRED, REASON_LEASE_EXPIRED)

    def require_here(self) -> None:
        """`require` at a boundary where the shared position is the next record to start."""
        self.require(int(self.term.cells.position.value))
