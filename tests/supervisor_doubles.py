"""Stand-ins for a supervisor's children and data topics, for supervisor tests on a memory log.

A `FakeChild` is a child the test plays: the supervisor gets a real pipe end, the test the
other; signals are recorded and SIGKILL "ends" it. `patch_children` makes the supervisor start
these instead of processes.
"""

from __future__ import annotations

import itertools
import multiprocessing
import signal
from typing import Any

import pytest

from marshal_workers.childlink.sharedlease import SharedLease
from marshal_workers.ipc import messages as ipc
from marshal_workers.log.memlog import MemoryTopic
from marshal_workers.protocol.metadata import (
    METADATA_PARTITION,
    TOPIC_RECORD_KEY,
    TopicRecord,
    encode_metadata,
)
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.supervisor import runtime as runtime_module

MP = multiprocessing.get_context("spawn")
PIDS = itertools.count(2**22 + 1000)  # above any pid_max: signals to them go nowhere


class FakeChild:
    """A child the test plays: its pipe end, its spec, and what the supervisor did to it."""

    def __init__(self, spec: ipc.ChildSpec, lease: SharedLease) -> None:
        self.spec = spec
        self.lease = lease
        self.conn, self.peer = MP.Pipe(duplex=True)
        self.pid = next(PIDS)
        self.exitcode: int | None = None
        self.sentinel: int | None = None  # no exit fd: the supervisor looks every turn
        self.pipe_ended = False  # (`ChildHandle.pipe_ended`)
        self.signals: list[int] = []
        self.alone: list[int] = []  # of ``signals``, those sent to the child alone

    def send(self, msg: ipc.ToChild) -> bool:
        """What the supervisor says to the child; False once its pipe end is closed."""
        try:
            self.conn.send(msg)
        except OSError:
            return False
        return True

    def signal_group(self, sig: int) -> None:
        self.signals.append(sig)
        if sig == signal.SIGKILL:
            self.exitcode = -signal.SIGKILL

    def signal_child(self, sig: int) -> None:
        """(`ChildHandle.signal_child`: the child alone; recorded with the group's too.)"""
        self.signals.append(sig)
        self.alone.append(sig)

    def close(self) -> None:
        self.conn.close()

    def forget(self) -> None:
        """(`ChildHandle.forget`: a stand-in is no process multiprocessing would join.)"""

    def inbox(self) -> list[Any]:
        """What the supervisor sent so far."""
        out = []
        while self.peer.poll(0):
            out.append(self.peer.recv())
        return out

    def stop(self, next_offset: int) -> None:
        """Answer Stop: report the position and exit cleanly."""
        self.peer.send(ipc.Stopped(next_offset))
        self.exitcode = 0

    def answer_stop(self, next_offset: int) -> bool:
        """If the supervisor said Stop: report ``next_offset`` and exit; whether it did."""
        while self.exitcode is None and self.peer.poll(0):
            if isinstance(self.peer.recv(), ipc.Stop):
                self.stop(next_offset)
                return True
        return False


class FakeTopics:
    """A data topic ``orders`` of group ``g`` with some partitions, all empty."""

    def __init__(self, partitions: int) -> None:
        self.keys = [ClaimKey("g", "orders", p) for p in range(partitions)]

    def partitions(self) -> list[ClaimKey]:
        return list(self.keys)

    def watermarks(self, topic: str, partition: int, timeout_s: float = 10.0) -> tuple[int, int]:
        return 0, 0


def patch_children(monkeypatch: pytest.MonkeyPatch, started: list[FakeChild]) -> None:
    """Make supervisors start `FakeChild`ren, appended to ``started``."""

    def start_child(spec: ipc.ChildSpec, lease: SharedLease, mp: object) -> FakeChild:
        child = FakeChild(spec, lease)
        started.append(child)
        return child

    monkeypatch.setattr(runtime_module, "start_child", start_child)
    monkeypatch.setattr(runtime_module, "Spare", NoSpare)


class NoSpare:
    """A spare child (`supervisor.spare.Spare`) that starts nothing: every child is a fake."""

    def __init__(self, lease: SharedLease, since: float, log: object) -> None:
        self.lease, self.since, self.taken = lease, since, None

    def start(self, template: ipc.ChildSpec, mp: object) -> None:
        pass

    def take(self, spec: ipc.ChildSpec) -> None:
        return None

    def kill(self, say: bool = False) -> None:
        pass


def initialised(topic: MemoryTopic, client_id: str = "marshal-admin") -> MemoryTopic:
    """``topic`` as `marshal-admin init` leaves a coordination topic: its partition count
    recorded, which a supervisor checks before it claims anything."""
    record = TopicRecord(0, "init-test", client_id, topic.num_partitions)
    topic.append(METADATA_PARTITION, TOPIC_RECORD_KEY, encode_metadata(record))
    return topic
