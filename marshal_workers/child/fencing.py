"""How a child fences itself: its own process group, death with its parent, the lease watchdog.

docs/design.md, leases: a child may process only while its lease (a deadline on the lease clock,
`common.leaseclock`, in shared memory, written by the supervisor) lasts, and it must stop even
if the supervisor is frozen.
The defences, from the child's side:

- `become_group_leader`: the child leads its own process group, so the supervisor's
  ``killpg`` also ends whatever the handler started (shell commands, helper processes).
- `set_parent_death_signal`: on Linux the kernel sends SIGKILL to the child when the thread
  that started it dies (``PR_SET_PDEATHSIG``): the fork server (`forkserver`), which exits
  with the supervisor, or the supervisor itself for a spawned child. The flag is set after the
  process exists, so a parent that died before it was set is caught by checking the chain up
  to the supervisor's pid (`parent_to_watch`). Elsewhere only the pid check (by the watchdog)
  remains.
- `start_group_guardian`: a small process forked at the child's start (before any thread
  exists), in the child's group, that waits for the child to end however it ends (exit,
  SIGKILL by anyone, the parent-death signal when the supervisor dies) and then SIGKILLs the
  whole group: a helper process the handler started never outlives the child. (A helper that
  the handler *forked* without exec holds the guardian's pipe open: then the supervisor's own
  group kill after the child's exit remains.)
- `Watchdog`: a daemon thread that wakes at least once a tick (`callstate.watchdog_tick`: an
  eighth of ``handler_timeout``, between 0.25 s and 1 s; the timeout itself when that is
  shorter than 0.25 s, not below 50 ms; 1 s without one) and at the deadline itself (its
  wait is a time on the lease clock, `sleep_until`, so a suspend cannot stretch it), re-reads
  the lease (the supervisor moves it on every valid heartbeat) and the deadline of
  the handler call in progress (``handler_timeout``, moved by ``ctx.keepalive()``), and calls
  ``on_fence`` (which ends the child with ``os._exit``; the guardian then kills the rest of
  its group) once the lease has expired, the parent changed or the handler call ran past its
  deadline.
  It runs while the main thread is stuck in a handler that sleeps, waits on I/O or loops in
  pure Python. It cannot run while the main thread holds the GIL inside one long C call (a
  C extension that does not release it): then the supervisor's SIGKILL at lease expiry is
  the backstop, and the fencing token the handler passes to its sink is the last line.
- `fence_on_resume`: a child stopped (SIGSTOP, with its supervisor, so that nobody killed it
  meanwhile) past its lease runs on when it is continued. The watchdog, awake at once then,
  must first take the GIL from the handler's thread, which may wait a switch interval (5 ms):
  time enough for a call in progress to finish and write, after the lease. A review saw it (a
  200 µs record's line written 20 s after the stop, 1 ms before the watchdog's fence). So
  SIGCONT has a handler that looks at the lease: Python runs it in the main thread, which runs
  the handler, before the handler's next few bytecodes. What it cannot stop: a thread of the
  handler's own or C code that released the GIL finishes its step; and a freeze that sends no
  SIGCONT (a host suspend, a VM pause, the cgroup freezer) leaves it to the watchdog.
  The handler runs at once only if the main thread takes the signal: the threads the runtime
  starts block it (`common.threadsignals`; a CI run saw the watchdog fence first when one of
  them took it).
- `FirstFence`: the watchdog and the SIGCONT handler can both fence on one continue; the
  first decides what is written and the exit code, the second never returns to the handler.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import NoReturn

import psutil

from marshal_workers.child.callclock import CallClock
from marshal_workers.childlink.callstate import watchdog_tick
from marshal_workers.childlink.sharedlease import Clock, SharedLease
from marshal_workers.common import leaseclock
from marshal_workers.common.threadsignals import start_leaving_to_the_main_thread

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
# How often the watchdog looks without a deadline due (`callstate.watchdog_tick`, defined with
# the cell it publishes): a revoke (deadline 0), the parent gone (the parent-death signal comes
# first), a handler call begun since it last looked. The lease's deadline, and a call's once
# seen, are waited for exactly, whatever the tick. Each look takes the GIL from the handler's
# thread, which runs below this one's priority (`child_nice`): at 50 ms, 64 busy children on
# two cores kept other processes of the host off the CPU for up to 5 s at a time (the local
# broker was fenced by its own controller, the members' leases ran out); at 0.25 s, 0.26 s at
# most (`make bench-watchdog`, docs/benchmarks.md), and the looks still cost those children
# about 5% of their handlers' CPU, so a handler timeout of 8 s or more (the default is 300 s)
# looks once a second. A shorter timeout looks more often: a call begun between two looks must
# be seen before its deadline, and shown slow soon after half of it.

REASON_LEASE_EXPIRED = "lease_expired"
REASON_PARENT_GONE = "parent_gone"
REASON_HANDLER_TIMEOUT = "handler_timeout"
GUARDIAN_MAX_FD = 4096  # the guardian closes every inherited descriptor below this but its own


def start_group_guardian() -> int:
    """Fork the group guardian (call while this process is single-threaded, after it leads its
    own group); returns the guardian's pid. The guardian holds only the read end of a pipe whose
    write end stays here; when this process ends, the read sees end-of-file and the guardian
    SIGKILLs the process group (itself included)."""
    read_end, write_end = os.pipe()  # not inherited across exec: helpers never hold them
    pid = os.fork()
    if pid:
        os.close(read_end)
        return pid
    try:  # the guardian: nothing but a blocking read, then the group's end
        os.close(write_end)
        os.closerange(0, read_end)
        os.closerange(read_end + 1, GUARDIAN_MAX_FD)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(sig, signal.SIG_IGN)  # only the child's end (or SIGKILL) ends it
        while True:
            try:
                if not os.read(read_end, 1):
                    break
            except InterruptedError:  # pragma: no cover (PEP 475 retries)
                continue
        os.killpg(os.getpgrp(), signal.SIGKILL)
    finally:
        os._exit(0)


def become_group_leader() -> None:
    """Make this process the leader of a new process group (its pgid becomes its pid)."""
    # PermissionError: already a session leader (started with setsid), so a group leader too
    with contextlib.suppress(PermissionError):
        os.setpgid(0, 0)


def set_parent_death_signal(sig: int) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent dies; False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(sig), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
    return True


def parent_alive(parent_pid: int) -> bool:
    """Whether this process still has the parent that started it (not reparented to init)."""
    return os.getppid() == parent_pid


def parent_to_watch(supervisor_pid: int) -> int | None:
    """The parent whose end must end this child: the supervisor itself (a spawned child), or
    the fork server between them (`forkserver`: a forked child), checked to be the
    supervisor's own child; None if the chain is already broken (the supervisor or the fork
    server gone: reparented). Call it after `set_parent_death_signal`, so that a parent that
    dies after this check still ends the child."""
    parent = os.getppid()
    if parent == supervisor_pid:
        return parent
    try:
        grandparent = psutil.Process(parent).ppid()
    except psutil.Error:
        return None
    return parent if grandparent == supervisor_pid and os.getppid() == parent else None


def write_with_timeout(fd: int, data: bytes, timeout_s: float) -> None:
    """Write ``data`` to ``fd`` from a helper thread, giving up after ``timeout_s``.

    Used just before ``os._exit``: a full stderr pipe (a supervisor that stopped reading) must
    not keep a process from fencing itself.
    """

    def write() -> None:
        with contextlib.suppress(OSError):
            os.write(fd, data)

    writer = threading.Thread(target=write, name="marshal-last-words", daemon=True)
    start_leaving_to_the_main_thread(writer)
    writer.join(timeout_s)


def fence_on_resume(
    lease: SharedLease, on_fence: Callable[[str], NoReturn], clock: Clock = leaseclock.now
) -> bool:
    """On SIGCONT, call ``on_fence(REASON_LEASE_EXPIRED)`` if the lease ran out (or was revoked)
    while the process was stopped (module doc). Not set where SIGCONT already has a Python
    handler (a spare's plugin, imported before its claim); a plugin imported later replaces it.
    Whether it was set. Call from the main thread.

    System calls it interrupts are restarted (``siginterrupt`` False: SA_RESTART), so a stop
    and continue within the lease stays invisible to C code that does not retry on EINTR (a
    review: a ctypes ``read`` failed with EINTR). A process the handler forked inherits the
    handler and ignores it: only this process fences."""
    if signal.getsignal(signal.SIGCONT) not in (signal.SIG_DFL, None):
        return False
    pid = os.getpid()

    def on_continue(signum: int, frame: object) -> None:
        if os.getpid() == pid and clock() >= lease.deadline:
            on_fence(REASON_LEASE_EXPIRED)

    signal.signal(signal.SIGCONT, on_continue)
    signal.siginterrupt(signal.SIGCONT, False)
    if hasattr(signal, "pthread_sigmask"):  # a mask inherited blocked would leave it to others
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCONT})
    return True


class FirstFence:
    """The child's fence, taken once: ``fence(reason, by)`` writes the fencer's last words
    (``words``), then ends the process (``end``) with ``code_of(reason)``; never returns.

    The child has two fencers, the watchdog's thread and the SIGCONT handler in the main thread
    (`fence_on_resume`), and on a continue past the lease both see it expired. Last words are
    written from a helper thread, waited for (`write_with_timeout`), which lets the other
    fencer run meanwhile: both then wrote, and the line that came out first, or the only one
    when its writer's exit came first, could be the second fencer's. So the first call decides: its
    words alone are written and its code is the process's, even if the words raise (another
    signal handler's exception). A later call waits ``wait_s`` for the first to end the
    process, then ends it with the first's code: from another thread, or from the same one (a
    second SIGCONT, its handler run while the first's words are written, the helper thread
    writing them meanwhile). Either way the caller's thread never goes back to the handler's
    code."""

    def __init__(
        self,
        words: Callable[[str, str, int], None],
        code_of: Callable[[str], int],
        end: Callable[[int], NoReturn] = os._exit,
        wait: Callable[[float], None] = time.sleep,
        wait_s: float = 0.5,
    ) -> None:
        self._taken = threading.Lock()
        self._words, self._code_of, self._end = words, code_of, end
        self._wait, self._wait_s = wait, wait_s
        self._code = 0

    def __call__(self, reason: str, by: str) -> NoReturn:
        code = self._code_of(reason)
        if self._taken.acquire(blocking=False):  # never blocks: a signal handler calls this
            self._code = code
            try:
                self._words(reason, by, code)
            finally:
                self._end(code)
        try:
            self._wait(self._wait_s)
        finally:  # (another signal handler's exception meanwhile)
            self._end(self._code or code)


class Watchdog(threading.Thread):
    """Calls ``on_fence(reason)`` once the lease expires, the parent is gone or the handler
    call in progress outlives its deadline (``call_clock``; None: no handler deadline); never
    returns from that call (``on_fence`` ends the process). Each tick it also publishes the
    start of the call in progress into the shared cells, for the supervisor."""

    def __init__(
        self,
        lease: SharedLease,
        parent_pid: int,
        on_fence: Callable[[str], NoReturn],
        tick_s: float | None = None,
        clock: Clock = leaseclock.now,
        call_clock: CallClock | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        super().__init__(name="marshal-watchdog", daemon=True)
        self._lease = lease
        self._started_cell = lease.calls.started
        self._parent_pid = parent_pid
        self._on_fence = on_fence
        self._tick_s = tick_s
        self._clock = clock
        self._call_clock = call_clock
        # waits until a time on ``clock``; an injected clock comes with its own way to wait
        self._sleep_until = sleep_until if sleep is None else sleep

    def run(self) -> None:
        """Poll the parent, the lease and the call in progress until one of them says stop."""
        clock, sleep_until, tick = self._clock, self._sleep_until, self._tick_s
        if tick is None:  # a call begun during a wait is seen within its timeout
            tick = watchdog_tick(self._call_clock.timeout_s if self._call_clock else None)
        while True:
            if not parent_alive(self._parent_pid):
                self._on_fence(REASON_PARENT_GONE)
            deadline = self._lease.deadline  # re-read: the supervisor extends it
            now = clock()
            if now >= deadline:
                self._on_fence(REASON_LEASE_EXPIRED)
            if self._call_clock is not None:
                self._started_cell.value = self._call_clock.started()
                call_deadline = self._call_clock.deadline()
                if call_deadline:
                    if now >= call_deadline:
                        self._on_fence(REASON_HANDLER_TIMEOUT)
                    deadline = min(deadline, call_deadline)
            sleep_until(min(now + tick, deadline))  # a time on the lease clock, not a duration


def sleep_until(deadline: float) -> None:
    """Sleep until the lease clock (`common.leaseclock`) reads ``deadline``, or a little less
    (a signal may wake it early: the caller checks again).

    On Linux this is an absolute sleep on the lease clock itself (``clock_nanosleep`` with
    ``TIMER_ABSTIME`` on CLOCK_BOOTTIME): a suspend in between ends it at once on resume, when
    that clock is past the deadline. A relative sleep (``time.sleep``) runs on CLOCK_MONOTONIC,
    which stands still during a suspend, so it would end up to its whole length after the
    deadline. Elsewhere (no ``clock_nanosleep``) the relative sleep it is."""
    if _clock_nanosleep is not None:
        seconds = math.floor(deadline)
        when = _Timespec(int(seconds), int((deadline - seconds) * 1e9))
        if _clock_nanosleep(leaseclock.CLOCK_ID, TIMER_ABSTIME, ctypes.byref(when), None) in (
            0,
            errno.EINTR,
        ):
            return
    time.sleep(max(0.0, deadline - leaseclock.now()))


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _find_clock_nanosleep() -> Callable[..., int] | None:
    """libc's ``clock_nanosleep`` on Linux (it releases the GIL while it sleeps), else None."""
    if not sys.platform.startswith("linux"):
        return None
    function: Callable[..., int] = ctypes.CDLL(None).clock_nanosleep
    function.argtypes = [  # type: ignore[attr-defined]
        ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Timespec), ctypes.c_void_p,
    ]  # fmt: skip
    function.restype = ctypes.c_int  # type: ignore[attr-defined]
    return function


TIMER_ABSTIME = 1  # from <time.h>
_clock_nanosleep = _find_clock_nanosleep()
