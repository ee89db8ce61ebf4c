"""The child process on a real broker, with real processes; the test plays the supervisor.

Each test creates a fresh data topic (three partitions), produces records to it, spawns one
child with `start_child` and talks to it over its pipe. What the child processed is read from
the ledger plugin's files (`plugins/ledger.py`).
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from marshal_workers.child.loop import GC_THRESHOLDS
from marshal_workers.child.main import (
    EXIT_HANDLER_FAILED,
    EXIT_LEASE_EXPIRED,
    EXIT_NOT_GRANTED,
    EXIT_SETUP,
)
from marshal_workers.common import leaseclock
from marshal_workers.common.ledgerfile import find_duplicates, read_ledger
from marshal_workers.ipc.messages import (
    ChildSpec,
    Grant,
    GrantRequest,
    HandlerFailed,
    Progress,
    Started,
    Stats,
    Stop,
    Stopped,
)
from marshal_workers.plugins import ledger
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.reservations import GROWTH
from tests.integration import child_handlers
from tests.integration.childrun import (
    PARTITION,
    Supervised,
    gone,
    grant_all,
    make_spec,
    offsets,
    produce,
    wait_for,
)

pytestmark = pytest.mark.kafka

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- at-least-once


class TestAtLeastOnce:
    def test_handles_its_partition_from_the_start_offset(
        self, kafka_bootstrap: str, topic: str, ledger_dir: Path, spawn: Callable[..., Supervised]
    ) -> None:
        """From start_offset on, each record of its partition is handled once, then reported."""
        produce(kafka_bootstrap, topic, {0: 5, PARTITION: 25, 2: 5})
        child = spawn(make_spec(kafka_bootstrap, topic, start_offset=3))
        assert child.expect(Started).position == 3
        while child.expect(Progress).next_offset < 25:
            pass
        assert offsets(ledger_dir) == list(range(3, 25))
        rows = read_ledger(ledger_dir)
        assert {(r.partition, r.token, r.client_id) for r in rows} == {(1, 42, "c1")}
        assert not find_duplicates(rows)

    @pytest.mark.parametrize(("reset", "position"), [("earliest", 0), ("latest", 4)])
    def test_without_start_offset_the_reset_policy_picks_a_watermark(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        reset: str,
        position: int,
    ) -> None:
        """No start offset: Started reports the low (earliest) or high (latest) watermark."""
        produce(kafka_bootstrap, topic, {PARTITION: 4})
        spec = make_spec(kafka_bootstrap, topic, start_offset=None, auto_offset_reset=reset)
        child = spawn(spec)
        assert child.expect(Started).position == position
        if reset == "earliest":
            child.expect(Progress)
        child.handle.send(Stop())
        assert child.expect(Stopped).next_offset == 4
        assert child.wait_exit() == 0


# ---------------------------------------------------------------- at-most-once


class TestAtMostOnce:
    def test_the_first_reservation_is_one_record_then_runs_sized_by_time_across_batches(
        self, kafka_bootstrap: str, topic: str, ledger_dir: Path, spawn: Callable[..., Supervised]
    ) -> None:
        """With a window of 40 records and batches of 5: the first request covers one record
        and nothing is asked ahead of it (the time per record is unknown: a crash must not
        lose a batch of slow records); once it is handled, a request covers at most `GROWTH`
        times the run handled (4: a one-record run's time says little on a busy host), and one
        more is asked ahead; then the runs grow to what was fetched from there, a part of one
        batch and the next ones, up to 20 records (half the window; the test handler takes far
        less than half a second for them); granted, every record is handled once."""
        produce(kafka_bootstrap, topic, {PARTITION: 60})
        child = spawn(make_spec(kafka_bootstrap, topic, mode=Mode.AMO, batch_size=5, amo_window=40))
        first = child.expect(GrantRequest)
        assert (first.start, first.end) == (0, 1)
        time.sleep(0.3)  # (a window in which nothing may be asked ahead)
        child.drain()
        assert child.of(GrantRequest) == [first]
        child.handle.send(Grant(first.request_id, granted=True))
        second = child.expect(GrantRequest)  # asked once the first run was handled
        assert (second.start, second.end) == (1, 1 + GROWTH)
        third = child.expect(GrantRequest)  # and one ahead, before the second's answer
        assert (third.start, third.end) == (second.end, second.end + GROWTH)
        child.handle.send(Grant(second.request_id, granted=True))
        fourth = child.expect(GrantRequest)  # the second's run of 4 handled: up to 16, 2+ batches
        assert fourth.start == third.end and 5 < fourth.end - fourth.start <= 4 * GROWTH
        child.handle.send(Grant(third.request_id, granted=True))
        child.handle.send(Grant(fourth.request_id, granted=True))
        wait_for(lambda: len(offsets(ledger_dir)) >= fourth.end, "the reservations handled")
        child.handle.send(Stop())
        for request in child.of(GrantRequest)[4:]:
            child.handle.send(Grant(request.request_id, granted=False, reason="stopping"))
        child.expect(Stopped)
        assert offsets(ledger_dir)[: fourth.end] == list(range(fourth.end))

    def test_handles_only_what_was_granted(
        self, kafka_bootstrap: str, topic: str, ledger_dir: Path, spawn: Callable[..., Supervised]
    ) -> None:
        """It asks for one record and nothing ahead, handles nothing while the grant is
        withheld, then exactly the granted record; then one run and the next before any
        answer, never more."""
        produce(kafka_bootstrap, topic, {PARTITION: 12})
        child = spawn(make_spec(kafka_bootstrap, topic, mode=Mode.AMO, batch_size=5))
        first = child.expect(GrantRequest)
        assert (first.start, first.end) == (0, 1)
        withheld_until = time.monotonic() + 0.5  # a window in which nothing may happen
        while time.monotonic() < withheld_until:
            assert offsets(ledger_dir) == []
            time.sleep(0.05)
        child.drain()
        assert not child.of(Progress)
        assert child.of(GrantRequest) == [first]  # nothing ahead of the first
        assert child.handle.exitcode is None
        child.handle.send(Grant(first.request_id, granted=True))
        second = child.expect(GrantRequest)  # it handled the first, and asks again
        third = child.expect(GrantRequest)  # one run ahead: asked before the second's answer
        assert (second.start, third.start) == (first.end, second.end)
        assert offsets(ledger_dir) == [0]
        time.sleep(0.3)
        child.drain()
        assert child.of(GrantRequest) == [first, second, third]  # never more than one ahead
        child.handle.send(Stop())  # while it waits for the second's answer: it waits on
        time.sleep(0.3)
        assert child.handle.exitcode is None
        child.handle.send(Grant(second.request_id, granted=True))  # reserved: handled
        child.handle.send(Grant(third.request_id, granted=False, reason="the child is stopping"))
        assert child.expect(Stopped).next_offset == second.end
        assert child.wait_exit() == 0
        assert offsets(ledger_dir) == list(range(first.start, second.end))

    def test_answers_that_come_together_are_each_used_once(
        self, kafka_bootstrap: str, topic: str, ledger_dir: Path, spawn: Callable[..., Supervised]
    ) -> None:
        """The answer on the run asked ahead may come while the child handles the run before
        it: kept, not dropped; the child handles both granted runs, in order, once."""
        produce(kafka_bootstrap, topic, {PARTITION: 23})
        child = spawn(make_spec(kafka_bootstrap, topic, mode=Mode.AMO, batch_size=5))
        first = child.expect(GrantRequest)
        child.handle.send(Grant(first.request_id, granted=True))
        second = child.expect(GrantRequest)
        third = child.expect(GrantRequest)
        child.handle.send(Grant(second.request_id, granted=True))
        child.handle.send(Grant(third.request_id, granted=True))
        fourth = child.expect(GrantRequest)
        fifth = child.expect(GrantRequest)  # asked once the third was handled
        assert (fourth.start, fifth.start) == (third.end, fourth.end)
        assert offsets(ledger_dir) == list(range(first.start, third.end))
        child.handle.send(Stop())
        # asked before the stop: refused unwritten; the child ends at the first refusal
        child.handle.send(Grant(fourth.request_id, granted=False, reason="stopping"))
        assert child.expect(Stopped).next_offset == third.end
        assert child.wait_exit() == 0
        assert offsets(ledger_dir) == list(range(first.start, third.end))

    def test_a_refused_run_ahead_ends_the_child_after_the_granted_one(
        self, kafka_bootstrap: str, topic: str, ledger_dir: Path, spawn: Callable[..., Supervised]
    ) -> None:
        """A run granted, the one asked ahead refused: the granted one is handled, then exit 7
        with nothing after it handled."""
        produce(kafka_bootstrap, topic, {PARTITION: 23})
        child = spawn(make_spec(kafka_bootstrap, topic, mode=Mode.AMO, batch_size=5))
        first = child.expect(GrantRequest)
        child.handle.send(Grant(first.request_id, granted=True))
        second = child.expect(GrantRequest)
        third = child.expect(GrantRequest)
        child.handle.send(Grant(second.request_id, granted=True))
        child.handle.send(Grant(third.request_id, granted=False, reason="an earlier one"))
        assert child.wait_exit() == EXIT_NOT_GRANTED
        assert offsets(ledger_dir) == list(range(first.start, second.end))

    def test_stop_while_a_grant_is_pending_handles_the_run_once_granted(
        self, kafka_bootstrap: str, topic: str, ledger_dir: Path, spawn: Callable[..., Supervised]
    ) -> None:
        """Stop before the grant: the child waits for the answer and handles the granted run
        (the log reserved it for this claim: dropping it would lose it), then Stopped, exit 0;
        it asks for nothing after the stop."""
        produce(kafka_bootstrap, topic, {PARTITION: 5})
        child = spawn(make_spec(kafka_bootstrap, topic, mode=Mode.AMO, start_offset=2))
        request = child.expect(GrantRequest)
        assert (request.start, request.end) == (2, 3)  # (one record: its time is not known)
        child.handle.send(Stop())
        time.sleep(0.3)
        assert child.handle.exitcode is None and offsets(ledger_dir) == []
        child.handle.send(Grant(request.request_id, granted=True))
        assert child.expect(Stopped).next_offset == 3
        assert child.wait_exit() == 0
        assert offsets(ledger_dir) == [2]
        assert child.of(GrantRequest) == [request]

    def test_stop_then_a_refusal_ends_the_child_cleanly_with_nothing_handled(
        self, kafka_bootstrap: str, topic: str, ledger_dir: Path, spawn: Callable[..., Supervised]
    ) -> None:
        """Stop, then the pending batch refused (unwritten, so not reserved): exit 0, Stopped at
        the start, nothing handled."""
        produce(kafka_bootstrap, topic, {PARTITION: 5})
        child = spawn(make_spec(kafka_bootstrap, topic, mode=Mode.AMO, start_offset=2))
        request = child.expect(GrantRequest)
        child.handle.send(Stop())
        child.handle.send(Grant(request.request_id, granted=False, reason="the child is stopping"))
        assert child.expect(Stopped).next_offset == 2
        assert child.wait_exit() == 0
        assert offsets(ledger_dir) == []

    def test_records_granted_before_it_started_are_handled_without_asking(
        self, kafka_bootstrap: str, topic: str, ledger_dir: Path, spawn: Callable[..., Supervised]
    ) -> None:
        """What the child before it was granted and never started (`ChildSpec.granted_until`,
        the member's carry): handled without a request, in runs that end there; the first
        request starts there. A stop still hands those records on (a graceful stop loses
        nothing), then asks for nothing more."""
        produce(kafka_bootstrap, topic, {PARTITION: 30})  # (runs of at most 10)
        spec = make_spec(kafka_bootstrap, topic, mode=Mode.AMO, start_offset=3, granted_until=8)
        child = spawn(spec)
        first = child.expect(GrantRequest)
        assert first.start == 8
        wait_for(lambda: offsets(ledger_dir) == list(range(3, 8)), "the records granted before")
        time.sleep(0.3)
        assert offsets(ledger_dir) == list(range(3, 8))  # and nothing past them, unasked
        child.handle.send(Grant(first.request_id, granted=True))
        wait_for(lambda: offsets(ledger_dir) == list(range(3, first.end)), "the first run")

        stopping = spawn(
            make_spec(kafka_bootstrap, topic, mode=Mode.AMO, start_offset=first.end,
                      granted_until=first.end + 3, client_id="c2")
        )  # fmt: skip
        stopping.handle.send(Stop())  # at once: before anything is read
        assert stopping.expect(Stopped).next_offset == first.end + 3
        assert stopping.wait_exit() == 0
        assert stopping.of(GrantRequest) == []
        assert offsets(ledger_dir) == list(range(3, first.end + 3))

    def test_a_child_whose_setup_fails_says_it_began_nothing(
        self, kafka_bootstrap: str, topic: str, spawn: Callable[..., Supervised]
    ) -> None:
        """Its handler cannot be loaded (or set up, or its consumer opened): it started no
        record, and says so as a stop at its start (``stopped_at``), so what it was handed (its
        spec's ``granted_until``, the member's carry) goes to the next child rather than being
        reported lost as a crash's."""
        spec = make_spec(
            kafka_bootstrap, topic, mode=Mode.AMO, start_offset=3, granted_until=8,
            handler="marshal_workers.no_such_module:handle",
        )  # fmt: skip
        child = spawn(spec)
        assert child.wait_exit() == EXIT_SETUP
        assert child.keeper.lease.calls.take_end_note().stopped_at == 3

    def test_sigterm_stops_after_the_call_in_progress_and_says_where(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """The member's TERM (its lease ending) lands inside a handler call: the call completes,
        the child starts no other record, writes where it stopped (``stopped_at``: the member
        hands what it was granted from there to its next child) and ends by the signal. Ended
        at once, the record in the call was lost under AMO (a CI chaos run: 974..1024)."""
        monkeypatch.setenv(ledger.DELAY_ENV, "400")  # each call takes 0.4 s
        produce(kafka_bootstrap, topic, {PARTITION: 10})
        child = spawn(make_spec(kafka_bootstrap, topic, mode=Mode.AMO, batch_size=5))
        grant_all(child, lambda: len(child.of(GrantRequest)) >= 2)
        wait_for(lambda: child.keeper.lease.calls.in_call.value != 0, "a handler call in progress")
        in_call = int(child.keeper.lease.calls.position.value)
        child.keeper.lease.calls.term_asked.value = 1  # the member's TERM, as the runtime sends it
        child.handle.signal_child(signal.SIGTERM)
        assert child.wait_exit(5) == -signal.SIGTERM
        note = child.keeper.lease.calls.take_end_note()
        assert offsets(ledger_dir) == list(range(in_call + 1))  # the call completed, no other
        assert note.stopped_at == in_call + 1
        assert not note.in_call

    def test_refused_grant_exits_7_without_handling(
        self, kafka_bootstrap: str, topic: str, ledger_dir: Path, spawn: Callable[..., Supervised]
    ) -> None:
        """A refused grant ends the child with exit code 7 and nothing handled."""
        produce(kafka_bootstrap, topic, {PARTITION: 5})
        child = spawn(make_spec(kafka_bootstrap, topic, mode=Mode.AMO))
        request = child.expect(GrantRequest)
        child.handle.send(Grant(request.request_id, granted=False, reason="claim lost"))
        assert child.wait_exit() == EXIT_NOT_GRANTED
        assert offsets(ledger_dir) == []


# ---------------------------------------------------------------- self-fencing


class TestSelfFencing:
    def test_frozen_supervisor_child_stops_by_the_deadline(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """With the lease no longer extended, no handler call starts after the deadline and
        the child exits 5."""
        monkeypatch.setenv(ledger.DELAY_ENV, "100")
        produce(kafka_bootstrap, topic, {PARTITION: 60})
        child = spawn(make_spec(kafka_bootstrap, topic))
        child.expect(Started)
        wait_for(lambda: len(offsets(ledger_dir)) >= 1, "the first ledger row")
        mono, wall = leaseclock.now(), time.time()  # the two clocks at one moment (lease, wall)
        deadline = child.keeper.freeze()
        deadline_wall = wall + (deadline - mono)
        code = child.wait_exit(timeout=deadline - leaseclock.now() + 5)
        ended = leaseclock.now()
        assert code == EXIT_LEASE_EXPIRED
        assert ended < deadline + 1.0
        starts = [r.start for r in read_ledger(ledger_dir)]
        assert 1 <= len(starts) < 60
        # a call's start is stamped inside the handler, just after the child's lease check
        assert max(starts) < deadline_wall + 0.05

    def test_child_hung_in_the_handler_is_ended_by_its_watchdog(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A handler that never returns is cut off at the lease deadline by the watchdog."""
        monkeypatch.setenv(ledger.HANG_ENV, "2")
        produce(kafka_bootstrap, topic, {PARTITION: 5})
        child = spawn(make_spec(kafka_bootstrap, topic))
        wait_for(lambda: offsets(ledger_dir) == [0, 1], "offsets 0 and 1 in the ledger")
        deadline = child.keeper.freeze()
        code = child.wait_exit(timeout=deadline - leaseclock.now() + 5)
        assert code == EXIT_LEASE_EXPIRED
        assert leaseclock.now() < deadline + 1.0
        assert offsets(ledger_dir) == [0, 1]

    @pytest.mark.parametrize("context", ["multiprocessing.get_context('spawn')", "fork_server()"])
    def test_the_parents_main_script_is_not_run_again_in_the_child(
        self, kafka_bootstrap: str, topic: str, ledger_dir: Path, tmp_path: Path, context: str
    ) -> None:
        """multiprocessing re-runs the parent's main script in each child unless told not to;
        `marshal-run`'s script imports the whole CLI, which a child never needs."""
        runs = tmp_path / "runs"
        main = tmp_path / "main_script.py"
        main.write_text(
            "import base64, multiprocessing, pickle, sys, time\n"
            f"with open({str(runs)!r}, 'a') as f:\n"
            "    f.write(__name__ + '\\n')\n"
            "if __name__ == '__main__':\n"
            "    from marshal_workers.supervisor.childprocess import start_child\n"
            "    from marshal_workers.childlink.forkserver import fork_server\n"
            "    from marshal_workers.childlink.sharedlease import SharedLease\n"
            "    from marshal_workers.common import leaseclock\n"
            f"    ctx = {context}\n"
            "    lease = SharedLease(ctx)\n"
            "    lease.extend_to(leaseclock.now() + 120)\n"
            "    spec = pickle.loads(base64.b64decode(sys.argv[1]))\n"
            "    handle = start_child(spec, lease, ctx)\n"
            "    print(type(handle.conn.recv()).__name__, flush=True)\n"
            "    print(repr(getattr(sys.modules['__main__'], '__spec__', 'unset')), flush=True)\n"
            "    lease.revoke()\n"
            "    handle.join(20)\n"
        )
        spec = base64.b64encode(pickle.dumps(make_spec(kafka_bootstrap, topic))).decode()
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        done = subprocess.run(
            [sys.executable, str(main), spec],
            check=False,
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert done.stdout.splitlines() == ["Started", "None"], done.stderr
        assert runs.read_text().splitlines() == ["__main__"]

    @pytest.mark.parametrize(
        ("context", "kill"),
        [
            ("multiprocessing.get_context('spawn')", "supervisor"),
            ("fork_server()", "supervisor"),
            ("fork_server()", "fork server"),
        ],
    )
    def test_child_dies_with_its_parent(
        self, kafka_bootstrap: str, topic: str, ledger_dir: Path, context: str, kill: str
    ) -> None:
        """A child whose supervisor (or the fork server between them) is killed with SIGKILL is
        gone within 2 s: spawned, or forked by the fork server, as `marshal-run` starts them."""
        script = (
            "import base64, multiprocessing, pickle, sys, time\n"
            "from marshal_workers.supervisor.childprocess import start_child\n"
            "from marshal_workers.childlink.forkserver import fork_server\n"
            "from marshal_workers.childlink.sharedlease import SharedLease\n"
            "from marshal_workers.common import leaseclock\n"
            f"ctx = {context}\n"
            "lease = SharedLease(ctx)\n"
            "lease.extend_to(leaseclock.now() + 120)\n"
            "handle = start_child(pickle.loads(base64.b64decode(sys.argv[1])), lease, ctx)\n"
            "print(handle.pid, flush=True)\n"
            "print(type(handle.conn.recv()).__name__, flush=True)\n"
            "time.sleep(120)\n"
        )
        spec = base64.b64encode(pickle.dumps(make_spec(kafka_bootstrap, topic))).decode()
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        parent = subprocess.Popen(
            [sys.executable, "-c", script, spec], stdout=subprocess.PIPE, text=True, env=env
        )
        child_pid = 0
        try:
            assert parent.stdout is not None
            child_pid = int(parent.stdout.readline())
            assert parent.stdout.readline().strip() == "Started"
            assert not gone(child_pid)
            between = psutil.Process(child_pid).ppid()
            assert (between == parent.pid) == (context.startswith("multiprocessing"))
            if kill == "fork server":
                os.kill(between, signal.SIGKILL)
                wait_for(lambda: gone(child_pid), "the child to die with the fork server", 2.0)
                assert parent.poll() is None  # the supervisor lives on
            parent.kill()
            parent.wait(10)
            wait_for(lambda: gone(child_pid), "the orphaned child to die", timeout=2.0)
        finally:
            parent.kill()
            parent.wait(10)
            if child_pid and not gone(child_pid):
                os.killpg(child_pid, signal.SIGKILL)


# ---------------------------------------------------------------- stop, failure, kill


class TestEndings:
    def test_stop_finishes_the_batch_then_reports_stopped(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Stop mid-batch: the batch is finished, Stopped gives the next offset, exit 0."""
        monkeypatch.setenv(ledger.DELAY_ENV, "30")
        produce(kafka_bootstrap, topic, {PARTITION: 40})
        child = spawn(make_spec(kafka_bootstrap, topic))
        wait_for(lambda: len(offsets(ledger_dir)) >= 1, "the first ledger row")
        child.handle.send(Stop())
        handled_at_stop = len(offsets(ledger_dir))
        stopped = child.expect(Stopped)
        assert child.wait_exit() == 0
        assert stopped.next_offset is not None
        assert handled_at_stop < stopped.next_offset < 40
        assert offsets(ledger_dir) == list(range(stopped.next_offset))
        assert child.of(Progress)[-1].next_offset == stopped.next_offset

    def test_handler_exception_reports_and_exits_4(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A raising handler: HandlerFailed with its offset, Progress not past it, exit 4."""
        monkeypatch.setenv(ledger.FAIL_ENV, "4")
        produce(kafka_bootstrap, topic, {PARTITION: 8})
        child = spawn(make_spec(kafka_bootstrap, topic))
        failed = child.expect(HandlerFailed)
        assert child.wait_exit() == EXIT_HANDLER_FAILED
        assert failed.offset == 4
        assert "SimulatedError" in failed.error
        assert "SimulatedError" in failed.traceback
        assert [p.next_offset for p in child.of(Progress)] == [4]
        assert offsets(ledger_dir) == [0, 1, 2, 3]

    def test_the_records_handled_before_a_failure_are_reported_before_it(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """The supervisor takes a `Stats` with records handled for work done, and forgets the
        streak of failures. Sent after `HandlerFailed` (the child's last report), the records
        handled before the failure reset the streak the failure had just lengthened, so with
        --max-handler-failures 2 a holder failed 3 times in a row before it released the
        partition. They come before it now, and what comes after reports none. (No retries:
        a retry's back-off lets the report that is due every second go out first.)"""
        monkeypatch.setenv(ledger.FAIL_ENV, "4")
        produce(kafka_bootstrap, topic, {PARTITION: 8})
        child = spawn(make_spec(kafka_bootstrap, topic, retries=0))
        child.expect(HandlerFailed)
        assert child.wait_exit() == EXIT_HANDLER_FAILED
        kinds = [m for m in child.received if isinstance(m, Stats | HandlerFailed)]
        failed_at = next(i for i, m in enumerate(kinds) if isinstance(m, HandlerFailed))
        before = [m for m in kinds[:failed_at] if isinstance(m, Stats)]
        after = [m for m in kinds[failed_at + 1 :] if isinstance(m, Stats)]
        assert sum(m.handled for m in before) == 4, kinds
        assert all(m.handled == 0 for m in after), kinds

    def test_sigterm_waits_for_a_hung_call_and_sigkill_ends_it(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """The member's SIGTERM waits for the handler call's end (`child.termstop`); a call that
        never ends is ended by the member's SIGKILL, a third of the kill grace before the lease
        ends (and by the child's own watchdog at the lease's end). Any other TERM ends it at
        once, inside the call (`test_child_liveness`: a handler that TERMs its own process is
        blamed for its record)."""
        monkeypatch.setenv(ledger.HANG_ENV, "1")
        produce(kafka_bootstrap, topic, {PARTITION: 2})
        child = spawn(make_spec(kafka_bootstrap, topic))
        wait_for(lambda: offsets(ledger_dir) == [0], "offset 0 in the ledger (1 hangs)")
        wait_for(lambda: child.keeper.lease.calls.in_call.value != 0, "the call on 1 in progress")
        child.keeper.lease.calls.term_asked.value = 1  # the member's TERM, as the runtime sends it
        child.handle.signal_child(signal.SIGTERM)
        time.sleep(0.5)
        assert child.handle.exitcode is None, "ended inside the call by SIGTERM"
        child.handle.signal_group(signal.SIGKILL)
        assert child.wait_exit(2) == -signal.SIGKILL
        assert child.keeper.lease.calls.take_end_note().stopped_at is None

    def test_signal_group_kills_the_child_and_what_its_handler_started(
        self,
        kafka_bootstrap: str,
        topic: str,
        tmp_path: Path,
        spawn: Callable[..., Supervised],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """signal_group(SIGKILL) ends the child and a `sleep` its handler spawned."""
        pid_file = tmp_path / "sleep.pid"
        monkeypatch.setenv(child_handlers.PID_FILE_ENV, str(pid_file))
        produce(kafka_bootstrap, topic, {PARTITION: 1})
        child = spawn(
            make_spec(
                kafka_bootstrap, topic, handler="tests.integration.child_handlers:spawn_sleep"
            )
        )
        wait_for(pid_file.exists, "the handler's sleep pid")
        sleep_pid = int(pid_file.read_text())
        assert psutil.Process(sleep_pid).name() == "sleep"
        child.handle.signal_group(signal.SIGKILL)
        assert child.wait_exit(5) == -signal.SIGKILL
        wait_for(lambda: gone(sleep_pid), "the sleep to die", timeout=2.0)


# ---------------------------------------------------------------- class-based plugins


HANDLERS = "tests.integration.child_handlers"


def skip_if_capped(nice: int) -> None:
    """Skip where the tests already run too low for a child to be lowered ``nice`` more."""
    if os.getpriority(os.PRIO_PROCESS, 0) + nice > 19:
        pytest.skip("the tests run too low to lower a child by this much (nice caps at 19)")


def recorded_run(
    spec: ChildSpec,
    tmp_path: Path,
    spawn: Callable[..., Supervised],
    monkeypatch: pytest.MonkeyPatch,
) -> list[Any]:
    """Run a child of a recording plugin (`child_handlers.Recorder`) over 5 records of its
    partition, stop it; the events the plugin wrote."""
    events = tmp_path / "events.jsonl"
    monkeypatch.setenv(child_handlers.EVENTS_ENV, str(events))
    produce(spec.bootstrap_servers, spec.topic, {PARTITION: 5})
    child = spawn(spec)
    while child.expect(Progress).next_offset < 5:
        pass
    child.handle.send(Stop())
    assert child.wait_exit() == 0
    return [json.loads(line) for line in events.read_text().splitlines()]


class TestClassPlugin:
    @pytest.mark.parametrize(
        ("plugin", "given", "reason"),
        [
            ("Recorder", set(), "stop"),
            ("MessageRecorder", {("Message",)}, "stop"),
            ("Recorder", set(), "revoke"),
        ],
    )
    def test_setup_batches_and_teardown_with_the_reason(
        self,
        kafka_bootstrap: str,
        topic: str,
        tmp_path: Path,
        spawn: Callable[..., Supervised],
        monkeypatch: pytest.MonkeyPatch,
        plugin: str,
        given: set[tuple[str, ...]],
        reason: str,
    ) -> None:
        """A class is instantiated; setup, handle_batch per batch (every offset once, in
        order) and teardown with the reason the supervisor's `Stop` gives ("stop": the member
        stops; "revoke": the claim is taken away, a rebalance) run. With ``batch_view =
        "messages"`` (MessageRecorder) handle_batch gets confluent-kafka's own messages, and
        progress and the stop report the same offsets as with records."""
        events = tmp_path / "events.jsonl"
        monkeypatch.setenv(child_handlers.EVENTS_ENV, str(events))
        produce(kafka_bootstrap, topic, {PARTITION: 25})
        spec = make_spec(
            kafka_bootstrap, topic, handler=f"tests.integration.child_handlers:{plugin}"
        )
        child = spawn(spec)
        while child.expect(Progress).next_offset < 25:
            pass
        child.handle.send(Stop(reason))
        assert child.expect(Stopped).next_offset == 25
        assert child.wait_exit() == 0
        lines = [json.loads(line) for line in events.read_text().splitlines()]
        assert lines[0] == ["setup", 42]
        assert [o for kind, batch in lines if kind == "batch" for o in batch] == list(range(25))
        assert {tuple(types) for kind, types in lines if kind == "types"} == given
        assert lines[-1] == ["teardown", reason]

    @pytest.mark.parametrize("own", [None, "1000,5,5"])
    def test_the_collector_s_thresholds_are_raised_and_a_plugin_s_own_win(
        self,
        kafka_bootstrap: str,
        topic: str,
        tmp_path: Path,
        spawn: Callable[..., Supervised],
        monkeypatch: pytest.MonkeyPatch,
        own: str | None,
    ) -> None:
        """Decision 20: before the plugin's setup the child sets GC_THRESHOLDS, and after it
        freezes what setup made; thresholds a plugin sets in its setup are the ones it runs
        under."""
        if own:
            monkeypatch.setenv(child_handlers.GC_ENV, own)
        spec = make_spec(kafka_bootstrap, topic, handler=f"{HANDLERS}:CollectorRecorder")
        lines = recorded_run(spec, tmp_path, spawn, monkeypatch)
        assert lines[0] == ["gc_at_setup", list(GC_THRESHOLDS)]
        expected = [int(x) for x in own.split(",")] if own else list(GC_THRESHOLDS)
        runs = [line for line in lines if line[0] == "gc"]
        assert runs and all(line == ["gc", expected, True] for line in runs), runs

    @pytest.mark.parametrize("nice", [0, 7])
    def test_the_handler_runs_below_the_supervisor_s_priority_once_set_up(
        self,
        kafka_bootstrap: str,
        topic: str,
        tmp_path: Path,
        spawn: Callable[..., Supervised],
        monkeypatch: pytest.MonkeyPatch,
        nice: int,
    ) -> None:
        """`child_nice`: the plugin's setup runs at the child's own priority, its batches
        ``nice`` lower (here from the first: ``nice_after_s`` 0); every other thread (the lease
        watchdog, the consumer's) keeps the priority it had. 64 CPU-bound children on 2 cores at
        one priority started seconds late and let leases run out (docs/benchmarks.md)."""
        skip_if_capped(nice)
        spec = make_spec(
            kafka_bootstrap, topic, handler=f"{HANDLERS}:NiceRecorder", nice=nice, nice_after_s=0
        )
        lines = recorded_run(spec, tmp_path, spawn, monkeypatch)
        assert lines[0][0] == "nice_at_setup"
        base = lines[0][1]
        runs = [line for line in lines if line[0] == "nice"]
        assert runs and all(line[1] == base + nice for line in runs), runs
        others = runs[-1][2]
        assert any(name.startswith("marshal-watchdog/") for name in others), others
        assert any(name.startswith("rdk:") for name in others), others
        assert all(value == base for value in others.values()), others

    def test_the_first_batch_is_handled_at_the_child_s_own_priority(
        self,
        kafka_bootstrap: str,
        topic: str,
        tmp_path: Path,
        spawn: Callable[..., Supervised],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """`child.priority`: the handler's thread is lowered once its first record (a batch
        plugin's: its first batch) is dealt with, not at once (a child lowered at once waited
        for its first record behind its siblings still starting: docs/benchmarks.md). Its first
        batch runs at the setup's priority, the next ``nice`` lower (long before
        ``nice_after_s``); the other threads keep theirs."""
        nice = 7
        skip_if_capped(nice)
        events = tmp_path / "events.jsonl"
        monkeypatch.setenv(child_handlers.EVENTS_ENV, str(events))
        spec = make_spec(
            kafka_bootstrap,
            topic,
            handler=f"{HANDLERS}:NiceRecorder",
            nice=nice,
            nice_after_s=60.0,
        )
        produce(spec.bootstrap_servers, spec.topic, {PARTITION: 1})
        child = spawn(spec)
        while child.expect(Progress).next_offset < 1:
            pass
        produce(spec.bootstrap_servers, spec.topic, {PARTITION: 1})
        while child.expect(Progress).next_offset < 2:
            pass
        child.handle.send(Stop())
        assert child.wait_exit() == 0
        lines = [json.loads(line) for line in events.read_text().splitlines()]
        base = lines[0][1]
        runs = [line for line in lines if line[0] == "nice"]
        assert [run[1] for run in runs] == [base, base + nice], runs
        assert all(value == base for run in runs for value in run[2].values()), runs

    def test_a_slow_first_batch_is_lowered_when_its_time_is_up(
        self,
        kafka_bootstrap: str,
        topic: str,
        tmp_path: Path,
        spawn: Callable[..., Supervised],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A first batch longer than ``nice_after_s`` (a CPU-bound batch plugin's) is not
        handled at the full priority to its end: the timer lowers the thread meanwhile."""
        nice = 7
        skip_if_capped(nice)
        handler = f"{HANDLERS}:SlowFirstNiceRecorder"
        spec = make_spec(kafka_bootstrap, topic, handler=handler, nice=nice, nice_after_s=0.5)
        lines = recorded_run(spec, tmp_path, spawn, monkeypatch)
        base = lines[0][1]
        runs = [line[1:] for line in lines if line[0] == "nice"]
        assert runs[0] == [base, base + nice], runs
        assert all(run == [base + nice, base + nice] for run in runs[1:]), runs

    @pytest.mark.parametrize("nice", [0, 7])
    def test_a_fork_server_s_children_are_a_session_whose_group_runs_at_their_nice(
        self, kafka_bootstrap: str, topic: str, tmp_path: Path, nice: int
    ) -> None:
        """Where Linux schedules each session as a group (autogroup), a nice orders threads
        only inside it: 64 CPU-bound children in their supervisors' sessions kept another
        session's process waiting for seconds (docs/benchmarks.md). A child of the fork server
        is in the fork server's session, not its supervisor's, and once set up it gives that
        session's group its nice (`childlink.schedgroup`); the supervisor's group keeps its
        own. With ``child_nice = 0`` the group stays at 0."""
        events = tmp_path / "events.jsonl"
        script = tmp_path / "supervise.py"
        script.write_text(
            "import base64, os, pickle, sys, time\n"
            "from marshal_workers.childlink.forkserver import fork_server\n"
            "from marshal_workers.childlink.schedgroup import session_group_nice\n"
            "from marshal_workers.childlink.sharedlease import SharedLease\n"
            "from marshal_workers.common import leaseclock\n"
            "from marshal_workers.ipc.messages import Progress, Stop\n"
            "from marshal_workers.supervisor.childprocess import start_child\n"
            "if __name__ == '__main__':\n"
            "    mine = session_group_nice()\n"
            "    ctx = fork_server()\n"
            "    lease = SharedLease(ctx)\n"
            "    lease.extend_to(leaseclock.now() + 120)\n"
            "    handle = start_child(pickle.loads(base64.b64decode(sys.argv[1])), lease, ctx)\n"
            "    while not handle.conn.poll(60) or not (\n"
            "        isinstance(m := handle.conn.recv(), Progress) and m.next_offset >= 5\n"
            "    ):\n"
            "        pass\n"
            "    # the child's group: settled at once, or by its thread within seconds\n"
            "    path, end = f'/proc/{handle.pid}/autogroup', time.monotonic() + 10\n"
            "    while session_group_nice(path) != int(sys.argv[2]) and time.monotonic() < end:\n"
            "        time.sleep(0.05)\n"
            "    child_group = session_group_nice(path)\n"
            "    handle.send(Stop())\n"
            "    handle.join(30)\n"
            "    print(repr((handle.exitcode, os.getsid(0), mine, session_group_nice(),\n"
            "                child_group)))\n"
        )
        produce(kafka_bootstrap, topic, {PARTITION: 5})
        spec = make_spec(kafka_bootstrap, topic, handler=f"{HANDLERS}:SessionRecorder", nice=nice)
        blob = base64.b64encode(pickle.dumps(spec)).decode()
        env = {**os.environ, "PYTHONPATH": str(REPO), child_handlers.EVENTS_ENV: str(events)}
        done = subprocess.run(
            [sys.executable, str(script), blob, str(nice)],
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        code, supervisor_session, group_before, group_after, child_group = eval(done.stdout)
        assert code == 0, done.stderr
        lines = [json.loads(line) for line in events.read_text().splitlines()]
        sessions = [line[1:] for line in lines if line[0] == "session"]
        assert sessions, lines
        session, server, group = sessions[-1]
        assert group_after == group_before, done.stdout  # the supervisor's group: untouched
        if not os.path.exists("/proc/self/autogroup"):  # nothing to gain: no session of its own
            assert (session, group, child_group) == (supervisor_session, None, None), sessions
            return
        assert session == server != supervisor_session, sessions
        assert child_group == nice, done.stdout

    @pytest.mark.parametrize(
        ("plugin", "given"), [("Recorder", set()), ("MessageRecorder", {("Message",)})]
    )
    def test_amo_reserves_several_batches_and_hands_the_plugin_batches(
        self,
        kafka_bootstrap: str,
        topic: str,
        tmp_path: Path,
        spawn: Callable[..., Supervised],
        monkeypatch: pytest.MonkeyPatch,
        plugin: str,
        given: set[tuple[str, ...]],
    ) -> None:
        """For batch plugins: one reservation covers several fetched batches (a
        window of 40, batches of 5), and handle_batch still gets batches of at most 5, every
        offset once, in order, as records or as the consumer's messages."""
        events = tmp_path / "events.jsonl"
        monkeypatch.setenv(child_handlers.EVENTS_ENV, str(events))
        produce(kafka_bootstrap, topic, {PARTITION: 30})
        spec = make_spec(
            kafka_bootstrap,
            topic,
            handler=f"tests.integration.child_handlers:{plugin}",
            mode=Mode.AMO,
            batch_size=5,
            amo_window=40,
        )
        child = spawn(spec)
        asked: list[GrantRequest] = []
        while not asked or asked[-1].end < 30:
            request = child.expect(GrantRequest)
            asked.append(request)
            child.handle.send(Grant(request.request_id, granted=True))
        assert max(r.end - r.start for r in asked) > 5
        wait_for(lambda: events.exists() and '"batch"' in events.read_text(), "batches")
        child.handle.send(Stop())
        for request in child.of(GrantRequest)[len(asked) :]:  # (each request answered once)
            child.handle.send(Grant(request.request_id, granted=False, reason="stopping"))
        assert child.expect(Stopped).next_offset == 30
        lines = [json.loads(line) for line in events.read_text().splitlines()]
        batches = [batch for kind, batch in lines if kind == "batch"]
        assert [o for batch in batches for o in batch] == list(range(30))
        assert max(len(batch) for batch in batches) <= 5
        assert {tuple(types) for kind, types in lines if kind == "types"} == given
