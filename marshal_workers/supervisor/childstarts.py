"""Processes started off the supervisor's loop: a child, and a host's reader before it.

Starting a process from the fork server waits for the server to fork it and send back its
pid (`multiprocessing`'s ``Process.start``). The server runs in the children's scheduling
group, at their nice (`childlink.schedgroup`): on a host whose CPU-bound children and other
sessions take the cores, it can wait seconds for one, and a stopped or paged-out server
longer. Started from the loop, that wait stopped every heartbeat of the member: its claims'
leases ran out, its healthy children were fenced and its member claim was lost (a review: one
start took 1.83 s, another 6 s with the server stopped).

So `Starts` runs each start on a thread of its own, one at a time and in order, and the loop
takes the results when they come (`results`, woken through `fileno`); meanwhile it goes on
heartbeating. Whatever the thread does to the host's readers (`supervisor.feeds`: starting one
for a child, killing one a child lost its feed to) goes through it too, as a job in the same
queue: the readers are the thread's alone, and a reader killed is gone before the next child's
start looks for its partition's reader.

The thread lives as long as the supervisor (a spawned child's parent-death signal follows the
thread that started it). Closed (`close`), it kills a child whose start ends after that: the
supervisor is exiting.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from marshal_workers.core import commands as cmd
from marshal_workers.ipc import messages as ipc
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.supervisor.childprocess import ChildHandle

CLOSE_WAIT_S = 2.0  # how long `close` waits for the thread's last jobs (the readers' kills)


@dataclass(frozen=True, slots=True)
class Start:
    """A start that ended: the child's handle and the spec it was started with, or why no
    process could be made."""

    key: ClaimKey
    handle: ChildHandle | None
    spec: ipc.ChildSpec | None
    error: Exception | None


@dataclass(slots=True)
class Waiting:
    """A child being started: what the core told it or signalled meanwhile, for once it has."""

    spawn: cmd.Spawn
    told: list[ipc.ToChild] = field(default_factory=list)
    signalled: cmd.SignalChild | None = None


Job = Callable[[], tuple[ipc.ChildSpec, ChildHandle]]


class Starts:
    """One thread that starts processes in order (module doc)."""

    def __init__(self, log: Any) -> None:
        self.log = log
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[Start] = queue.SimpleQueue()
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._work, name="marshal-starts", daemon=True)
        self._thread.start()

    def fileno(self) -> int:
        """Readable when a start has ended (for the loop's wait)."""
        return self._read

    def start(self, key: ClaimKey, job: Job) -> None:
        """Run ``job`` (returns the spec used and the child's handle) on the thread; its
        `Start` comes out of `results`."""

        def run() -> None:
            try:
                spec, handle = job()
            except Exception as exc:  # no process could be made (limits, memory): the claim's
                self._finished(Start(key, None, None, exc))
                return
            if self._closed.is_set():  # the supervisor is exiting: nothing outlives it
                handle.signal_group(signal.SIGKILL)
            self._finished(Start(key, handle, spec, None))

        self._jobs.put(run)

    def then(self, action: Callable[[], None]) -> None:
        """Run ``action`` on the thread after the starts asked for so far (a reader's kill)."""
        self._jobs.put(action)

    def results(self) -> list[Start]:
        """The starts that ended since the last call, in order."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read, 4096):
                pass
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def close(self, last: Callable[[], None] | None = None) -> None:
        """Kill what starts from now on, run ``last`` after the jobs queued, and wait a little
        for it (a start stuck on a stopped fork server is not waited for: the server dies with
        the supervisor, and its children with it)."""
        self._closed.set()
        if last is not None:
            self._jobs.put(last)
        self._jobs.put(None)
        self._thread.join(CLOSE_WAIT_S)
        if not self._thread.is_alive():
            for fd in (self._read, self._write):
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _finished(self, start: Start) -> None:
        self._done.put(start)
        with contextlib.suppress(OSError):
            os.write(self._write, b"s")

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except Exception as exc:  # logged; the thread (and its children) lives on
                self.log.error("start_job_failed", error=f"{type(exc).__name__}: {exc}")
