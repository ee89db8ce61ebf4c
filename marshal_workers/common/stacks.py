"""Stack dumps on SIGUSR1: every thread's stack as log lines, and which processes can take one.

The supervisor's loop answers SIGUSR1 (enqueued by its signal handler) with `log_stacks`: one
log line per thread, the stack in a ``stack`` field. It then asks each child for the same: an
`ipc.DumpStacks` over the pipe, which the child answers between batches with `log_stacks`,
and a SIGUSR1 to the child's pid, which ``faulthandler`` answers at once, even while the handler
is stuck (`collect_fault_dumps`). A child is sent SIGUSR1 only once `catches_signal` shows it
registered: before that, SIGUSR1's default action would end it.

faulthandler writes from its C signal handler, in many small writes: straight to the stderr
that every process of a supervisor shares, its dump would cut other processes' log lines in
two and not say whose it is. So it writes into a pipe instead, and a thread of the child logs
each dump as one line with the child's bound context. The pipe's write end does not block: if
that thread cannot run, a dump is lost, but the signal handler never hangs.
"""

from __future__ import annotations

import faulthandler
import os
import select
import signal
import sys
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marshal_workers.common.threadsignals import start_leaving_to_the_main_thread

STACK_DUMP_EVENT = "stack_dump"
DUMP_QUIET_S = 0.05  # a dump is complete once the pipe stayed empty this long


@dataclass(frozen=True, slots=True)
class ThreadStack:
    """One thread's stack, innermost call last (as a traceback prints it)."""

    name: str
    ident: int
    daemon: bool
    stack: str


def thread_stacks() -> list[ThreadStack]:
    """The stack of every thread of this process, the main thread first."""
    threads = {t.ident: t for t in threading.enumerate()}
    main = threading.main_thread().ident
    stacks = []
    for ident, frame in sys._current_frames().items():
        thread = threads.get(ident)
        stacks.append(
            ThreadStack(
                name=thread.name if thread is not None else f"thread-{ident}",
                ident=ident,
                daemon=thread.daemon if thread is not None else False,
                stack="".join(traceback.format_stack(frame)),
            )
        )
    return sorted(stacks, key=lambda s: (s.ident != main, s.name))


def log_stacks(log: Any, event: str = STACK_DUMP_EVENT) -> int:
    """Log one line per thread with its stack; return how many threads."""
    stacks = thread_stacks()
    for s in stacks:
        log.info(event, thread=s.name, thread_id=s.ident, daemon=s.daemon, stack=s.stack)
    return len(stacks)


def collect_fault_dumps(
    log: Any, event: str = STACK_DUMP_EVENT, signum: int = signal.SIGUSR1
) -> None:
    """Dump every thread's stack on ``signum`` at once (faulthandler, so even while the main
    thread is stuck) and log each dump as one ``event`` line from a daemon thread."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    faulthandler.register(signum, file=write_fd, all_threads=True)
    dumps = threading.Thread(
        target=_log_dumps, args=(read_fd, log, event), name="marshal-stack-dumps", daemon=True
    )
    start_leaving_to_the_main_thread(dumps)


def _log_dumps(fd: int, log: Any, event: str) -> None:
    while chunk := os.read(fd, 65536):
        chunks = [chunk]
        while select.select([fd], [], [], DUMP_QUIET_S)[0] and (more := os.read(fd, 65536)):
            chunks.append(more)
        text = b"".join(chunks).decode(errors="replace")
        log.info(event, source="faulthandler", stack=text)


def catches_signal(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (Linux: SigCgt in /proc; False
    elsewhere or if the process is gone)."""
    return in_signal_mask(Path(f"/proc/{pid}/status"), "SigCgt", signum)


def in_signal_mask(status: Path, mask: str, signum: int) -> bool:
    """Whether ``signum`` is in the mask named ``mask`` (``SigCgt``, ``SigBlk``...) of a /proc
    ``status`` file (a process's, or a thread's under ``task``); False if it cannot be read."""
    try:
        text = status.read_text()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith(f"{mask}:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False
