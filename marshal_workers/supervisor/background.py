"""Blocking broker calls off the supervisor's loop: start positions, partition discovery, the
coordination log's end.

A lookup on a partition whose leader is offline can take seconds; the loop must keep
heartbeating every other claim meanwhile. Calls run on a small thread pool and their answers
(already shaped as the core's inputs) are collected by the loop each turn.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from marshal_workers.core import inputs as inp

Job = Callable[[], inp.Input | None]  # None: nothing for the core (a failure it retries)


class Background:
    """Runs jobs on worker threads; `results` hands their inputs to the loop."""

    def __init__(self, workers: int = 4) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="marshal-io")
        self._lock = threading.Lock()
        self._done: list[inp.Input] = []

    def submit(self, job: Job) -> None:
        """Run ``job`` on a worker; its input comes out of `results` when it is done."""

        def run() -> None:
            result = job()
            if result is None:
                return
            with self._lock:
                self._done.append(result)

        self._pool.submit(run)

    def results(self) -> list[inp.Input]:
        """The inputs of the jobs finished since the last call."""
        with self._lock:
            out, self._done = self._done, []
        return out

    def close(self) -> None:
        """Stop taking jobs; running ones finish in the background."""
        self._pool.shutdown(wait=False, cancel_futures=True)
