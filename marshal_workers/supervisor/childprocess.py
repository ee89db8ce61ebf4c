"""The supervisor's side of a child process: starting one (`start_child`) and its handle
(`ChildHandle`: exit code, pipe, signals to its process group, join).

The child runs `child.entry.child_entry`, named here by reference only: the child's modules
(`child.main`, its loop, consumer and fencing, psutil) are imported by the fork server, which
every child is forked from, and never by the supervisor (about 25 ms of its start-up, and the
memory). What the child does once started is `child.main`'s to say.
"""

from __future__ import annotations

import contextlib
import multiprocessing.process
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from importlib.machinery import ModuleSpec
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING

from marshal_workers.child.entry import child_entry, spare_entry
from marshal_workers.childlink.sharedlease import SharedLease
from marshal_workers.ipc.messages import ChildSpec, ToChild

if TYPE_CHECKING:  # the fork server's module guards the server at import: not here
    from marshal_workers.childlink.forkserver import ChildContext

_NO_SPEC = object()
KILLED_REAP_S = 2.0  # after a SIGKILL, how long the child's parent has to report its end


class ChildHandle:
    """The supervisor's handle on one running child (its process and pipe end)."""

    def __init__(self, process: BaseProcess, conn: Connection) -> None:
        self.process = process
        self.conn = conn
        pid = process.pid
        assert pid is not None, "ChildHandle of a process that was not started"
        self.pid: int = pid
        # readable once the child's exit can be read (`exitcode`): the supervisor's loop
        # waits on it, and looks at the exit code only when it is (or now and then: see
        # `Supervisor._reap_children`)
        self.sentinel: int | None = process.sentinel
        # its pipe showed an end while the child may still run: no longer waited on
        # (`Supervisor._read_child`)
        self.pipe_ended = False
        self.killed_at: float | None = None  # when the supervisor SIGKILLed its group

    @property
    def exitcode(self) -> int | None:
        """None while running; else the exit code (negative: the signal). Reaps, never blocks.

        A fork server's child's exit is what the server reports: stopped (SIGSTOP, paged out,
        starved), it reports none, and a supervisor that waited for it held its claims for as
        long (a review: a TERM never ended). So a child this supervisor killed is taken for
        ended `KILLED_REAP_S` after the kill once the kernel shows it dead (a zombie its
        parent has not reaped, or gone), with the status the kernel keeps for it."""
        code = self.process.exitcode
        if code is not None or self.killed_at is None:
            return code
        if time.monotonic() - self.killed_at < KILLED_REAP_S:
            return None
        return dead_status(self.pid)

    def send(self, msg: ToChild | ChildSpec) -> bool:
        """Send `Grant` or `Stop` (to a spare child: its `ChildSpec`); False if the child is
        gone (its pipe end closed)."""
        try:
            self.conn.send(msg)
        except OSError:
            return False
        return True

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the child's process group: the child and whatever its handler started.

        Until the child has made its own group (its first statement), only the child itself
        exists to be signalled, so it is signalled directly. Call this soon after the child
        ends, not much later: once every member is gone the pid may be reused.
        """
        if sig == signal.SIGKILL and self.killed_at is None:
            self.killed_at = time.monotonic()
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            if self.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, sig)

    def signal_child(self, sig: int) -> None:
        """Send ``sig`` to the child alone, not its handler's helpers: the TERM it takes at the
        next record boundary (`child.termstop`), while a helper the call in progress uses must
        live on until the call ends (killed with the group once the child has ended)."""
        if self.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def join(self, timeout: float | None = None) -> int | None:
        """Wait up to ``timeout`` seconds for the child to end; its exit code, or None."""
        self.process.join(timeout)
        return self.exitcode

    def forget(self) -> None:
        """Killed, it is dead: not to be joined at the interpreter's exit (`forget_unreported`)."""
        forget_unreported(self.process)

    def close(self) -> None:
        """Close the pipe end, and release the process object once its parent has reported
        the child's end; a child taken for ended by `exitcode` alone is forgotten instead
        (`forget_unreported`)."""
        self.conn.close()
        if self.process.exitcode is not None:
            self.process.close()
        else:
            forget_unreported(self.process)


def forget_unreported(process: BaseProcess) -> None:
    """Take ``process``, dead but not reported by its stopped parent (the fork server), out of
    what multiprocessing joins at the interpreter's exit: that join has no timeout, and it
    held a supervisor that had released everything and logged its stop (a review). The set
    is multiprocessing's own (`multiprocessing.process._children`, what `active_children`
    lists); nothing else is touched."""
    children = getattr(multiprocessing.process, "_children", None)
    if isinstance(children, set):
        children.discard(process)


def dead_status(pid: int, proc: str = "/proc") -> int | None:
    """The exit code of ``pid`` if the kernel shows it dead (negative: the signal): a zombie's
    status (the last field of ``/proc/PID/stat``, a wait status), ``-SIGKILL`` if it is gone
    or its status cannot be read; None while it lives."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return -signal.SIGKILL
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()  # after the command name: state first
    if not fields or fields[0] not in (b"Z", b"X"):
        return None
    try:
        status = int(fields[-1])
    except ValueError:
        return -signal.SIGKILL
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def start_child(spec: ChildSpec, lease: SharedLease, mp_context: ChildContext) -> ChildHandle:
    """Start a child for ``spec`` under ``lease`` (extend the lease first: 0 means stop now),
    from the fork server (`forkserver.fork_server`) or by spawning (tests).

    A spawned child's parent-death signal comes when the *thread* that started it ends: call
    this from a thread that lives as long as the supervisor.
    """
    return _start(child_entry, spec, lease, mp_context, f"{spec.topic}/{spec.partition}")


def start_spare(template: ChildSpec, lease: SharedLease, mp_context: ChildContext) -> ChildHandle:
    """Start a child ahead of its claim (`supervisor.spare`), with the member's child settings
    (``template``) and the ``lease`` it will run under; it waits for its spec (`Spare.take`).
    As `start_child`: from a thread that lives as long as the supervisor."""
    return _start(spare_entry, template, lease, mp_context, "spare")


def _start(
    entry: Callable[..., object],
    spec: ChildSpec,
    lease: SharedLease,
    mp_context: ChildContext,
    name: str,
) -> ChildHandle:
    parent_conn, child_conn = mp_context.Pipe(duplex=True)
    process = mp_context.Process(
        target=entry,
        args=(spec, lease, child_conn, os.getpid()),
        name=f"marshal-child:{name}",
        daemon=False,  # a daemonic process may not start processes: handlers may need to
    )
    with main_not_rerun():
        process.start()
    child_conn.close()
    return ChildHandle(process, parent_conn)


@contextlib.contextmanager
def main_not_rerun() -> Iterator[None]:
    """While a child starts, tell multiprocessing not to re-run the parent's ``__main__`` in it.

    multiprocessing runs the parent's main script (``marshal-run``, hence the whole CLI's
    imports: 0.1 s of CPU and 6 MB per child) or module again in every spawned or fork-server
    child, so that functions defined there can be unpickled. A child runs `child_entry` only. A
    main module that reads as a package's ``__main__`` is one it never re-runs; the real spec
    is put back at once.
    """
    main = sys.modules["__main__"]
    saved = main.__dict__.get("__spec__", _NO_SPEC)
    main.__spec__ = ModuleSpec("__main__", None)
    try:
        yield
    finally:
        if saved is _NO_SPEC:
            del main.__spec__
        else:
            main.__spec__ = saved
