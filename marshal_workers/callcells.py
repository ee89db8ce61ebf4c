"""What a child's handler is doing, in shared memory next to its lease: read by the supervisor.

The child writes, the supervisor (and the child's own watchdog) read. Every cell is one aligned
8-byte value (a 64-bit integer or a double), written by a single store, so a reader never sees a
torn value; the cells are not read as a consistent set (each is meaningful on its own, and
`EndNote` is taken only after the child has ended, when nothing writes any more).

- ``position`` (int64, -1 unknown): every record below it was handled (ALO). The child stores
  the offset of each record just before it hands it to the handler (while the call runs, the
  records below it are the handled ones) and the next offset after a run of calls. The
  supervisor reads it when it heartbeats, so a heartbeat carries a position that is as old as
  the heartbeat, whatever the batch size (DESIGN.md section 3: the ALO redelivery bound).
- ``started`` (double, monotonic; 0: no call in progress): when the current handler call (a
  ``handle_batch`` call: the batch) began. The watchdog ends the child's process group once it
  is older than the handler timeout; the supervisor shows calls older than half of it.
- ``unit_end`` (int64, -1: one record): a ``handle_batch`` call covers ``position`` to it.
- ``keep_for`` / ``keep_until`` (doubles): ``ctx.keepalive()`` moved the deadline of the call
  that started at ``keep_for`` to ``keep_until`` (tied to the start time, so nothing needs
  resetting per call).
- ``fence`` (int64, 0: none): the exit code the child meant when it killed its own process
  group (the group's SIGKILL also ends the child, whose exit status then says only "SIGKILL").
"""

from __future__ import annotations

import ctypes
from multiprocessing.context import SpawnContext
from typing import Any

from marshal_workers.exitpolicy import EndNote

NO_POSITION = -1


class CallCells:
    """The shared cells of one claim (created by the supervisor, inherited by its children)."""

    def __init__(self, ctx: SpawnContext) -> None:
        self.position: Any = ctx.RawValue(ctypes.c_int64, NO_POSITION)
        self.started: Any = ctx.RawValue(ctypes.c_double, 0.0)
        self.unit_end: Any = ctx.RawValue(ctypes.c_int64, NO_POSITION)
        self.keep_for: Any = ctx.RawValue(ctypes.c_double, 0.0)
        self.keep_until: Any = ctx.RawValue(ctypes.c_double, 0.0)
        self.fence: Any = ctx.RawValue(ctypes.c_int64, 0)

    def handled_position(self) -> int | None:
        """Every record below this offset was handled (ALO); None if no child said yet."""
        value = int(self.position.value)
        return None if value == NO_POSITION else value

    def call_started(self) -> float:
        """The monotonic start of the handler call in progress, 0 if none."""
        return float(self.started.value)

    def call_age(self, now: float) -> float | None:
        """Seconds the handler call in progress has run at ``now``; None if there is none."""
        started = float(self.started.value)
        return None if started <= 0 else max(0.0, now - started)

    def call_deadline(self, timeout_s: float) -> float:
        """When the call in progress must end (0: no call): its start plus the timeout, or
        later if ``ctx.keepalive()`` extended it."""
        started = float(self.started.value)
        if started <= 0:
            return 0.0
        deadline = started + timeout_s
        if self.keep_for.value == started:
            deadline = max(deadline, float(self.keep_until.value))
        return deadline

    def keep_alive(self, until: float) -> None:
        """Extend the call in progress to ``until`` (no call in progress: nothing)."""
        started = float(self.started.value)
        if started > 0:
            self.keep_until.value = until
            self.keep_for.value = started

    def take_end_note(self) -> EndNote:
        """Read what the ended child left, and reset the call cells for the next child (the
        position is kept: it is where the next one starts)."""
        position = self.handled_position()
        unit_end = int(self.unit_end.value)
        note = EndNote(
            fence=int(self.fence.value),
            position=position,
            call_started=float(self.started.value),
            unit_end=None if unit_end == NO_POSITION else unit_end,
        )
        self.started.value = 0.0
        self.unit_end.value = NO_POSITION
        self.fence.value = 0
        return note
