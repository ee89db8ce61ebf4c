"""What the child tests share (`test_child`, `test_child_failures`): the test plays the
supervisor of a real child, keeping its lease and reading its pipe, and reads what the ledger
plugin wrote."""

from __future__ import annotations

import multiprocessing
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from marshal_workers.child.main import ChildHandle, start_child
from marshal_workers.childlink.sharedlease import SharedLease
from marshal_workers.common import leaseclock
from marshal_workers.common.ledgerfile import DIR_ENV
from marshal_workers.ipc.messages import ChildSpec, ToSupervisor

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

    def expect(self, kind: type[M], timeout: float = WAIT_S) -> M:
        """The next message of type ``kind`` (earlier ones are kept in ``received``)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if not self.handle.conn.poll(left):
                break
            try:
                msg = self.handle.conn.recv()
            except EOFError:
                pytest.fail(f"child exited ({self.wait_exit(5)}) before {kind.__name__}")
            self.received.append(msg)
            if isinstance(msg, kind):
                return msg
        pytest.fail(f"no {kind.__name__} within {timeout} s; got {self.received}")

    def drain(self) -> None:
        """Keep whatever is in the pipe now (non-blocking)."""
        try:
            while self.handle.conn.poll(0):
                self.received.append(self.handle.conn.recv())
        except EOFError:
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


@pytest.fixture
def ledger_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The ledger directory, in the environment children inherit."""
    path = tmp_path / "ledger"
    monkeypatch.setenv(DIR_ENV, str(path))
    return path


@pytest.fixture
def spawn() -> Iterator[Callable[[ChildSpec], Supervised]]:
    """Start children with a kept lease; kill whatever is left at the end."""
    started: list[Supervised] = []

    def run(spec: ChildSpec) -> Supervised:
        lease = SharedLease(MP)
        child = Supervised(start_child(spec, lease, MP), LeaseKeeper(lease))
        started.append(child)
        return child

    yield run
    for child in started:
        child.keeper.freeze()
        child.handle.signal_group(signal.SIGKILL)
        child.handle.join(10)
        child.handle.close()
