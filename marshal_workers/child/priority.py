"""When a child's handler thread goes below the supervisor's CPU priority (`ChildSpec.nice`):
once its first record is dealt with (a batch plugin's: its first batch), or
``ChildSpec.nice_after_s`` (0.1 s) after setup if that comes first; not as soon as it is set up.

A member's children start together: the first one set up was lowered at once and then waited
for the CPU behind its siblings, still starting at the full priority, before it handled its
first record (0.01-0.06 s on two cores with eight children; an AMO child waits twice, for its
first reservation to be granted and again to handle it:
docs/benchmarks.md, "Launch: the first records at the child's own priority (2026-11-30)").
`Lowering` lowers the handler's thread by its id, from the handler's thread once the first
record is dealt with (`now`, called by the handling step) or from a timer thread when the time
is up, whichever comes first: the siblings still starting wait behind one record of it, not
behind its first batch (a CPU-bound handler's: 0.1 s).

What `child_nice` protects stays protected: where Linux makes each session a scheduling group
(autogroup), the children's group is lowered at once (`childlink.schedgroup`), so against the
supervisor and the host's other sessions nothing changes; inside the group, a child handling
its first record weighs as much as a sibling still starting, not more. Threads the handler's
thread starts before it is lowered keep the full priority, as those its setup starts do.
Elsewhere than Linux a thread's priority cannot be set by its id: the process is lowered at
once, as before.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

from marshal_workers.common.threadsignals import start_leaving_to_the_main_thread

PER_THREAD = sys.platform.startswith("linux")  # setpriority(PRIO_PROCESS, tid) sets one thread
MAX_NICE = 19


class Lowering:
    """The calling thread lowered by ``nice`` levels: by `now`, or ``after_s`` seconds from its
    creation, whichever comes first (at once if ``after_s`` is not positive, or where a thread
    cannot be lowered by its id). ``refused`` is told if the kernel says no."""

    def __init__(self, nice: int, after_s: float, refused: Callable[[OSError], None]) -> None:
        self.refused = refused
        self.tid = threading.get_native_id()
        # (elsewhere than Linux a thread id is no ``who`` of getpriority: the process's nice)
        own = os.getpriority(os.PRIO_PROCESS, self.tid if PER_THREAD else 0)
        self.target = min(own + nice, MAX_NICE)
        self.done = nice <= 0
        self.timer: threading.Timer | None = None
        if self.done:
            return
        if not PER_THREAD:
            self.done = True
            try:
                os.nice(nice)
            except OSError as exc:  # (raising it is always allowed; a sandbox may refuse anyway)
                refused(exc)
            return
        if after_s <= 0:
            self._lower()
            return
        self.timer = threading.Timer(after_s, self._lower)
        self.timer.name = "marshal-priority"
        self.timer.daemon = True
        start_leaving_to_the_main_thread(self.timer)  # (SIGCONT: `child.fencing`)

    def now(self) -> None:
        """Lower it now, unless done already (the timer, if waiting, is cancelled)."""
        if self.done:
            return
        if self.timer is not None:
            self.timer.cancel()
        self._lower()

    def _lower(self) -> None:
        if self.done:  # (the timer and `now` at once: either sets the same value)
            return
        self.done = True
        try:
            os.setpriority(os.PRIO_PROCESS, self.tid, self.target)
        except OSError as exc:
            self.refused(exc)
