"""What the supervisor does when a child exits: respawn, back off, release, or finish."""

from __future__ import annotations

import signal

import pytest

from marshal_workers.child.main import EXIT_HANDLER_FAILED, EXIT_SETUP
from marshal_workers.core.childexits import (
    ExitDecision,
    Next,
    count_failure,
    decide,
    read_end,
    slow_call,
    watch_call,
)
from marshal_workers.ipc.exits import (
    EXIT_HANDLER_ENDED,
    EXIT_HANDLER_TIMEOUT,
    EXIT_KAFKA,
    EXIT_LEASE_EXPIRED,
    EXIT_NOT_GRANTED,
    EndNote,
)
from marshal_workers.ipc.messages import Settle

HB = 1.0


def exit_with(
    code: int,
    *,
    failures: int = 0,
    running: bool = True,
    reloading: bool = False,
    lease_valid: bool = True,
    max_failures: int = 5,
    on_failure: str = "stop",
) -> ExitDecision:
    return decide(
        code=code,
        running=running,
        reloading=reloading,
        lease_valid=lease_valid,
        failures=failures,
        max_failures=max_failures,
        heartbeat_interval_s=HB,
        on_failure=on_failure,
    )


def test_reload_respawns_at_once_while_the_lease_holds() -> None:
    """HUP: the same claim gets a fresh child right away."""
    assert exit_with(0, running=False, reloading=True).next is Next.RESPAWN


def test_reload_with_an_expired_lease_releases() -> None:
    """A reload that outlived the lease does not respawn under a claim that may be gone."""
    assert exit_with(0, reloading=True, lease_valid=False).next is Next.RELEASE


def test_a_child_asked_to_stop_finishes() -> None:
    """Graceful release, stop or a lost claim: the phase decides what comes next."""
    assert exit_with(-9, running=False).next is Next.FINISH


def test_an_expired_lease_releases_and_keeps_away_briefly() -> None:
    """Heartbeats not confirmed in time: release (the child is dead), avoid for one HB."""
    d = exit_with(5, lease_valid=False)
    assert (d.next, d.avoid_s) == (Next.RELEASE, HB)


@pytest.mark.parametrize("code", [-signal.SIGTERM, EXIT_LEASE_EXPIRED])
def test_an_amo_child_stopped_at_a_boundary_as_its_lease_ends_waits_for_the_verdicts(
    code: int,
) -> None:
    """AMO, the member's TERM as the lease was ending and the child stopped at a record
    boundary (``carries``), its exit read with a kill grace or less of the lease left: the
    claim is not let go at once, it waits for the lease's verdicts with what the child had not
    started (`Keeping.lease_may_return`). Without a boundary, or not stopped by its member, it
    is released as any lease that ran out."""

    def ends(**kw: bool) -> ExitDecision:
        return decide(code=code, running=True, reloading=False, lease_valid=False, failures=2,
                      max_failures=5, heartbeat_interval_s=HB, **kw)  # fmt: skip

    d = ends(stopped_for_lease=True, carries=True)
    assert (d.next, d.delay_s, d.failures) == (Next.RESTART_LATER, 0.0, 2)
    assert ends(stopped_for_lease=True, carries=False).next is Next.RELEASE
    assert ends(stopped_for_lease=False, carries=True).next is Next.RELEASE


def test_setup_failures_back_off_exponentially() -> None:
    """A child that cannot even start (exit 8) is restarted with a doubling backoff."""
    delays = [exit_with(EXIT_SETUP, failures=n).delay_s for n in range(4)]
    assert delays == [0.5, 1.0, 2.0, 4.0]


def test_repeated_crashes_release_the_partition() -> None:
    """After max failures of any kind the partition is released and avoided for a while."""
    d = exit_with(EXIT_SETUP, failures=4)
    assert d.next is Next.RELEASE and d.failures == 5 and d.avoid_s >= 60


def test_handler_failures_are_counted_as_they_are_reported() -> None:
    """Exit 4 follows a HandlerFailed that the caller already counted: no double count."""
    assert exit_with(EXIT_HANDLER_FAILED, failures=2).failures == 2
    assert exit_with(EXIT_HANDLER_FAILED, failures=5).next is Next.RELEASE


def test_backoff_is_capped() -> None:
    """The wait between restarts never exceeds 30 s."""
    assert exit_with(EXIT_SETUP, failures=20, max_failures=100).delay_s == 30.0


def test_an_unasked_clean_exit_counts_as_a_failure() -> None:
    """Exit 0 while the claim should run (a handler or plugin ended the child): a failure,
    counted towards the release, so it cannot restart every 0.5 s forever."""
    d = exit_with(0, failures=2)
    assert d.next is Next.RESTART_LATER and d.failures == 3
    assert exit_with(0, failures=4).next is Next.RELEASE


# ---- how a child ended: the status and the shared cells

IDLE = EndNote(fence=0, position=40, in_call=False, call_started=0.0, unit_end=None)
IN_CALL = EndNote(fence=0, position=40, in_call=True, call_started=100.0, unit_end=None)


def test_the_watchdogs_note_names_a_timeout_and_its_record() -> None:
    """SIGKILL status, but the watchdog noted 10: a timeout on the record in progress."""
    note = EndNote(
        fence=EXIT_HANDLER_TIMEOUT, position=40, in_call=True, call_started=100.0, unit_end=None
    )
    end = read_end(-signal.SIGKILL, note, killed_by_supervisor=False, now=107.5)
    assert end.code == EXIT_HANDLER_TIMEOUT
    assert end.failed is not None and (end.failed.offset, end.failed.end) == (40, 41)
    assert end.spent_s == 7.5 and "timed out" in end.failed.error


def test_a_batch_call_settles_its_whole_batch() -> None:
    """A handle_batch call in progress covers position to unit_end."""
    note = EndNote(
        fence=EXIT_HANDLER_TIMEOUT, position=40, in_call=True, call_started=1.0, unit_end=90
    )
    end = read_end(-9, note, killed_by_supervisor=False, now=2.0)
    assert end.failed == Settle(40, 90, end.failed.error if end.failed else "")


def test_a_fence_note_outside_a_call_blames_no_record() -> None:
    """The watchdog fenced on the lease: its code counts, no record is at fault."""
    note = EndNote(
        fence=EXIT_LEASE_EXPIRED, position=40, in_call=False, call_started=0.0, unit_end=None
    )
    assert read_end(-9, note, killed_by_supervisor=False, now=1.0).code == EXIT_LEASE_EXPIRED
    assert read_end(-9, note, killed_by_supervisor=False, now=1.0).failed is None


@pytest.mark.parametrize("status", [0, 1, 4, 77, -signal.SIGKILL, -signal.SIGSEGV])
def test_ending_inside_a_call_is_the_handlers_doing(status: int) -> None:
    """os._exit(n) or a signal nobody in marshal sent, mid-call: the handler ended the child."""
    end = read_end(status, IN_CALL, killed_by_supervisor=False, now=101.0)
    assert end.code == EXIT_HANDLER_ENDED
    assert end.failed is not None and end.failed.offset == 40


def test_a_call_whose_start_was_not_yet_published_is_still_blamed() -> None:
    """The watchdog publishes the start once a tick: a call that ended the child sooner is
    still the handler's doing (in_call says so), only its duration is unknown."""
    note = EndNote(fence=0, position=40, in_call=True, call_started=0.0, unit_end=None)
    end = read_end(0, note, killed_by_supervisor=False, now=5.0)
    assert end.code == EXIT_HANDLER_ENDED and end.spent_s is None
    assert end.failed is not None and end.failed.offset == 40


def test_a_child_the_supervisor_killed_is_not_the_handlers_fault() -> None:
    """TERM/KILL from the supervisor mid-call: the status stands, no record is blamed."""
    end = read_end(-signal.SIGKILL, IN_CALL, killed_by_supervisor=True, now=101.0)
    assert end.code == -signal.SIGKILL and end.failed is None


def test_an_exit_outside_a_call_keeps_its_status() -> None:
    """The child's own protocol (exit 4 after HandlerFailed, ...) is read as it is."""
    end = read_end(EXIT_HANDLER_FAILED, IDLE, killed_by_supervisor=False, now=1.0)
    assert end == read_end(EXIT_HANDLER_FAILED, IDLE, killed_by_supervisor=False, now=2.0)
    assert end.code == EXIT_HANDLER_FAILED and end.failed is None


@pytest.mark.parametrize("code", [EXIT_HANDLER_TIMEOUT, EXIT_HANDLER_ENDED])
@pytest.mark.parametrize("policy", ["dlq", "skip"])
def test_dlq_or_skip_after_a_kill_respawns_to_settle(code: int, policy: str) -> None:
    """dlq/skip: a fresh child at once (it settles the record), no failure streak."""
    d = exit_with(code, failures=3, on_failure=policy)
    assert d.next is Next.RESPAWN and d.failures == 0


@pytest.mark.parametrize("code", [EXIT_HANDLER_TIMEOUT, EXIT_HANDLER_ENDED])
def test_stop_after_a_kill_follows_the_restart_and_release_rules(code: int) -> None:
    """stop: counted by the caller like exit 4; at the limit the partition is released."""
    assert exit_with(code, failures=1).next is Next.RESTART_LATER
    assert exit_with(code, failures=5).next is Next.RELEASE


def test_a_failure_streak_is_per_offset() -> None:
    """The same offset again extends the streak; another offset starts a new one."""
    assert count_failure(0, None, 7) == 1
    assert count_failure(2, 7, 7) == 3
    assert count_failure(2, 7, 8) == 1


def test_a_call_is_slow_past_half_its_timeout() -> None:
    """Shown as slow past half the timeout; never without a call or without a timeout."""
    assert slow_call(5.1, 10.0) and not slow_call(4.9, 10.0)
    assert not slow_call(None, 10.0) and not slow_call(100.0, None) and not slow_call(9.0, 0.0)
    # a reading that may overstate by a lag (the previous call's start still published) is not
    # slow on the lag alone: back-to-back calls of 0.45 s under a 1 s timeout, read 0.7 s
    assert slow_call(0.7, 1.0) and not slow_call(0.7, 1.0, lag_s=0.25)
    assert slow_call(0.76, 1.0, lag_s=0.25)


def test_the_backstop_times_a_call_from_when_it_was_first_seen() -> None:
    """Same run and record past timeout + grace since first seen: stuck; not a moment before."""
    seen, stuck = watch_call(None, 3, 40, 0.0, now=100.0, timeout_s=10.0)
    assert seen is not None and not stuck
    assert watch_call(seen, 3, 40, 0.0, now=110.9, timeout_s=10.0) == (seen, False)
    assert watch_call(seen, 3, 40, 0.0, now=111.0, timeout_s=10.0) == (seen, True)


def test_the_backstop_starts_again_for_a_new_call() -> None:
    """Another record, or the same record in a new run (a retry), is a new call."""
    seen, _ = watch_call(None, 3, 40, 0.0, now=100.0, timeout_s=10.0)
    for run, position in ((3, 41), (4, 40)):
        again, stuck = watch_call(seen, run, position, 0.0, now=200.0, timeout_s=10.0)
        assert not stuck and again is not None and again.since == 200.0


def test_the_backstop_honours_keepalive_and_idleness() -> None:
    """A keepalive deadline later than the timeout holds; no run, or no timeout: nothing."""
    seen, _ = watch_call(None, 3, 40, 0.0, now=100.0, timeout_s=10.0)
    assert not watch_call(seen, 3, 40, 130.0, now=120.0, timeout_s=10.0)[1]
    assert watch_call(seen, 3, 40, 130.0, now=131.0, timeout_s=10.0)[1]
    assert watch_call(seen, 0, 40, 0.0, now=500.0, timeout_s=10.0) == (None, False)
    assert watch_call(seen, 3, 40, 0.0, now=500.0, timeout_s=None) == (None, False)


def test_a_refused_grant_is_no_failure_and_restarts_at_once() -> None:
    """A grant refused because a coordination write was not made (exit 7) is not a
    crash of the handler: no failure counted, however often, and a prompt restart (three in a
    row released the partition and kept it away for 60 s)."""
    for n in range(10):
        d = exit_with(EXIT_NOT_GRANTED, failures=n)
        assert (d.next, d.failures, d.delay_s) == (Next.RESTART_LATER, n, 0.5)


class TestAFeedLost:
    """A slice child whose host reader was lost (killed, frozen, gone: `supervisor.feeds`)
    ends with the Kafka code. A review: every reader loss counted as a failure of every slice
    child, and a slice with no records never cleared the count, so five reader losses hours
    apart released the slice for a minute."""

    def decide_lost(self, failures: int, lived_s: float) -> ExitDecision:
        return decide(
            code=EXIT_KAFKA, running=True, reloading=False, lease_valid=True,
            failures=failures, max_failures=5, heartbeat_interval_s=HB,
            feed_lost=True, lived_s=lived_s,
        )  # fmt: skip

    def test_a_child_that_ran_a_while_restarts_without_counting(self) -> None:
        """Two heartbeats or more of life: the reader's loss, not a streak of the claim's."""
        decision = self.decide_lost(failures=4, lived_s=2 * HB)
        assert decision.next is Next.RESTART_LATER
        assert decision.failures == 4 and "reader" in decision.reason

    def test_a_child_lost_at_once_counts_as_any_failure(self) -> None:
        """A reader that fails at once every time (it cannot read the partition) is a streak:
        the claim is released after max_handler_failures, as for a direct child."""
        assert self.decide_lost(failures=3, lived_s=0.2).next is Next.RESTART_LATER
        assert self.decide_lost(failures=4, lived_s=0.2).next is Next.RELEASE
