"""The handler call in progress as the child itself sees it: when it began, when it must end.

The child's hot path already takes one clock reading per handler call and keeps it in a list
(for the latency statistics). `CallClock` publishes that list once per run of calls, so the
watchdog thread (same process, under the GIL) reads the start of the call in progress exactly
and for free: ``starts[-1]``. The deadline is that start plus ``handler_timeout``, or later if
``ctx.keepalive()`` moved it (`keepalive`: one timeout from now, never past the lease). Nothing
here crosses a process boundary; the watchdog publishes the start into the shared cells
(`callstate`) for the supervisor once per tick.
"""

from __future__ import annotations


class CallClock:
    """When the handler call in progress began and must end (None timeout: no deadline)."""

    __slots__ = ("_keep_for", "_keep_until", "starts", "timeout_s")

    def __init__(self, timeout_s: float | None) -> None:
        self.timeout_s = timeout_s
        self.starts: list[float] | None = None  # the run's call starts; None between runs
        self._keep_for = 0.0  # the start of the call that keepalive extended
        self._keep_until = 0.0

    def started(self) -> float:
        """The monotonic start of the call in progress; 0 if none."""
        starts = self.starts  # one read: the main thread may replace it meanwhile
        return starts[-1] if starts else 0.0

    def deadline(self) -> float:
        """When the call in progress must end; 0 if there is no call or no timeout."""
        started = self.started()
        if not started or self.timeout_s is None:
            return 0.0
        deadline = started + self.timeout_s
        if self._keep_for == started:
            deadline = max(deadline, self._keep_until)
        return deadline

    def keepalive(self, now: float, lease_deadline: float) -> float:
        """Give the call in progress one more timeout from ``now``, not past
        ``lease_deadline``; the seconds it has left (0 outside a call or without a timeout)."""
        started = self.started()
        if not started or self.timeout_s is None:
            return 0.0
        until = min(now + self.timeout_s, lease_deadline)
        if until > self.deadline():
            self._keep_until = until
            self._keep_for = started
        return max(0.0, self.deadline() - now)
