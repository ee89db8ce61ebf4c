"""The last step of the child's chain: where it is, told to the supervisor, and its statistics.

The position (``next_offset``) means, in ALO, that every record below it is dealt with (handled,
dead-lettered or skipped): the supervisor heartbeats it, from `Progress` and from the shared
``position`` cell, which the handling step also stores per handler call. In AMO it is the end
of what the log granted: the child's `Stopped` carries it, and once a granted run is done the
cell says so (the supervisor counts what lies between the cell and its own reservations as lost
when a child ends). Statistics (`StatsTally`, filled by the handling step) go out as `Stats`
about once a second, with the partition's high watermark from the consumer's cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from marshal_workers.child.pipe import Pipe
from marshal_workers.child.stats import StatsTally
from marshal_workers.childlink.callstate import CallCells
from marshal_workers.ipc.messages import Progress
from marshal_workers.protocol.modes import Mode

# ALO, while full batches keep coming: the least time between two `Progress`. The supervisor
# reads the position from the shared cell at every turn of its loop (`Keeping.take_positions`)
# and heartbeats only every HB/2, while each message costs it a turn and the child a pickle: 64
# busy slice children sending one every 50 ms woke their supervisors about 1,300 times a
# second. A short batch (caught up), a failure, a retry or the end always reports at once.
PROGRESS_INTERVAL_S = 0.5


class Reporter:
    """The child's position and statistics, and when to tell the supervisor."""

    def __init__(
        self,
        mode: Mode,
        cells: CallCells,
        pipe: Pipe,
        position: int,
        high_watermark: Callable[[], int | None] = lambda: None,
    ) -> None:
        self.alo = mode is Mode.ALO
        self.cells = cells
        self.pipe = pipe
        self.high_watermark = high_watermark
        self.next_offset = self.reported = position  # ALO: dealt with below; AMO: granted below
        self.progress_due = 0.0  # ALO: full batches report at most once per PROGRESS_INTERVAL_S
        self.stats = StatsTally()  # sent as `Stats` about once a second (see send_stats)
        self.read_to: Callable[[], int | None] = lambda: None  # AMO: `Reserving.read_to`
        cells.position.value = position

    def dealt_with(self, end: int) -> None:
        """Every record below ``end`` of what was handed to the handler is dealt with (AMO: of
        the granted run, which the position stays at)."""
        if self.alo:
            self.next_offset = end
        self.cells.position.value = end

    def granted(self, end: int) -> None:
        """AMO: the log granted everything below ``end``."""
        self.next_offset = end

    def run_done(self) -> None:
        """AMO: the granted run is done: nothing before its end is in hand any more."""
        self.cells.position.value = self.next_offset

    def past(self, end: int | None) -> None:
        """ALO, a slice's child, every record it kept handled: what it read up to ``end``
        belongs to other slices, so its position moves to the end of the read (else a slice
        with few records would report, and restart from, far behind its reading)."""
        if end is not None and end > self.next_offset:
            self.next_offset = end
            self.cells.position.value = end

    def after_batch(self, full: bool) -> None:
        """ALO: report after a short batch (caught up) at once, after full ones when due."""
        if not full or time.monotonic() >= self.progress_due:
            self.report()

    def report(self) -> None:
        """ALO: send `Progress` if records were dealt with since the last one."""
        if self.alo and self.next_offset != self.reported:
            self.cells.position.value = self.next_offset
            self.pipe.send(Progress(self.next_offset))
            self.reported = self.next_offset
            self.progress_due = time.monotonic() + PROGRESS_INTERVAL_S

    def send_stats(self, final: bool = False) -> None:
        """Send `Stats` when one is due (or ``final``) and there is something to say."""
        if not (final or self.stats.due()):
            return
        stats = self.stats.report(self.high_watermark(), self.read_to())
        if final and not (stats.handled or any(stats.latency_counts) or stats.errors):
            return
        self.pipe.send(stats)
