"""Progress lines on stderr while the audit works, including what Spark is doing.

`Progress.step` prints one line with the time since the audit started. `Progress.watch`
runs a daemon thread that, while a step waits on Spark, prints the active stages' task counts
every few seconds (from the SparkContext's status tracker), so a long fold is visibly alive.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Sink = Callable[[str], None]


class Progress:
    """Timestamped progress lines to a sink (the CLI's stderr; tests pass a list's append)."""

    def __init__(self, sink: Sink, interval_s: float = 5.0) -> None:
        self.sink = sink
        self.interval_s = interval_s
        self.started = time.monotonic()

    def step(self, message: str) -> None:
        """One progress line."""
        self.sink(f"marshal-audit: [{time.monotonic() - self.started:6.1f}s] {message}")

    @contextmanager
    def watch(self, spark: SparkSession) -> Iterator[None]:
        """While the block runs, report Spark's active stages every ``interval_s``."""
        stop = threading.Event()
        thread = threading.Thread(target=self._tick, args=(spark, stop), daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(2)

    def _tick(self, spark: SparkSession, stop: threading.Event) -> None:
        last = ""
        while not stop.wait(self.interval_s):
            try:
                tracker = spark.sparkContext.statusTracker()
                parts = []
                for stage_id in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(stage_id)
                    if info is not None:
                        parts.append(
                            f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks"
                        )
            except Exception:  # the session may be stopping; progress is best effort
                return
            line = ", ".join(parts)
            if line and line != last:
                self.step(f"  spark: {line}")
            last = line


def silent(message: str) -> None:
    """A sink that drops progress lines."""
