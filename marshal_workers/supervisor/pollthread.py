"""The coordination log read on a thread of its own, waking the loop when records come.

The loop waits on its children's pipes and the signal pipe; the log's records wake nothing
there. While writes were in flight (an AMO grant, a claim) the loop used to look at the log
every millisecond instead: a thousand turns a second, each with its own bookkeeping for every
child, most of them finding nothing. Under load that spinning took a CPU the children needed,
which made the grants slower, which made the loop spin longer. Here a thread blocks in the
log's ``poll`` (librdkafka waits without the GIL), queues what it read, and writes one byte to
a pipe the loop waits on, so a turn happens when a record, a child's message or a signal
comes, or the loop's own timeout passes.

Only this thread calls the log's ``poll`` once it runs; the loop takes the records in the order
read, and the read errors met meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable

from marshal_workers.log.interface import LogError
from marshal_workers.protocol.wire import CoordRecord

POLL_S = 0.1  # how long one poll waits: the longest a stop waits for the thread


class LogPollThread:
    """A thread that polls the coordination log and wakes the loop through a pipe."""

    def __init__(self, poll: Callable[[float], list[CoordRecord]]) -> None:
        self._poll = poll
        self._lock = threading.Lock()
        self._read: list[list[CoordRecord] | LogError] = []
        self._stop = threading.Event()
        self._closed = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._thread = threading.Thread(target=self._run, name="marshal-log-reader", daemon=True)

    def fileno(self) -> int:
        """The pipe that is readable when something was read (for the loop's wait)."""
        return self._wake_r

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                got: list[CoordRecord] | LogError = self._poll(POLL_S)
            except LogError as exc:
                got = exc
            if not got:
                continue
            with self._lock:  # (wake and drain under the lock: no wake-up outlives its take)
                self._read.append(got)
                self._wake()

    def take(self) -> tuple[list[CoordRecord], list[LogError]]:
        """The records read since the last call, in the order read, and the read errors met
        meanwhile (the loop logs them: a read error loses nothing, the poll after it goes on)."""
        with self._lock:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake_r, 4096):
                    pass
            taken, self._read = self._read, []
        records: list[CoordRecord] = []
        errors: list[LogError] = []
        for item in taken:
            if isinstance(item, LogError):
                errors.append(item)
            else:
                records.extend(item)
        return records, errors

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # a full pipe wakes the loop already
            os.write(self._wake_w, b"r")

    def close(self) -> None:
        """Stop the thread (it ends within one poll) and close the pipe once it has; again:
        nothing."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(POLL_S * 10)
        if not self._thread.is_alive() and not self._closed:  # else a poll hangs: leave
            self._closed = True  # the pipe to the exit
            os.close(self._wake_r)
            os.close(self._wake_w)
