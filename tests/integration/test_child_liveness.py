"""A child's liveness on a real broker, with real processes and real signals: the
handler deadline and keepalive, every way a handler can leave the child, and the process group
dying with the child on every path. The test plays the supervisor (see `conftest`); what the
supervisor concludes from an exit is `exitpolicy.read_end`, called here as it calls it."""

from __future__ import annotations

import base64
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import psutil
import pytest

from marshal_workers.common import leaseclock
from marshal_workers.core.childexits import ChildEnd, read_end
from marshal_workers.ipc.exits import (
    EXIT_HANDLER_ENDED,
    EXIT_HANDLER_TIMEOUT,
    EXIT_LEASE_EXPIRED,
)
from marshal_workers.ipc.messages import Progress, Started, Stop, Stopped
from tests.integration import liveness_handlers as lh
from tests.integration.childrun import (
    PARTITION,
    Supervised,
    gone,
    headers_of,
    make_spec,
    offsets,
    produce,
    read_topic,
    wait_for,
)
from tests.integration.fleet import REPO

pytestmark = pytest.mark.kafka

AT = 3  # the offset the handler misbehaves on
COUNT = 8
HANDLER = "tests.integration.liveness_handlers:handle"


@pytest.fixture
def misbehave(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., Path]:
    """Make the handler misbehave on offset AT as ``how`` says, starting a helper process
    first; the helper's pid file."""

    def set_how(how: str) -> Path:
        pid_file = tmp_path / "helper.pid"
        monkeypatch.setenv(lh.AT_ENV, str(AT))
        monkeypatch.setenv(lh.HOW_ENV, how)
        monkeypatch.setenv(lh.HELPER_ENV, str(pid_file))
        return pid_file

    return set_how


spec = partial(make_spec, handler=HANDLER, retries=0, retry_backoff_s=0.05)


def helper_pid(pid_file: Path) -> int:
    wait_for(pid_file.exists, "the handler's helper pid")
    pid = int(pid_file.read_text())
    assert psutil.Process(pid).name() == "sleep"
    return pid


def end_of(child: Supervised, timeout: float) -> ChildEnd:
    """Wait for the child's exit; what the supervisor reads from it (it sent no signal)."""
    status = child.wait_exit(timeout)
    note = child.keeper.lease.calls.take_end_note()
    return read_end(status, note, killed_by_supervisor=False, now=leaseclock.now())


# ---------------------------------------------------------------- 1. the handler deadline


class TestHandlerDeadline:
    def test_a_hung_call_is_killed_at_the_timeout_with_its_process_group(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        misbehave: Callable[..., Path],
    ) -> None:
        """Lease kept fresh, handler hung on AT: the child ends with 10 about one timeout
        after the call began, its helper with it, and the supervisor learns the offset."""
        pid_file = misbehave("hang")
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        child = spawn(spec(kafka_bootstrap, topic, handler_timeout_s=1.0))
        helper = helper_pid(pid_file)
        began = time.monotonic()
        end = end_of(child, timeout=10)
        assert end.code == EXIT_HANDLER_TIMEOUT
        assert end.failed is not None and end.failed.offset == AT
        assert end.spent_s is not None and end.spent_s >= 0.9
        assert time.monotonic() - began < 5
        wait_for(lambda: gone(helper), "the helper to die with the child", timeout=2.0)
        assert offsets(ledger_dir) == list(range(AT))

    def test_keepalive_lets_a_long_call_finish(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        misbehave: Callable[..., Path],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A call that works 3 timeouts long but calls ctx.keepalive() is not killed."""
        misbehave("keepalive")
        monkeypatch.setenv(lh.KEEPALIVE_ENV, "3.0")
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        child = spawn(spec(kafka_bootstrap, topic, handler_timeout_s=1.0))
        while child.expect(Progress).next_offset < COUNT:
            pass
        assert child.handle.exitcode is None
        assert offsets(ledger_dir) == list(range(COUNT))

    def test_without_keepalive_the_same_call_is_killed(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        misbehave: Callable[..., Path],
    ) -> None:
        """The control: a call that sleeps past the timeout without keepalive ends with 10."""
        misbehave("hang")
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        child = spawn(spec(kafka_bootstrap, topic, handler_timeout_s=1.0))
        assert end_of(child, timeout=10).code == EXIT_HANDLER_TIMEOUT

    @pytest.mark.parametrize("policy", ["dlq", "skip"])
    def test_the_next_child_settles_the_record_by_the_policy(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        misbehave: Callable[..., Path],
        policy: str,
    ) -> None:
        """After a timeout kill, the next child (given the settle) dead-letters or skips AT
        with the timeout as its error, without calling the handler on it, and goes on."""
        misbehave("hang")
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        first = spawn(spec(kafka_bootstrap, topic, handler_timeout_s=1.0, on_failure=policy))
        end = end_of(first, timeout=10)
        assert end.failed is not None
        second = spawn(
            spec(
                kafka_bootstrap,
                topic,
                handler_timeout_s=1.0,
                on_failure=policy,
                start_offset=end.failed.offset,
                settle=end.failed,
            )
        )
        assert second.expect(Started).position == AT
        while second.expect(Progress).next_offset < COUNT:
            pass
        assert offsets(ledger_dir) == [o for o in range(COUNT) if o != AT]
        letters = read_topic(kafka_bootstrap, f"{topic}.dlq", 1 if policy == "dlq" else 0, 2.0)
        if policy == "dlq":
            (letter,) = letters
            headers = headers_of(letter)
            assert headers["source.offset"] == str(AT)
            assert headers["error.type"] == "marshal_workers.handler.errors.HandlerEnded"
            assert "timed out" in (headers["error.message"] or "")
        else:
            assert letters == []


# ---------------------------------------------------------------- 4. every way out of a handler


class TestHandlerExits:
    @pytest.mark.parametrize(
        "how", ["sys_exit_0", "sys_exit_4", "keyboard_interrupt", "generator_exit"]
    )
    def test_a_raised_base_exception_goes_through_the_policy(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        misbehave: Callable[..., Path],
        how: str,
    ) -> None:
        """SystemExit(0/4), KeyboardInterrupt, GeneratorExit from the handler: a failure; with
        skip the record is skipped and the child goes on (it does not exit)."""
        misbehave(how)
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        child = spawn(spec(kafka_bootstrap, topic, on_failure="skip"))
        while child.expect(Progress).next_offset < COUNT:
            pass
        assert child.handle.exitcode is None
        assert offsets(ledger_dir) == [o for o in range(COUNT) if o != AT]

    @pytest.mark.parametrize("how", ["os_exit_0", "os_exit_4", "sigkill", "sigterm"])
    def test_a_handler_that_ends_the_process_is_blamed_for_its_record(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        misbehave: Callable[..., Path],
        how: str,
    ) -> None:
        """os._exit(0/4) or a signal mid-call: the supervisor reads a handler ending on AT (so
        the policy applies to it), and the helper the handler started dies with the child."""
        pid_file = misbehave(how)
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        child = spawn(spec(kafka_bootstrap, topic, on_failure="skip"))
        helper = helper_pid(pid_file)
        end = end_of(child, timeout=10)
        assert end.code == EXIT_HANDLER_ENDED
        assert end.failed is not None and (end.failed.offset, end.failed.end) == (AT, AT + 1)
        wait_for(lambda: gone(helper), "the helper to die with the child", timeout=2.0)


# ---------------------------------------------------------------- 5. the group dies on every fence


class TestGroupFencing:
    def test_lease_expiry_ends_the_handlers_helper(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        misbehave: Callable[..., Path],
    ) -> None:
        """A frozen supervisor (the lease is no longer extended): the helper is gone by the
        lease deadline (plus the watchdog's tick and the guardian's kill)."""
        pid_file = misbehave("hang")
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        child = spawn(spec(kafka_bootstrap, topic, handler_timeout_s=600.0))
        helper = helper_pid(pid_file)
        deadline = child.keeper.freeze()
        assert child.wait_exit(deadline - leaseclock.now() + 5) == EXIT_LEASE_EXPIRED
        wait_for(lambda: gone(helper), "the helper to die", timeout=0.5)
        assert leaseclock.now() < deadline + 1.0

    def test_a_revoked_lease_ends_the_handlers_helper(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        misbehave: Callable[..., Path],
    ) -> None:
        """Revoke (the claim was lost): the child and its helper end without any signal."""
        pid_file = misbehave("hang")
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        child = spawn(spec(kafka_bootstrap, topic, handler_timeout_s=600.0))
        helper = helper_pid(pid_file)
        child.keeper.freeze()
        child.keeper.lease.revoke()
        assert child.wait_exit(5) == EXIT_LEASE_EXPIRED
        wait_for(lambda: gone(helper), "the helper to die", timeout=1.0)

    def test_supervisor_death_ends_the_handlers_helper(
        self, kafka_bootstrap: str, topic: str, ledger_dir: Path, tmp_path: Path
    ) -> None:
        """SIGKILL of the child's parent: the child dies (parent-death signal) and so does the
        helper its handler started (the group guardian)."""
        pid_file = tmp_path / "helper.pid"
        script = (
            "import base64, multiprocessing, pickle, sys, time\n"
            "from marshal_workers.supervisor.childprocess import start_child\n"
            "from marshal_workers.childlink.sharedlease import SharedLease\n"
            "from marshal_workers.common import leaseclock\n"
            "ctx = multiprocessing.get_context('spawn')\n"
            "lease = SharedLease(ctx)\n"
            "lease.extend_to(leaseclock.now() + 120)\n"
            "handle = start_child(pickle.loads(base64.b64decode(sys.argv[1])), lease, ctx)\n"
            "print(handle.pid, flush=True)\n"
            "time.sleep(120)\n"
        )
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        child_spec = make_spec(
            kafka_bootstrap, topic, handler="tests.integration.liveness_handlers:helper_then_ledger"
        )
        encoded = base64.b64encode(pickle.dumps(child_spec)).decode()
        env = {**os.environ, "PYTHONPATH": str(REPO), lh.HELPER_ENV: str(pid_file)}
        parent = subprocess.Popen(
            [sys.executable, "-c", script, encoded], stdout=subprocess.PIPE, text=True, env=env
        )
        child_pid = helper = 0
        try:
            assert parent.stdout is not None
            child_pid = int(parent.stdout.readline())
            helper = helper_pid(pid_file)
            parent.kill()
            parent.wait(10)
            wait_for(lambda: gone(child_pid), "the orphaned child to die", timeout=2.0)
            wait_for(lambda: gone(helper), "the helper to die", timeout=2.0)
        finally:
            parent.kill()
            parent.wait(10)
            for pid in (child_pid, helper):
                if pid and not gone(pid):
                    os.kill(pid, signal.SIGKILL)

    def test_a_clean_stop_ends_the_handlers_helper(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Every child exit ends the group: even after a graceful Stop (exit 0)."""
        pid_file = tmp_path / "helper.pid"
        monkeypatch.setenv(lh.HELPER_ENV, str(pid_file))
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        child = spawn(
            make_spec(
                kafka_bootstrap,
                topic,
                handler="tests.integration.liveness_handlers:helper_then_ledger",
            )
        )
        helper = helper_pid(pid_file)
        child.handle.send(Stop())
        child.expect(Stopped)
        assert child.wait_exit() == 0
        wait_for(lambda: gone(helper), "the helper to die", timeout=1.0)
