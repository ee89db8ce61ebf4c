"""What a child's handler is doing, in shared memory next to its lease: read by the supervisor.

The child writes, the supervisor (and the child's own watchdog) read. Every cell is one aligned
8-byte value (a 64-bit integer or a double), written by a single store, so a reader never sees a
torn value; the cells are not read as a consistent set (each is meaningful on its own, and
`EndNote` is taken only after the child has ended, when nothing writes any more).

- ``position`` (int64, -1 unknown): every record below it was handled (ALO). The child stores
  the offset of each record just before it hands it to the handler (while the call runs, the
  records below it are the handled ones: the one store per handler call on the hot path) and
  the next offset after a run of calls. The supervisor reads it when it heartbeats, so a
  heartbeat carries a position as old as the heartbeat, whatever the batch size (docs/design.md:
  the ALO redelivery bound).
- ``in_call`` (int64, 0: none): the number of the run of handler calls in progress (a new
  number per run, set before it and cleared after it, once per run). A child that ends while
  it is set ended inside a handler call (on the record at ``position``); the supervisor's
  backstop (`childexits.watch_call`) sees a call that is stuck as the same (run, position) for
  longer than the handler timeout.
- ``started`` (double, the lease clock `common.leaseclock`; 0: none): when the handler call in
  progress began, as the child's watchdog publishes it every tick (at most one tick old,
  `watchdog_tick`; the child's own exact copy is `callclock.CallClock`): the supervisor shows
  calls past half the timeout.
- ``unit_end`` (int64, -1: one record): a ``handle_batch`` call covers ``position`` to it.
- ``keep_until`` (double, the lease clock; 0: none): the deadline ``ctx.keepalive()`` last gave,
  for the supervisor's backstop.
- ``fence`` (int64, 0: none): the exit code the watchdog meant when it ended the child.
- ``feed_lost`` (int64, 0: no): a slice's child found its host reader's feed lost
  (`child.feedsource`). It may end with another code than the feed's (an AMO child hands on
  the runs it had asked for first, and may be refused one), and the supervisor replaces the
  reader all the same (`supervisor.feeds`).
- ``term_asked`` (int64, 0: no): the member set it just before its TERM (`Supervisor`'s
  signals): that TERM waits for the next record boundary (`child.termstop`); any other TERM
  (an operator's, the handler's own) ends the child at once, as always.
- ``stopped_at`` (int64, -1: no): the child stopped at a record boundary on its member's TERM
  (`child.termstop`) and started no record at or after this offset; AMO: the member hands
  what was reserved from there to the next child of the claim (`core.children.carried`).
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

from marshal_workers.ipc.exits import EndNote

if TYPE_CHECKING:  # the fork server's module guards the server at import: not here
    from marshal_workers.childlink.forkserver import ChildContext

NO_POSITION = -1
# How often the child's watchdog looks, and so publishes ``started`` (`watchdog_tick`;
# `child.fencing` explains the figures): the cell is at most one tick old, and while calls
# follow each other it may still hold the previous call's start, making `CallCells.call_age` up
# to one tick too long.
WATCHDOG_TICK_S = 0.25  # under a handler timeout of 2 s or less (and at most the timeout)
WATCHDOG_MIN_TICK_S = 0.05  # under a handler timeout shorter than that
WATCHDOG_MAX_TICK_S = 1.0  # under a timeout of 8 s or more, or none
TICKS_PER_TIMEOUT = 8  # between the two: an eighth of the timeout


def watchdog_tick(handler_timeout_s: float | None) -> float:
    """How often a child's watchdog looks under this handler timeout (None or 0: none).

    What it looks for when no deadline is due: a handler call begun since it last looked (seen
    before that call's deadline as long as the tick is at most the timeout), the call's start
    for the supervisor's slow-call view (shown past half the timeout; one eighth of it late at
    most), a revoke (the supervisor kills the group with it: the look is the second line) and,
    where there is no parent-death signal, the parent. Each look takes the GIL from the
    handler's thread: four a second in 64 CPU-bound children on two cores cost about 5% of the
    handlers' own CPU (docs/benchmarks.md), so a long timeout looks less often."""
    if not handler_timeout_s:
        return WATCHDOG_MAX_TICK_S
    if handler_timeout_s < WATCHDOG_TICK_S:
        return max(handler_timeout_s, WATCHDOG_MIN_TICK_S)
    share = handler_timeout_s / TICKS_PER_TIMEOUT
    return min(WATCHDOG_MAX_TICK_S, max(WATCHDOG_TICK_S, share))


class CallCells:
    """The shared cells of one claim (created by the supervisor, inherited by its children)."""

    def __init__(self, ctx: ChildContext) -> None:
        self.position: Any = ctx.RawValue(ctypes.c_int64, NO_POSITION)
        self.in_call: Any = ctx.RawValue(ctypes.c_int64, 0)
        self.started: Any = ctx.RawValue(ctypes.c_double, 0.0)
        self.unit_end: Any = ctx.RawValue(ctypes.c_int64, NO_POSITION)
        self.keep_until: Any = ctx.RawValue(ctypes.c_double, 0.0)
        self.fence: Any = ctx.RawValue(ctypes.c_int64, 0)
        self.feed_lost: Any = ctx.RawValue(ctypes.c_int64, 0)
        self.stopped_at: Any = ctx.RawValue(ctypes.c_int64, NO_POSITION)
        self.term_asked: Any = ctx.RawValue(ctypes.c_int64, 0)

    def note_feed_lost(self) -> None:
        """The child's feed is lost (see the module)."""
        self.feed_lost.value = 1

    def handled_position(self) -> int | None:
        """Every record below this offset was handled (ALO); None if no child said yet."""
        value = int(self.position.value)
        return None if value == NO_POSITION else value

    def call_age(self, now: float) -> float | None:
        """Seconds the handler call in progress has run at ``now``; None if there is none."""
        started = float(self.started.value)
        if started <= 0 or not self.in_call.value:
            return None
        return max(0.0, now - started)

    def take_end_note(self) -> EndNote:
        """Read what the ended child left, and reset the call cells for the next child (the
        position is kept: it is where the next one starts)."""
        position = self.handled_position()
        unit_end = int(self.unit_end.value)
        stopped_at = int(self.stopped_at.value)
        note = EndNote(
            fence=int(self.fence.value),
            position=position,
            in_call=bool(self.in_call.value),
            call_started=float(self.started.value),
            unit_end=None if unit_end == NO_POSITION else unit_end,
            feed_lost=bool(self.feed_lost.value),
            stopped_at=None if stopped_at == NO_POSITION else stopped_at,
        )
        self.in_call.value = 0
        self.started.value = 0.0
        self.keep_until.value = 0.0
        self.unit_end.value = NO_POSITION
        self.fence.value = 0
        self.feed_lost.value = 0
        self.stopped_at.value = NO_POSITION
        self.term_asked.value = 0
        return note
