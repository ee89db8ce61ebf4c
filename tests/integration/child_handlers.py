"""Handlers used by tests/integration/test_child.py (loaded by the spawned children)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

from marshal_workers.childlink.forkserver import FORK_SERVER_PID
from marshal_workers.childlink.schedgroup import session_group_nice
from marshal_workers.handler import Context, Record

PID_FILE_ENV = "CHILD_TEST_PID_FILE"
EVENTS_ENV = "CHILD_TEST_EVENTS"
GC_ENV = "CHILD_TEST_GC"  # CollectorRecorder: thresholds its setup sets ("a,b,c")


def spawn_sleep(record: Record, ctx: Context) -> None:
    """Start `sleep 60` (in the child's process group), write its pid, then hang."""
    sleeper = subprocess.Popen(["sleep", "60"])
    path = os.environ[PID_FILE_ENV]
    with open(path + ".tmp", "w") as out:
        out.write(str(sleeper.pid))
    os.replace(path + ".tmp", path)
    while True:
        time.sleep(0.1)


class Recorder:
    """A class-based plugin that writes what was called to $CHILD_TEST_EVENTS (JSON lines)."""

    def __init__(self) -> None:
        self.path = os.environ[EVENTS_ENV]

    def _event(self, *fields: object) -> None:
        with open(self.path, "a") as out:
            out.write(json.dumps(fields) + "\n")

    def setup(self, ctx: Context) -> None:
        """Note the setup and the token it ran under."""
        self._event("setup", ctx.fencing_token)

    def handle_batch(self, records: Sequence[Record], ctx: Context) -> None:
        """Note the batch's offsets."""
        self._event("batch", [r.offset for r in records])

    def teardown(self, ctx: Context, reason: str) -> None:
        """Note the teardown and its reason."""
        self._event("teardown", reason)


class MessageRecorder(Recorder):
    """`Recorder` taking the consumer's messages (``batch_view = "messages"``): notes each
    batch's offsets and the class of what it was given."""

    batch_view = "messages"

    def handle_batch(self, messages: Sequence[Any], ctx: Context) -> None:  # type: ignore[override]
        """Note the batch's offsets and what the items are."""
        self._event("batch", [m.offset() for m in messages])
        self._event("types", sorted({type(m).__name__ for m in messages}))


class NiceRecorder(Recorder):
    """`Recorder` noting the nice value its setup and each batch run at (this thread's), and
    at each batch the nice value of each of the child's other threads by name (the watchdog,
    the consumer's)."""

    def setup(self, ctx: Context) -> None:
        self._event("nice_at_setup", os.getpriority(os.PRIO_PROCESS, 0))

    def handle_batch(self, records: Sequence[Record], ctx: Context) -> None:
        me = threading.get_native_id()
        python = {t.native_id: t.name for t in threading.enumerate()}  # (3.11 names no OS thread)
        others: dict[str, int] = {}
        for tid in os.listdir(f"/proc/{os.getpid()}/task"):
            if int(tid) == me:
                continue
            with open(f"/proc/{os.getpid()}/task/{tid}/comm") as comm:
                name = f"{python.get(int(tid)) or comm.read().strip()}/{tid}"
            others[name] = os.getpriority(os.PRIO_PROCESS, int(tid))
        self._event("nice", os.getpriority(os.PRIO_PROCESS, 0), others)


class SlowFirstNiceRecorder(Recorder):
    """`Recorder` whose first batch takes ``SLOW_FIRST_S``: notes the nice of its thread at
    the start and at the end of each batch."""

    SLOW_FIRST_S = 2.0

    def __init__(self) -> None:
        super().__init__()
        self.first = True

    def setup(self, ctx: Context) -> None:
        self._event("nice_at_setup", os.getpriority(os.PRIO_PROCESS, 0))

    def handle_batch(self, records: Sequence[Record], ctx: Context) -> None:
        before = os.getpriority(os.PRIO_PROCESS, 0)
        if self.first:
            self.first = False
            time.sleep(self.SLOW_FIRST_S)
        self._event("nice", before, os.getpriority(os.PRIO_PROCESS, 0))


class SessionRecorder(Recorder):
    """`Recorder` noting at each batch the child's session, the fork server's pid (None: not a
    fork server's child) and the nice of the session's autogroup (None: none here)."""

    def handle_batch(self, records: Sequence[Record], ctx: Context) -> None:
        self._event("session", os.getsid(0), FORK_SERVER_PID, session_group_nice())


class CollectorRecorder(Recorder):
    """`Recorder` noting the cyclic collector's thresholds its setup found and those its batch
    runs under; with $CHILD_TEST_GC set (`GC_ENV`) its setup sets its own first."""

    def setup(self, ctx: Context) -> None:
        self._event("gc_at_setup", list(gc.get_threshold()))
        own = os.environ.get(GC_ENV)
        if own:
            gc.set_threshold(*(int(x) for x in own.split(",")))

    def handle_batch(self, records: Sequence[Record], ctx: Context) -> None:
        self._event("gc", list(gc.get_threshold()), gc.get_freeze_count() > 0)
