"""The runtime survives what one claim's child or an observer does to it: on the
in-memory log with stand-in children the test plays."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping

import pytest

from marshal_workers.childlink.sharedlease import SharedLease
from marshal_workers.config.runconfig import RunConfig
from marshal_workers.core import inputs as inp
from marshal_workers.ipc import messages as ipc
from marshal_workers.log.memlog import MemoryLog, MemoryTopic
from marshal_workers.protocol.members import is_member_key
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.supervisor import runtime as runtime_module
from marshal_workers.supervisor.observe import ClaimSnapshot, Observer
from marshal_workers.supervisor.runtime import Supervisor
from tests.supervisor_doubles import MP, FakeChild, FakeTopics, NoSpare, initialised


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
    and tries partition 0 again after a back-off. The core hears that the child began nothing:
    its start as both its position and where it stopped (AMO hands what it was handed on)."""
    started: list[FakeChild] = []
    attempts: list[int] = []
    tried: list[int | None] = []

    def start_child(spec: ipc.ChildSpec, lease: SharedLease, mp: object) -> FakeChild:
        if spec.partition == 0:
            attempts.append(spec.partition)
            tried.append(spec.start_offset)
            raise OSError("Resource temporarily unavailable")
        child = FakeChild(spec, lease)
        started.append(child)
        return child

    monkeypatch.setattr(runtime_module, "start_child", start_child)
    sup = Supervisor(config(), MemoryLog(coordination()),
                     FakeTopics(2), MP, Observer())  # type: ignore[arg-type]  # fmt: skip
    exits: list[inp.ChildExited] = []
    feed = sup._feed

    def heard(what: inp.Input) -> None:
        if isinstance(what, inp.ChildExited) and what.key.partition == 0:
            exits.append(what)
        feed(what)

    monkeypatch.setattr(sup, "_feed", heard)
    sup.start(catch_up_timeout=5)
    try:
        run_until(sup, lambda: len(attempts) >= 2, "a second try at partition 0")
        assert data_children(sup) == {ClaimKey("g", "orders", 1)}
        assert not sup.done
        assert tried[0] is not None
        assert [(e.position, e.stopped_at) for e in exits[:1]] == [(tried[0], tried[0])]
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


class ExitShownByFd(FakeChild):
    """A stand-in whose end shows on an fd, as a real child's does (its exit fd: a fork server
    writes the status to it), and which counts how often its exit code is read."""

    def __init__(self, spec: ipc.ChildSpec, lease: SharedLease) -> None:
        self.read_end, self.write_end = os.pipe()
        self.code: int | None = None
        self.reads = 0
        self.killed_at: float | None = None
        super().__init__(spec, lease)
        self.sentinel = self.read_end

    @property
    def exitcode(self) -> int | None:
        self.reads += 1
        return self.code

    @exitcode.setter
    def exitcode(self, code: int | None) -> None:
        self.code = code

    def close(self) -> None:
        super().close()
        os.close(self.read_end)
        os.close(self.write_end)


def running_two(
    monkeypatch: pytest.MonkeyPatch, observer: Observer
) -> tuple[Supervisor, list[ExitShownByFd]]:
    started: list[ExitShownByFd] = []
    monkeypatch.setattr(
        runtime_module,
        "start_child",
        lambda spec, lease, mp: started.append(ExitShownByFd(spec, lease)) or started[-1],
    )
    monkeypatch.setattr(runtime_module, "Spare", NoSpare)  # every child a stand-in
    sup = Supervisor(config(), MemoryLog(coordination()),
                     FakeTopics(2), MP, observer)  # type: ignore[arg-type]  # fmt: skip
    sup.start(catch_up_timeout=5)
    run_until(sup, lambda: len(data_children(sup)) == 2, "both partitions running")
    return sup, started


def test_a_running_childs_exit_code_is_read_when_its_exit_fd_wakes_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not every turn (with 32 busy children that was a third of the loop's own CPU): the exit
    fd is waited on with the pipes, and the exit code read once it is ready."""
    monkeypatch.setattr(runtime_module, "EXIT_SWEEP_S", 3600.0)  # no sweep after the first
    sup, started = running_two(monkeypatch, Observer())
    try:
        first = next(c for c in started if c in sup.children.values())
        before = first.reads
        for _ in range(30):
            sup.step([], wait_s=0)
        assert first.reads == before  # running, its exit fd quiet: not looked at
        first.code = 0  # it ended, but its fd does not show it yet
        for _ in range(10):
            sup.step([], wait_s=0)
        assert first in sup.children.values()
        os.write(first.write_end, b"\0")  # the fork server reports the end
        sup.step([], wait_s=0)
        assert first not in sup.children.values()
    finally:
        sup.kill_all()


def test_every_childs_exit_code_is_read_at_each_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spawned child's exit fd is a pipe that a process it forked may hold open: the sweep
    finds its end all the same."""
    sup, started = running_two(monkeypatch, Observer())
    try:
        monkeypatch.setattr(runtime_module, "EXIT_SWEEP_S", 0.0)
        first = next(c for c in started if c in sup.children.values())
        first.code = 0  # ended; its exit fd never shows it
        sup.step([], wait_s=0)
        assert first not in sup.children.values()
    finally:
        sup.kill_all()


def test_a_child_this_supervisor_killed_is_looked_at_every_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its fork server may be stopped and never report the end (`ChildHandle.exitcode` then
    reads the kernel's status): its exit fd cannot be waited for."""
    monkeypatch.setattr(runtime_module, "EXIT_SWEEP_S", 3600.0)
    sup, started = running_two(monkeypatch, Observer())
    try:
        first = next(c for c in started if c in sup.children.values())
        first.killed_at = time.monotonic()
        sup.step([], wait_s=0)
        assert first in sup.children.values()
        first.code = -9  # what the kernel shows once its server is past reporting
        sup.step([], wait_s=0)
        assert first not in sup.children.values()
    finally:
        sup.kill_all()


def test_the_observers_see_a_snapshot_at_most_once_each_observe_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Counting(Observer):
        ticks = 0

        def tick(self, claims: Mapping[ClaimKey, ClaimSnapshot], healthy: bool) -> None:
            self.ticks += 1

    counting = Counting()
    sup, _ = running_two(monkeypatch, counting)
    try:
        monkeypatch.setattr(runtime_module, "OBSERVE_S", 3600.0)
        sup.step([], wait_s=0)
        seen = counting.ticks
        for _ in range(20):
            sup.step([], wait_s=0)
        assert counting.ticks == seen
        monkeypatch.setattr(runtime_module, "OBSERVE_S", 0.0)
        for _ in range(20):
            sup.step([], wait_s=0)
        assert counting.ticks == seen + 20
    finally:
        sup.kill_all()


def test_an_exit_fd_that_wakes_with_no_exit_to_read_is_no_longer_waited_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A spawned child whose handler closed every fd shows an end on its exit fd while it
    runs: waited on, that fd would wake every turn (a loop spinning on a core). It is dropped
    from the wait, the child's exit code looked at every turn instead, and its end still
    found."""
    monkeypatch.setattr(runtime_module, "EXIT_SWEEP_S", 3600.0)
    sup, started = running_two(monkeypatch, Observer())
    try:
        first = next(c for c in started if c in sup.children.values())
        os.close(first.write_end)  # the fd shows an end; the child runs on
        first.write_end = os.open(os.devnull, os.O_WRONLY)  # (for close())
        sup.step([], wait_s=0)
        assert first.sentinel is None
        assert first in sup.children.values()
        reads = first.reads
        sup.step([], wait_s=0)
        assert first.reads == reads + 1  # looked at every turn now
        first.code = 0
        sup.step([], wait_s=0)
        assert first not in sup.children.values()
    finally:
        sup.kill_all()


def test_a_running_childs_pipe_at_its_end_wakes_the_loop_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A handler that closes its child's end of the pipe (an fd it took for one of its own),
    and the child runs on until it next uses the pipe: waited on, the supervisor's end would
    be ready every turn (a loop spinning on a core). It is no longer waited on, and the
    child's exit is still found."""
    monkeypatch.setattr(runtime_module, "EXIT_SWEEP_S", 3600.0)
    woken: list[object] = []
    wait = runtime_module.LoopWait.wait

    def recording(self: runtime_module.LoopWait, objects: object, timeout: float) -> object:
        ready = wait(self, objects, timeout)  # type: ignore[arg-type]
        woken.extend(ready)
        return ready

    monkeypatch.setattr(runtime_module.LoopWait, "wait", recording)
    sup, started = running_two(monkeypatch, Observer())
    try:
        first = next(c for c in started if c in sup.children.values())
        first.peer.close()  # the child's end closed; the child runs on
        for _ in range(20):
            sup.step([], wait_s=0)
        assert woken.count(first.conn) == 1
        assert first in sup.children.values()
        os.write(first.write_end, b"\0")  # then it ends (its next use of the pipe failed)
        first.code = 0
        sup.step([], wait_s=0)
        assert first not in sup.children.values()
    finally:
        sup.kill_all()


def test_a_failure_while_a_childs_message_is_carried_out_keeps_its_pipe_waited_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An OSError while the core's commands for a message are carried out (a log line to a
    full stderr set non-blocking, say) is not the pipe's end: the child's later messages are
    still read at the next turns (a review: its pipe was dropped from the wait for good)."""
    monkeypatch.setattr(runtime_module, "EXIT_SWEEP_S", 3600.0)
    sup, started = running_two(monkeypatch, Observer())
    try:
        first = next(c for c in started if c in sup.children.values())
        feed = sup._feed
        failed: list[object] = []

        def failing_once(event: object) -> None:
            if isinstance(event, inp.ChildSaid) and not failed:
                failed.append(event)
                raise BlockingIOError("stderr full")
            feed(event)  # type: ignore[arg-type]

        monkeypatch.setattr(sup, "_feed", failing_once)
        first.peer.send(ipc.Progress(1))
        sup.step([], wait_s=0)
        assert failed
        first.peer.send(ipc.Progress(2))
        for _ in range(5):
            sup.step([], wait_s=0)
        assert not first.conn.poll(0)  # read
    finally:
        sup.kill_all()
