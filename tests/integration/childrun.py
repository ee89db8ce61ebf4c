"""The child tests' harness (`test_child`, `test_child_failures`, `test_child_liveness`): the
test plays the supervisor of a real child, keeping its lease and reading its pipe, writes the
records it handles, and reads what the ledger plugin and the dead-letter topic got. The fixtures
that use it (`spawn`, `ledger_dir`, `topic`) are in `conftest`."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import psutil
import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition

from marshal_workers.child.deadletters import PREFIX
from marshal_workers.childlink.sharedlease import SharedLease
from marshal_workers.common import leaseclock
from marshal_workers.common.ledgerfile import read_ledger
from marshal_workers.ipc.messages import ChildSpec, Grant, GrantRequest, ToSupervisor
from marshal_workers.protocol.modes import Mode
from marshal_workers.supervisor.childprocess import ChildHandle

PARTITION = 1  # the partition the child under test owns
MP = multiprocessing.get_context("spawn")
LEASE_S = 2.5  # the lease a "supervisor" grants on each extension
WAIT_S = 20.0  # bound on waiting for a child's next message (spawn + connect on a busy host)
M = TypeVar("M")


class LeaseKeeper:
    """A "supervisor" heartbeat: extends the lease to now + LEASE_S every 0.1 s until frozen
    (on the lease clock the child's watchdog reads, as the supervisor's is)."""

    def __init__(self, lease: SharedLease) -> None:
        self.lease = lease
        self._frozen = threading.Event()
        lease.extend_to(leaseclock.now() + LEASE_S)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._frozen.wait(0.1):
            self.lease.extend_to(leaseclock.now() + LEASE_S)

    def freeze(self) -> float:
        """Stop extending (the supervisor hangs); the deadline the lease is left with."""
        self._frozen.set()
        self._thread.join()
        return self.lease.deadline


class Supervised:
    """One child as its supervisor sees it: every message received, in order."""

    def __init__(self, handle: ChildHandle, keeper: LeaseKeeper) -> None:
        self.handle = handle
        self.keeper = keeper
        self.received: list[ToSupervisor] = []
        self._scanned = 0  # how much of ``received`` `expect` has looked through
        self.granted: set[int] = set()  # the requests `grant_all` has granted

    def expect(self, kind: type[M], timeout: float = WAIT_S) -> M:
        """The next message of type ``kind`` (earlier ones are kept in ``received``): one that
        `of` or `drain` read first is found there, not waited for."""
        while self._scanned < len(self.received):
            msg = self.received[self._scanned]
            self._scanned += 1
            if isinstance(msg, kind):
                return msg
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if not self.handle.conn.poll(left):
                break
            try:
                msg = self.handle.conn.recv()
            except EOFError:
                pytest.fail(f"child exited ({self.wait_exit(5)}) before {kind.__name__}")
            self.received.append(msg)
            self._scanned = len(self.received)
            if isinstance(msg, kind):
                return msg
        pytest.fail(f"no {kind.__name__} within {timeout} s; got {self.received}")

    def drain(self) -> None:
        """Keep whatever is in the pipe now (non-blocking)."""
        try:
            while self.handle.conn.poll(0):
                self.received.append(self.handle.conn.recv())
        except (EOFError, OSError):  # the child has ended
            pass

    def wait_exit(self, timeout: float = WAIT_S) -> int:
        """The child's exit code, waiting at most ``timeout``."""
        code = self.handle.join(timeout)
        assert code is not None, f"child {self.handle.pid} still running after {timeout} s"
        self.drain()
        return code

    def of(self, kind: type[M]) -> list[M]:
        """The received messages of one type."""
        self.drain()
        return [m for m in self.received if isinstance(m, kind)]


def grant_all(child: Supervised, until: Callable[[], bool], timeout: float = WAIT_S) -> None:
    """AMO supervisor: grant every GrantRequest until ``until()`` or the child exits. A request
    is granted wherever it was read: ``until`` may read the pipe itself (`Supervised.of`), and a
    request it read and nobody granted left the child waiting for ever (a CI run did)."""
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, f"timed out; got {child.received}"
        if child.handle.exitcode is not None:
            child.drain()
            return
        try:
            if child.handle.conn.poll(0.05):
                child.received.append(child.handle.conn.recv())
        except (EOFError, OSError):  # the child has ended (a reset pipe, as a closed one)
            return
        for msg in child.received:
            if isinstance(msg, GrantRequest) and msg.request_id not in child.granted:
                if not child.handle.send(Grant(msg.request_id, granted=True)):
                    return  # the child has ended meanwhile: the grant never reached it
                child.granted.add(msg.request_id)


def produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    """Produce ``counts[p]`` records to each partition ``p`` (values ``p:offset``)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, count in counts.items():
        for i in range(count):
            producer.produce(topic, value=f"{partition}:{i}".encode(), partition=partition)
    assert producer.flush(15) == 0


def make_spec(bootstrap: str, topic: str, **changes: object) -> ChildSpec:
    """A ledger child for ``PARTITION`` of ``topic``, ALO from offset 0; ``changes`` override.
    AMO reserves one batch at a time here (``amo_window`` = 2 batches) unless a test says."""
    spec = ChildSpec(
        handler="marshal_workers.plugins.ledger:handle",
        mode=Mode.ALO,
        bootstrap_servers=bootstrap,
        group_id="child-test",
        client_id="c1",
        instance_id="c1-1",
        topic=topic,
        partition=PARTITION,
        start_offset=0,
        fencing_token=42,
        batch_size=10,
        batch_timeout_s=0.1,
    )
    spec = replace(spec, **changes)  # type: ignore[arg-type]
    if "amo_window" not in changes:
        spec = replace(spec, amo_window=2 * spec.batch_size)
    return spec


def wait_for(condition: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    """Poll ``condition`` every 20 ms until true; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def offsets(directory: Path) -> list[int]:
    """The offsets in the ledger, in order."""
    return [r.offset for r in read_ledger(directory)] if directory.exists() else []


def gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie waiting for its reaper counts as ended)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def read_topic(bootstrap: str, name: str, expect: int, timeout: float = 15.0) -> list[Message]:
    """The records of partition 0 of ``name``, waiting for at least ``expect`` of them (then a
    little longer, to see any extra)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "dlq-reader", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(name, 0, 0)])
    found: list[Message] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(100, 0.2):
                if msg.error() is None:
                    found.append(msg)
            if len(found) >= expect:
                deadline = min(deadline, time.monotonic() + 0.5)
    finally:
        consumer.close()
    return found


def headers_of(msg: Message) -> dict[str, str | None]:
    """The marshal.dlq.* headers of a dead letter, as text, without the prefix."""
    return {
        k.removeprefix(PREFIX): None if v is None else v.decode()
        for k, v in msg.headers() or []
        if k.startswith(PREFIX)
    }
