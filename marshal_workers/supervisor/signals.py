"""Signals only enqueue (as in gunicorn's arbiter); the supervisor's loop acts on them.

A self-pipe wakes the loop: `SignalQueue.fileno()` becomes readable when a signal arrived, so
the loop can wait on it together with its children's pipes.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections import deque
from types import FrameType

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1)


class SignalQueue:
    """Signals received, in order, and a file descriptor that wakes a waiting loop."""

    def __init__(self, signals: tuple[signal.Signals, ...] = HANDLED) -> None:
        self._pending: deque[signal.Signals] = deque()
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._previous = {sig: signal.signal(sig, self._handle) for sig in signals}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._pending.append(signal.Signals(signum))
        with contextlib.suppress(BlockingIOError):  # a full pipe: the loop will wake anyway
            os.write(self._write, b"\0")

    def fileno(self) -> int:
        """Readable while signals wait to be taken."""
        return self._read

    def take(self) -> list[signal.Signals]:
        """The signals received since the last call, oldest first."""
        try:
            while os.read(self._read, 512):
                pass
        except BlockingIOError:
            pass
        taken = []
        while self._pending:
            taken.append(self._pending.popleft())
        return taken

    def close(self) -> None:
        """Restore the previous handlers and close the pipe."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        os.close(self._read)
        os.close(self._write)
