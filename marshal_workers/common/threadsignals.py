"""Signals whose Python handler must run at once are kept off every thread the runtime starts.

A signal sent to a process goes to one of its threads that does not block it; after a stop,
SIGCONT goes to whichever runs first on the continue. Python runs handlers in the main thread
only, and when another thread takes the signal, CPython 3.11 marks it pending without waking
the main thread's loop (it recomputes that flag for the thread that took it): the handler
runs only once the main thread drops the GIL for some other reason, up to a switch interval
later. So a child's SIGCONT handler (`child.fencing.fence_on_resume`) came after the watchdog's
fence, 0.2 s after the continue under a handler that set that switch interval, the handler's
code running meanwhile, whenever the watchdog's thread took the signal
(`tests/unit/child/test_fencing.py::TestResumeInAProcess`). Each thread the runtime starts
in a child is started by `start_leaving_to_the_main_thread`, blocked from its first
instruction. librdkafka's threads block every signal; a thread the user's handler starts does
not, and can delay it as before.
"""

from __future__ import annotations

import signal
import threading

MAIN_THREAD_SIGNALS = frozenset({signal.SIGCONT})


def start_leaving_to_the_main_thread(thread: threading.Thread) -> None:
    """Start ``thread`` with `MAIN_THREAD_SIGNALS` blocked from its first instruction: blocked
    in the calling thread around ``start`` (a new thread inherits its creator's mask), then
    the caller's mask as it was (a signal that came meanwhile is taken then). Where threads
    have no signal mask of their own, just ``start``."""
    if not hasattr(signal, "pthread_sigmask"):
        thread.start()
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, MAIN_THREAD_SIGNALS)
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
