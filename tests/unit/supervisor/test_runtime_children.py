"""The runtime survives what one claim's child or an observer does to it: on the
in-memory log with stand-in children the test plays."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from marshal_workers.childlink.sharedlease import SharedLease
from marshal_workers.config.runconfig import RunConfig
from marshal_workers.ipc import messages as ipc
from marshal_workers.log.memlog import MemoryLog, MemoryTopic
from marshal_workers.protocol.members import is_member_key
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.supervisor import runtime as runtime_module
from marshal_workers.supervisor.observe import Observer
from marshal_workers.supervisor.runtime import Supervisor
from tests.supervisor_doubles import MP, FakeChild, FakeTopics, initialised


def config() -> RunConfig:
    return RunConfig(
        handler="marshal_workers.plugins.ledger:handle",
        mode=Mode.ALO,
        topics=("orders",),
        group="g",
        client_id="c1",
        heartbeat_interval=1.0,
    )


def run_until(sup: Supervisor, check: Callable[[], bool], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        sup.step([], wait_s=0.02)


def data_children(sup: Supervisor) -> set[ClaimKey]:
    return {k for k in sup.children if not is_member_key(k)}


def test_a_child_that_cannot_be_started_costs_only_its_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fork fails for partition 0 (a process limit): partition 1 runs, the supervisor goes on
    and tries partition 0 again after a back-off."""
    started: list[FakeChild] = []
    attempts: list[int] = []

    def start_child(spec: ipc.ChildSpec, lease: SharedLease, mp: object) -> FakeChild:
        if spec.partition == 0:
            attempts.append(spec.partition)
            raise OSError("Resource temporarily unavailable")
        child = FakeChild(spec, lease)
        started.append(child)
        return child

    monkeypatch.setattr(runtime_module, "start_child", start_child)
    sup = Supervisor(config(), MemoryLog(coordination()),
                     FakeTopics(2), MP, Observer())  # type: ignore[arg-type]  # fmt: skip
    sup.start(catch_up_timeout=5)
    try:
        run_until(sup, lambda: len(attempts) >= 2, "a second try at partition 0")
        assert data_children(sup) == {ClaimKey("g", "orders", 1)}
        assert not sup.done
    finally:
        sup.kill_all()


def test_an_observer_that_raises_is_logged_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    """A metrics bug does not take the claims down."""

    class Broken(Observer):
        def claim_won(self, key: ClaimKey, token: int) -> None:
            raise RuntimeError("metrics bug")

    started: list[FakeChild] = []
    monkeypatch.setattr(
        runtime_module,
        "start_child",
        lambda spec, lease, mp: started.append(FakeChild(spec, lease)) or started[-1],
    )
    sup = Supervisor(config(), MemoryLog(coordination()),
                     FakeTopics(2), MP, Broken())  # type: ignore[arg-type]  # fmt: skip
    sup.start(catch_up_timeout=5)
    try:
        run_until(sup, lambda: len(data_children(sup)) == 2, "both partitions running")
    finally:
        sup.kill_all()


def coordination() -> MemoryTopic:
    return initialised(MemoryTopic(2, lambda: int(time.time() * 1000)))
