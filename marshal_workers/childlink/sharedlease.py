"""The lease a child may process under, shared between supervisor and child in shared memory.

The supervisor writes the deadline (seconds on the lease clock, `common.leaseclock`:
CLOCK_BOOTTIME on Linux, which counts a suspend and which every process on the host shares)
each time a heartbeat of the claim is folded as valid; the child reads it before every
batch and every handler call, and a watchdog thread in the child ends the process at the
deadline even if the supervisor is frozen. docs/design.md gives the argument:

    a rival can claim only at log time > last valid heartbeat + 2*HB, so a holder that sent a
    heartbeat at lease-clock time s (and saw it folded valid) is safe until s + 2*HB - margin.

A deadline of 0 means "no lease": stop now. Writes are single 8-byte stores of aligned doubles,
so a reader never sees a torn value.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from marshal_workers.childlink.callstate import CallCells
from marshal_workers.common import leaseclock
from marshal_workers.protocol.leases import default_margin, lease_deadline

if TYPE_CHECKING:  # the fork server's module guards the server at import: not here
    from marshal_workers.childlink.forkserver import ChildContext

__all__ = ["SharedLease", "default_margin", "lease_deadline"]

Clock = Callable[[], float]


class SharedLease:
    """One claim's lease deadline in shared memory (created by the supervisor, passed to the
    child at spawn), with the claim's `CallCells` beside it (``calls``: the handled position,
    the handler call in progress, the child's fence note)."""

    def __init__(self, ctx: ChildContext, clock: Clock = leaseclock.now) -> None:
        self._deadline: Any = ctx.RawValue(ctypes.c_double, 0.0)
        self._clock = clock
        self.calls = CallCells(ctx)

    def __getstate__(self) -> dict[str, Any]:
        return {"_deadline": self._deadline, "calls": self.calls}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._deadline = state["_deadline"]
        self._clock = leaseclock.now
        self.calls = state["calls"]

    @property
    def cell(self) -> Any:
        """The shared double itself: ``cell.value`` is the deadline. The child's per-record path
        reads it directly (``clock() < cell.value`` is `valid` without two method calls)."""
        return self._deadline

    @property
    def deadline(self) -> float:
        """The lease-clock time at which the lease ends (0: no lease)."""
        return float(self._deadline.value)

    def extend_to(self, deadline: float) -> None:
        """Move the deadline later (never earlier: use `revoke` to end it)."""
        if deadline > self._deadline.value:
            self._deadline.value = deadline

    def revoke(self) -> None:
        """End the lease now: the child stops before its next handler call."""
        self._deadline.value = 0.0

    def remaining(self) -> float:
        """Seconds left (negative once expired)."""
        return self.deadline - self._clock()

    def valid(self) -> bool:
        """Whether the holder may still process."""
        return self._clock() < self.deadline
