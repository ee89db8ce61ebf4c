"""End to end, real `marshal-run` processes on a real broker: a hung or exiting handler
under a healthy supervisor, the ALO redelivery bound after kill -9, and a fenced child's helper
process dying before the claim moves."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from marshal_workers.ipc.exits import EXIT_PARENT_GONE
from tests.integration import liveness_handlers as lh
from tests.integration.fleet import Fleet, MakeFleet, Member, log_events
from tests.threadmasks import threads_taking

pytestmark = pytest.mark.kafka

HANDLER = "tests.integration.liveness_handlers:handle"
AT = 5


@pytest.fixture
def fleet(make_fleet: MakeFleet) -> Fleet:
    return make_fleet(mode="alo", hb=1.0, partitions=2)


def member_id() -> str:
    """A client id no other test on this host uses (client ids are locked per host)."""
    return f"live-{uuid.uuid4().hex[:8]}"


class TestHandlerEndsUnderAHealthySupervisor:
    @pytest.mark.parametrize(
        ("how", "event"),
        [
            ("hang", "handler_timed_out"),
            ("gil", "handler_timed_out"),  # the supervisor's backstop: the watchdog starves
            ("os_exit_0", "handler_ended_child"),
            ("sigkill", "handler_ended_child"),
        ],
    )
    def test_the_record_is_skipped_and_the_partition_goes_on(
        self, fleet: Fleet, how: str, event: str
    ) -> None:
        """A handler that hangs (killed at --handler-timeout) or ends its process on one
        offset: with --on-failure skip, that record is skipped and every other one handled,
        and the supervisor logs one warning naming topic, partition and offset (a hanging
        call also a warning once it is past half the timeout)."""
        fleet.produce(2 * 12)
        member = fleet.start(
            member_id(),
            "--handler",
            HANDLER,
            "--handler-timeout",
            "1.5",
            "--on-failure",
            "skip",
            "--retries",
            "0",
            env={lh.AT_ENV: str(AT), lh.HOW_ENV: how},
        )
        expected = {(p, o) for p in range(2) for o in range(12) if o != AT}
        fleet.wait_for(
            lambda: {(r.partition, r.offset) for r in fleet.ledger()} >= expected,
            60,
            "every record but the misbehaving ones handled",
        )
        assert not [r for r in fleet.ledger() if r.offset == AT]
        warnings = log_events(member.log_path, event)
        assert {(w["topic"], w["partition"], w["offset"]) for w in warnings} == {
            (fleet.topic, p, AT) for p in range(2)
        }
        if how == "hang":  # past half its timeout, a call is said before it is ended (a review)
            slow = log_events(member.log_path, "handler_call_slow")
            assert {(w["topic"], w["partition"]) for w in slow} == {
                (fleet.topic, p) for p in range(2)
            }, slow
        assert member.proc.poll() is None


class TestAChildWithoutItsPipe:
    def test_the_supervisor_does_not_spin_while_the_child_runs_on(
        self, fleet: Fleet, tmp_path: Path
    ) -> None:
        """A handler closes its child's end of the pipe and works on for a few seconds (a
        review: the supervisor's end was ready at every turn meanwhile, and its loop spun on
        a core). The supervisor takes little CPU meanwhile; the child ends at its next use of
        the pipe, another takes its place, and every record is handled."""
        mark = tmp_path / "pipe-closed"
        fleet.produce(2 * 12)
        member = fleet.start(
            member_id(),
            "--handler",
            HANDLER,
            env={lh.AT_ENV: str(AT), lh.HOW_ENV: "close_pipe", lh.MARK_ENV: str(mark)},
        )
        fleet.wait_for(mark.exists, 60, "a child's handler closed its pipe")
        supervisor = psutil.Process(member.pid)
        before = supervisor.cpu_times()
        time.sleep(lh.CLOSED_PIPE_WORKS_S / 2)
        after = supervisor.cpu_times()
        used = (after.user + after.system) - (before.user + before.system)
        assert used < lh.CLOSED_PIPE_WORKS_S / 4, (used, member.log_tail(20))
        expected = {(p, o) for p in range(2) for o in range(12)}
        fleet.wait_for(
            lambda: {(r.partition, r.offset) for r in fleet.ledger()} >= expected,
            60,
            "every record handled",
        )
        # the child may have handled its partition's last records itself before it used the
        # pipe again: its exit comes after them (CI saw the check run before the exit's line)
        fleet.wait_for(
            lambda: (
                EXIT_PARENT_GONE in [e["code"] for e in log_events(member.log_path, "child_exited")]
            ),
            30,
            "the child without its pipe ending as its parent gone",
        )


class TestRedeliveryBound:
    @pytest.mark.solo  # one HB of records exactly: a heartbeat late on a shared host passes it
    def test_kill_9_inside_a_batch_rehandles_at_most_about_one_heartbeat(
        self, fleet: Fleet
    ) -> None:
        """8 ms a record, batches of 500, HB = 1 s (125 records an HB): kill -9 of the
        supervisor at a random point well inside its first batches; the next owner handles
        again at most one HB of records per partition (the heartbeat's position is read from
        the child's shared cells when it is sent, not taken from the last finished batch)."""
        fleet.ledger_delay_ms = 8
        per_partition = 700
        fleet.produce(2 * per_partition)
        first = fleet.start(member_id(), "--batch-size", "500")

        def rows_each() -> int:
            rows = Counter(r.partition for r in fleet.ledger())
            return min(rows[0], rows[1])

        fleet.wait_for(lambda: rows_each() >= 250, 60, "250 records of each partition handled")
        time.sleep(random.uniform(0.0, 1.0))  # a random point inside the batch (not a wait)
        first.signal(signal.SIGKILL)  # its children die with it (parent-death signal)
        first.wait(10)
        fleet.start(member_id(), "--batch-size", "500")
        fleet.wait_for(fleet.handled_everything, 120, "every record handled")
        again = Counter(
            p
            for (p, _), n in Counter((r.partition, r.offset) for r in fleet.ledger()).items()
            if n > 1
        )
        print(f"re-handled per partition: {dict(again)} (one HB = 125 records)")
        assert all(again[p] <= 125 for p in range(2)), again


class TestFencedHelper:
    def test_a_frozen_supervisors_helper_is_dead_before_another_member_handles(
        self, make_fleet: MakeFleet, tmp_path: Path
    ) -> None:
        """SIGSTOP of the supervisor whose handler started a helper process: the helper is
        dead before the next member handles the partition."""
        fleet = make_fleet(mode="alo", hb=1.0, partitions=1)
        pid_file = tmp_path / "helper.pid"
        try:
            fleet.produce(5)
            frozen = fleet.start(
                member_id(),
                "--handler",
                "tests.integration.liveness_handlers:helper_then_ledger",
                env={lh.HELPER_ENV: str(pid_file)},
            )
            fleet.wait_for(pid_file.exists, 60, "the handler's helper")
            helper = int(pid_file.read_text())
            fleet.wait_for(lambda: len(fleet.ledger()) >= 5, 60, "the first records handled")
            frozen.signal(signal.SIGSTOP)
            fleet.start(member_id())
            fleet.produce(5)
            died_at = None
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if died_at is None and not _alive(helper):
                    died_at = time.time()
                later = [r for r in fleet.ledger() if r.client_id != frozen.client_id]
                if later:
                    assert died_at is not None, "another member handled while the helper lived"
                    assert died_at <= min(r.start for r in later)
                    break
                time.sleep(0.02)
            else:
                pytest.fail("the partition was not taken over")
        finally:
            for member in fleet.members:
                with_suppressed(lambda m=member: os.kill(m.pid, signal.SIGCONT))


class TestATreeStoppedPastItsLease:
    def test_a_call_in_progress_does_not_complete_after_the_continue(
        self, make_fleet: MakeFleet, tmp_path: Path
    ) -> None:
        """SIGSTOP of a member's whole tree (supervisor, fork server, child, guardian) while a
        call runs, past the lease and past the call's own end, then SIGCONT (the child first):
        the child ends before the call completes (and writes so), and no record is handled
        after the stop. Before SIGCONT had a handler, the watchdog waited for the GIL while the
        call completed after the lease, as a review saw."""
        fleet = make_fleet(mode="alo", hb=1.0, partitions=1)
        mark = tmp_path / "working"
        frozen: list[psutil.Process] = []
        try:
            fleet.produce(AT + 3)
            member = fleet.start(
                member_id(),
                "--handler",
                HANDLER,
                "--child-nice",
                "0",  # the handler's thread as ready to run on the continue as the watchdog
                env={
                    lh.AT_ENV: str(AT),
                    lh.HOW_ENV: "work_until",
                    lh.MARK_ENV: str(mark),
                    lh.WORK_ENV: "2.0",
                },
            )
            fleet.wait_for(mark.exists, 60, "the call at the offset begun")
            supervisor = psutil.Process(member.pid)
            frozen = [supervisor, *supervisor.children(recursive=True)]
            for proc in frozen:
                proc.suspend()
            stopped_at = time.time()
            time.sleep(5.0)  # the lease (2·HB) and the call's 2 s both end meanwhile
            # the child alone first: its handler's thread and its watchdog both run at once
            # (two cores), the supervisor not yet there to kill it
            [child] = [p for p in frozen if p.pid in member.children()]
            # the runtime's threads (and librdkafka's) leave SIGCONT to the main thread: one
            # that took it would put the handler off until the main thread dropped the GIL
            assert threads_taking(child.pid, signal.SIGCONT) == [child.pid]
            child.resume()
            time.sleep(0.05)
            for proc in frozen:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.resume()
            frozen = []
            fleet.wait_for(
                lambda: bool(log_events(member.log_path, "child_exited")), 30, "the child's end"
            )
            # (the child started next may handle the offset again, legitimately: by its pid)
            done = [line.split() for line in mark.read_text().splitlines()]
            assert not [d for d in done if d[2] == str(child.pid)], "completed past the lease"
            late = [r for r in fleet.ledger() if r.pid == child.pid and r.end > stopped_at]
            assert not late, f"handled after the stop, past the lease: {late}"
            fenced = [
                (e.get("reason"), e.get("by"))
                for e in log_events(member.log_path, "child_fenced")
                if e.get("pid") == child.pid
            ]
            # one fence, before the call went on: the SIGCONT handler's as a rule; the watchdog's
            # if it was waiting for the GIL at the stop and asked for it first on the continue
            # (then the main thread, inside the SIGCONT handler, never goes back to the call;
            # which thread takes the signal is checked above, and `TestResumeInAProcess`
            # checks the handler's fence with the watchdog asleep until the deadline)
            assert [reason for reason, _ in fenced] == ["lease_expired"], fenced
            assert fenced[0][1] in ("resume", "watchdog"), fenced
        finally:
            for proc in frozen:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.resume()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def with_suppressed(action: Callable[[], object]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        action()


def audit_poison_story(fleet: Fleet, tmp_path: Path, poison_at: int) -> None:
    """On the same log: the unfiltered audit runs (it once crashed on RecordFailed)
    and, like the --group audit, reports the record's failures, both parkings, the retry and
    the skip, in log order."""
    out = tmp_path / "audit"
    code, summary, err = fleet.audit(out)
    assert code == 0, err
    assert summary["poison"] == {"records": 1, "failures": 8, "parked": 1, "retried": 1,
                                 "skipped": 1, "parked_at_end": 0}, summary  # fmt: skip
    poison = pq.read_table(out / "poison").to_pylist()
    assert {p["offset"] for p in poison} == {poison_at}
    run = ["failed"] * 3 + ["parked"]
    assert [p["action"] for p in poison] == [*run, "retried", *run, "skipped"]
    assert {p["client_id"] for p in poison if p["action"] == "failed"} == {
        m.client_id for m in fleet.members
    }
    assert {p["client_id"] for p in poison if p["action"] in ("retried", "skipped")} == {
        "marshal-admin"
    }
    assert "SimulatedError" in poison[0]["error"]
    events = pq.read_table(out / "events").to_pylist()
    assert sum(e["message_type"] == "RecordFailed" for e in events) == 8
    page = (out / "report.html").read_text()
    assert "Poison records" in page and "skipped" in page and "parked" in page
    code, summary, err = fleet.audit(tmp_path / "audit-group", "--group", fleet.group)
    assert code == 0, err
    assert summary["poison"]["parked"] == 1 and summary["poison"]["skipped"] == 1


class TestPoisonRecords:
    @pytest.mark.spark
    @pytest.mark.timeout(900)
    def test_a_poison_record_is_counted_across_members_parked_then_skipped_by_an_operator(
        self, make_fleet: MakeFleet, tmp_path: Path
    ) -> None:
        """A record that always fails: its failures add up in the log across releases and
        members (2 each before a release, parked at 4 in total), status shows it parked with
        its offset and error, nobody tries it any more; retry-record starts the count again,
        skip-record moves the partition past it and the rest is handled; then the audit of
        the log tells that whole story."""
        fleet = make_fleet(mode="alo", hb=1.0, partitions=1)
        poison_at = 3
        fleet.produce(10)
        args = (
            "--retries",
            "0",
            "--restart-backoff",
            "0.1",
            "--max-handler-failures",
            "2",
            "--poison-park-after",
            "4",
        )
        env = {"MARSHAL_LEDGER_FAIL_AT_OFFSET": str(poison_at)}
        for _ in range(2):
            fleet.start(member_id(), *args, env=env)

        def poison_state() -> dict[str, object] | None:
            return fleet.poison_of(0)

        def parked() -> bool:
            state = poison_state()
            return state is not None and state["parked"] is True

        fleet.wait_for(parked, 90, "the poison record to be parked")
        state = poison_state()
        assert state is not None
        assert state["offset"] == poison_at and state["failures"] == 4
        assert "SimulatedError" in str(state["last_error"])
        writers = {
            entry["client_id"]
            for member in fleet.members
            for entry in log_events(member.log_path, "record_failure_counted")
            + log_events(member.log_path, "record_parked")
        }
        assert len(writers) == 2, "both members counted failures of the one record"
        failures_so_far = _failure_lines(fleet)
        time.sleep(3 * fleet.hb)  # a window in which nothing may try the parked record
        assert _failure_lines(fleet) == failures_so_far
        # the failure that parked it was its holder's 2nd in a row: it keeps the claim
        releases = [
            (entry["client_id"], entry.get("reason"))
            for member in fleet.members
            for entry in log_events(member.log_path, "claim_releasing")
        ]  # (why, should it fail: it failed once in a full run under load, not since)
        assert 0 in fleet.holders(), f"the parked partition was released: {releases}"
        assert [r.offset for r in fleet.ledger()] == list(range(poison_at))

        mistyped = fleet.admin(
            "retry-record", "--group", fleet.group, "--topic", fleet.topic,
            "--partition", "0", "--offset", str(poison_at + 4),
        )  # fmt: skip
        # refused by the admin's own fold, and not written: a refused decision under the
        # claim's poison key could be all the cleaner leaves of its failure count
        assert mistyped.returncode == 1, mistyped.stderr
        assert f"nothing to resolve at {poison_at + 4}" in mistyped.stderr
        retried = fleet.admin(
            "retry-record",
            "--group",
            fleet.group,
            "--topic",
            fleet.topic,
            "--partition",
            "0",
            "--offset",
            str(poison_at),
        )
        assert retried.returncode == 0, retried.stderr
        assert "retried (after 4 failures)" in retried.stdout  # the count it cleared
        fleet.wait_for(lambda: _failure_lines(fleet) > failures_so_far, 60, "a new try")

        fleet.wait_for(parked, 90, "the record to be parked again")
        skipped = fleet.admin(
            "skip-record",
            "--group",
            fleet.group,
            "--topic",
            fleet.topic,
            "--partition",
            "0",
            "--offset",
            str(poison_at),
        )
        assert skipped.returncode == 0, skipped.stderr
        assert "skipped" in skipped.stdout
        fleet.wait_for(
            lambda: {r.offset for r in fleet.ledger()} == set(range(10)) - {poison_at},
            60,
            "every other record handled",
        )
        fleet.wait_for(lambda: poison_state() is None, 30, "status without a poison record")
        for member in fleet.members:
            member.signal(signal.SIGTERM)
        for member in fleet.members:
            assert member.wait(30) == 0, member.log_tail()
        audit_poison_story(fleet, tmp_path, poison_at)

    def test_an_operator_that_is_not_an_admin_is_refused(self, make_fleet: MakeFleet) -> None:
        """skip-record as a client outside admin_client_ids: exit 1, nothing changes."""
        fleet = make_fleet(mode="alo", hb=1.0, partitions=1)
        refused = fleet.admin(
            "skip-record",
            "--group",
            fleet.group,
            "--topic",
            fleet.topic,
            "--partition",
            "0",
            "--offset",
            "3",
            "--client-id",
            "mallory",
        )
        assert refused.returncode == 1
        assert "refused" in refused.stderr and "not an admin" in refused.stderr


def _failure_lines(fleet: Fleet) -> int:
    """How many handler failures the members have logged so far."""
    return sum(len(log_events(member.log_path, "handler_failed")) for member in fleet.members)


def _lines_naming(member: Member, pid: int) -> list[str]:
    """The member's log lines that name ``pid`` (a child's start, end, fencing)."""
    text = member.log_path.read_text(errors="replace").splitlines()
    return [line for line in text if str(pid) in line][-20:]


def fork_server_of(supervisor_pid: int) -> psutil.Process:
    """The supervisor's fork server (the parent of its partition workers)."""
    for proc in psutil.Process(supervisor_pid).children():
        with contextlib.suppress(psutil.Error):
            if "multiprocessing.forkserver" in " ".join(proc.cmdline()):
                return proc
    raise AssertionError("no fork server")


class TestAChildStartThatWaits:
    def test_a_frozen_fork_server_stalls_no_heartbeat(self, fleet: Fleet) -> None:
        """A's fork server is stopped (SIGSTOP: starved by busy children in their own
        scheduling group, or paged out) when B leaves and A must start a child for B's
        partition: A waits for that start off its loop, so its heartbeats go on and its own
        partition's child keeps its lease. (A review: the loop waited for the new child's pid,
        every lease of the member ran out, its healthy children were fenced and its member
        claim was lost.)"""
        fleet.produce(2 * 20)
        a = fleet.start(member_id())
        fleet.wait_for(lambda: len(a.children()) == 2, 30, "A runs both partitions")
        b = fleet.start(member_id())
        fleet.wait_for(lambda: len(a.children()) == 1 and len(b.children()) == 1, 60, "a split")
        fleet.wait_for(fleet.handled_everything, 30, "everything handled")
        (own,) = a.children()
        server = fork_server_of(a.pid)
        server.suspend()
        try:
            b.signal(signal.SIGTERM)  # A claims B's partition: its child's start waits
            assert b.wait(30) == 0
            time.sleep(4 * fleet.hb)  # past the lease (2 HB) of every claim of A's
        finally:
            server.resume()
        fleet.wait_for(lambda: len(a.children()) == 2, 30, "A runs both partitions again")
        # A's own child was never fenced (if it was: what A logged of it, and its last lines)
        assert own in a.children(), (own, a.children(), _lines_naming(a, own), a.log_tail(40))
        for event in ("lease_expired", "claim_lost", "child_fenced", "lease_clock_stood_still"):
            assert log_events(a.log_path, event) == [], (event, a.log_tail(30))
        fleet.produce(2 * 5)
        fleet.wait_for(fleet.handled_everything, 30, "the new records handled")

    def test_a_term_while_the_fork_server_is_stopped_ends_within_the_stop_timeout(
        self, fleet: Fleet
    ) -> None:
        """The fork server reports its children's exits; stopped, it reports none. TERM: the
        children finish and end, unreported; at --stop-timeout the supervisor kills them and,
        once they are dead (zombies the stopped server cannot reap), takes them for ended, so
        the claims are released and it exits (a review: it logged the kills, then nothing, and
        held its claims for minutes while another member waited)."""
        fleet.produce(2 * 10)
        a = fleet.start(member_id(), "--stop-timeout", "2")
        fleet.wait_for(lambda: len(a.children()) == 2, 30, "A runs both partitions")
        fleet.wait_for(fleet.handled_everything, 30, "everything handled")
        server = fork_server_of(a.pid)
        server.suspend()
        try:
            asked = time.monotonic()
            a.signal(signal.SIGTERM)
            assert a.wait(30) == 0, a.log_tail(30)
            took = time.monotonic() - asked
        finally:
            with contextlib.suppress(psutil.NoSuchProcess):
                server.resume()
        assert took < 20, took  # the stop timeout (2 s), the kill, and the reap (about 2 s)
        assert log_events(a.log_path, "supervisor_stopped"), a.log_tail(30)
        b = fleet.start(member_id())  # the claims were released: B need not wait for them
        fleet.wait_for(lambda: len(b.children()) == 2, 30, "B takes both partitions at once")
