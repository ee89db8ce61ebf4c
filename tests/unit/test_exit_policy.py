"""What the supervisor does when a child exits: respawn, back off, release, or finish."""

from __future__ import annotations

from marshal_workers.child import EXIT_HANDLER_FAILED, EXIT_SETUP
from marshal_workers.exitpolicy import ExitDecision, Next, decide

HB = 1.0


def exit_with(
    code: int,
    *,
    failures: int = 0,
    running: bool = True,
    reloading: bool = False,
    lease_valid: bool = True,
    max_failures: int = 5,
) -> ExitDecision:
    return decide(
        code=code,
        running=running,
        reloading=reloading,
        lease_valid=lease_valid,
        failures=failures,
        max_failures=max_failures,
        heartbeat_interval_s=HB,
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


def test_an_unasked_clean_exit_restarts_without_counting() -> None:
    """Exit 0 while the claim should run: start again, no failure counted."""
    d = exit_with(0, failures=2)
    assert d.next is Next.RESTART_LATER and d.failures == 2
