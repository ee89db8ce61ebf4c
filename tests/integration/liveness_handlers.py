"""Handlers for the liveness tests (loaded by spawned children): a handler that misbehaves on one
offset in a chosen way, and writes the ledger (plugins/ledger.py) for every other record.

Environment (read per call):

- ``LIVENESS_AT``: the offset to misbehave on (every partition);
- ``LIVENESS_HOW``: what to do there (see `HOW`);
- ``LIVENESS_HELPER_PID_FILE``: if set, first start a helper process (``sleep 60``, in the
  child's process group) and write its pid there;
- ``LIVENESS_KEEPALIVE_S``: for ``keepalive``, how long the call works (calling
  ``ctx.keepalive()`` every 0.2 s) before it completes;
- ``LIVENESS_MARK``: for ``close_pipe``, a file made once the pipe is closed (only the first
  call closes it); for ``work_until``, a file made when the call begins, where it writes
  ``completed <time> <pid>`` when it completes (its effect, written at once);
- ``LIVENESS_WORK_S``: for ``work_until``, how long the call works in pure Python (in steps of
  about half a millisecond, looking at the wall clock between them) before it completes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from marshal_workers.handler import Context, Record
from marshal_workers.plugins import ledger

AT_ENV = "LIVENESS_AT"
HOW_ENV = "LIVENESS_HOW"
HELPER_ENV = "LIVENESS_HELPER_PID_FILE"
KEEPALIVE_ENV = "LIVENESS_KEEPALIVE_S"
MARK_ENV = "LIVENESS_MARK"
WORK_ENV = "LIVENESS_WORK_S"
CLOSED_PIPE_WORKS_S = 4.0  # how long ``close_pipe``'s call goes on with the pipe closed


def _hang() -> None:
    while True:
        time.sleep(0.1)


def _keepalive(ctx: Context) -> None:
    until = time.monotonic() + float(os.environ[KEEPALIVE_ENV])
    while time.monotonic() < until:
        ctx.keepalive()
        time.sleep(0.2)


def _raise(error: BaseException) -> None:
    raise error


def _socket_pair_end(fd: int) -> bool:
    """Whether ``fd`` is a connected Unix socket whose peer has no name (a socket pair)."""
    try:
        copy = os.dup(fd)
    except OSError:  # closed since it was listed (the listing's own fd)
        return False
    try:
        sock = socket.socket(fileno=copy)
    except OSError:  # not a socket
        os.close(copy)
        return False
    with sock:
        try:
            return sock.family == socket.AF_UNIX and sock.getpeername() in ("", b"")
        except OSError:  # not connected
            return False


def _close_pipe(ctx: Context) -> None:
    """Close the child's end of its pipe to the supervisor (the child's one socket pair) and
    work on for a while, once: a handler closing an fd it took for one of its own. The fd
    number is kept taken by /dev/null, read-only, so the child's next send fails whatever
    is opened meanwhile."""
    mark = os.environ[MARK_ENV]
    if os.path.exists(mark):
        return
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd != null and _socket_pair_end(fd):
                os.dup2(null, fd)  # the socket closed, its number taken
    finally:
        os.close(null)
    with open(mark, "w"):
        pass
    time.sleep(CLOSED_PIPE_WORKS_S)


def _work_until(ctx: Context) -> None:
    """Work in pure Python for ``LIVENESS_WORK_S`` of wall-clock time (a mark made first), then
    complete, writing so in the mark: stopped past that time, the call ends within a step of
    its continue. The GIL's switch interval is set to 0.2 s first (as a program may set it):
    another thread of the child that asks for the GIL meanwhile waits that long for it."""
    sys.setswitchinterval(0.2)
    until = time.time() + float(os.environ[WORK_ENV])
    mark = os.open(os.environ[MARK_ENV], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    x = 0
    while time.time() < until:
        for i in range(10_000):
            x = (x + i) % 7919
    os.write(mark, f"completed {time.time()} {os.getpid()}\n".encode())  # its effect, at once


HOW = {
    "hang": lambda ctx: _hang(),
    "keepalive": _keepalive,
    "sys_exit_0": lambda ctx: sys.exit(0),
    "sys_exit_4": lambda ctx: sys.exit(4),
    "keyboard_interrupt": lambda ctx: _raise(KeyboardInterrupt()),
    "generator_exit": lambda ctx: _raise(GeneratorExit()),
    "os_exit_0": lambda ctx: os._exit(0),
    "os_exit_4": lambda ctx: os._exit(4),
    "sigkill": lambda ctx: os.kill(os.getpid(), signal.SIGKILL),
    "sigterm": lambda ctx: os.kill(os.getpid(), signal.SIGTERM),
    # one C call that never lets go of the GIL: the child's watchdog thread cannot run
    "gil": lambda ctx: sum(range(10**15)),
    "close_pipe": _close_pipe,
    "work_until": _work_until,
}


def start_helper(path: str) -> None:
    """Start ``sleep 60`` (it stays in the child's process group) and write its pid."""
    helper = subprocess.Popen(["sleep", "60"])
    with open(path + ".tmp", "w") as out:
        out.write(str(helper.pid))
    os.replace(path + ".tmp", path)


def handle(record: Record, ctx: Context) -> None:
    """Misbehave on ``LIVENESS_AT`` as ``LIVENESS_HOW`` says, else write the ledger."""
    if str(record.offset) == os.environ.get(AT_ENV):
        helper = os.environ.get(HELPER_ENV)
        if helper:
            start_helper(helper)
        HOW[os.environ[HOW_ENV]](ctx)
    ledger.handle(record, ctx)


def helper_then_ledger(record: Record, ctx: Context) -> None:
    """On the first record, start the helper; write the ledger for every record."""
    path = os.environ[HELPER_ENV]
    if not os.path.exists(path):
        start_helper(path)
    ledger.handle(record, ctx)
