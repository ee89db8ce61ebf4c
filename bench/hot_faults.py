"""The faults of `bench/hot.py`'s fault runs, struck once a run is under way.

- ``kill``: kill -9 the member (a supervisor, a share-group member) whose process handled the
  latest record, with every process under it at once: a host that crashes. Reported: the pids,
  and the longest pause after the kill between two records handled for the first time (a
  marshal group waits for the dead claim to go stale; a share group's other consumers go on,
  and the dead one's locked records wait for their locks to end); the same pause for a stop.
- ``stop``: SIGSTOP the worker process that handled the latest record (a marshal child, a share
  consumer) for `stop_seconds` (longer than its lease or record lock), then SIGCONT it.
  Reported: the lines it wrote after the SIGCONT, and how many of them after its lease or lock
  had ended (`hot_ledger.late`). A marshal child should write none: its supervisor kills it at
  its lease's end, and its own watchdog would.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from typing import Any

import psutil
from hot_ledger import Ledger, after
from hot_setup import HB_S

CONT_GRACE_S = 5.0  # after the SIGCONT, how long the run goes on for its late lines to show


def stop_seconds(lock_s: float | None) -> float:
    """How long a stop lasts: past the share lock, or the marshal lease (2 HB), by 5 s."""
    return max(lock_s or 0.0, 2 * HB_S) + 5.0


def tree(pid: int) -> list[int]:
    """``pid`` and every process under it."""
    with contextlib.suppress(psutil.Error):
        return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    return [pid]


class Fault:
    """One fault, struck once, and what it did (`report`)."""

    def __init__(self, kind: str, members: list[subprocess.Popen[bytes]], stop_s: float) -> None:
        if kind not in ("kill", "stop"):
            raise SystemExit(f"unknown fault {kind!r}: kill or stop")
        self.kind, self.members, self.stop_s = kind, members, stop_s
        self.struck_at: float | None = None  # monotonic
        self.struck_wall = 0.0
        self.pids: list[int] = []
        self.cont_at: float | None = None  # monotonic
        self.cont_wall = 0.0

    def step(self, ledger: Ledger, due: bool, now: float) -> None:
        """Strike when ``due`` (once); continue a stopped worker when its time is up."""
        if self.struck_at is None and due:
            target = ledger.latest_pid()
            if target is None:
                return
            self.struck_at, self.struck_wall = now, time.time()
            if self.kind == "kill":
                member = next((m for m in self.members if target in tree(m.pid)), self.members[0])
                self.pids = tree(member.pid)
                for pid in self.pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            else:
                self.pids = [target]
                with contextlib.suppress(ProcessLookupError):
                    os.kill(target, signal.SIGSTOP)
        stopped = self.kind == "stop" and self.struck_at is not None and self.cont_at is None
        if stopped and self.struck_at is not None and now - self.struck_at >= self.stop_s:
            self.release()
            self.cont_at = now

    def settled(self, now: float) -> bool:
        """Whether the run may end: the fault struck, and a stopped worker was continued a
        while ago (so that what it does then is in the ledger)."""
        if self.struck_at is None:
            return False
        continued = self.cont_at is not None and now - self.cont_at >= CONT_GRACE_S
        return self.kind == "kill" or continued

    def release(self) -> None:
        """SIGCONT a stopped worker (again, harmlessly, at the end of the run)."""
        if self.kind == "stop" and self.pids:
            if self.cont_at is None:
                self.cont_wall = time.time()
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pids[0], signal.SIGCONT)

    def report(self, ledger: Ledger) -> dict[str, Any]:
        if self.struck_at is None:
            return {"kind": self.kind, "struck": False}
        out: dict[str, Any] = {"kind": self.kind, "struck": True, "pids": self.pids}
        ends = sorted(r["end"] for r in ledger.first.values() if r["end"] > self.struck_wall)
        gaps = [b - a for a, b in zip([self.struck_wall, *ends], ends, strict=False)]
        out["longest_pause_s"] = max(gaps) if gaps else None
        if self.kind == "stop":
            out["stopped_s"] = self.stop_s
            out["after_cont"] = after(ledger, self.pids[0], self.cont_wall)
        return out
