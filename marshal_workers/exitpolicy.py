"""What the supervisor does when a child exits (pure): respawn, restart later, release, forget.

A child of a claim that is still held exits for one of these reasons:

- it was asked to (graceful release, stop, reload): the caller's phase says what comes next;
- its lease ran out (its heartbeats were not confirmed in time): release the claim (the child
  is dead, so a release is safe; the log refuses it if the claim was taken meanwhile);
- its handler failed (exit 4) or it crashed in any other way (setup failure, Kafka error, a
  signal): restart it after a backoff that doubles with each consecutive failure, and after
  ``max_failures`` of them release the partition and keep away from it for a while, so a
  broken handler or host does not spin.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from marshal_workers.childexit import EXIT_HANDLER_FAILED

MAX_BACKOFF_S = 30.0
FIRST_BACKOFF_S = 0.5


class Next(Enum):
    """The supervisor's next step for the claim."""

    RESPAWN = "respawn"  # start a new child now, same claim
    RESTART_LATER = "restart later"  # start a new child after `delay_s`
    RELEASE = "release"  # release the claim (then keep away for `avoid_s`)
    FINISH = "finish"  # the phase the claim was in decides (release or forget)


@dataclass(frozen=True, slots=True)
class ExitDecision:
    """What to do, and why (logged)."""

    next: Next
    reason: str
    delay_s: float = 0.0
    avoid_s: float = 0.0
    failures: int = 0


def decide(
    *,
    code: int,
    running: bool,
    reloading: bool,
    lease_valid: bool,
    failures: int,
    max_failures: int,
    heartbeat_interval_s: float,
) -> ExitDecision:
    """Decide after a child exited with ``code``.

    ``running`` is whether the claim was meant to go on (not stopping, releasing or lost),
    ``failures`` counts the consecutive failed runs before this exit (handler failures on one
    offset are counted by the caller as they are reported)."""
    if reloading and lease_valid:
        return ExitDecision(Next.RESPAWN, "reload: same claim, fresh code")
    if not running and not reloading:
        return ExitDecision(Next.FINISH, "the child was asked to stop")
    if not lease_valid:
        return ExitDecision(Next.RELEASE, "lease expired", avoid_s=heartbeat_interval_s)
    if code == 0:  # a clean exit nobody asked for: start again, without counting a failure
        return ExitDecision(
            Next.RESTART_LATER, "child stopped", delay_s=FIRST_BACKOFF_S, failures=failures
        )
    count = failures if code == EXIT_HANDLER_FAILED else failures + 1
    what = "handler failed" if code == EXIT_HANDLER_FAILED else f"child failed (exit {code})"
    if count >= max_failures:
        avoid = max(60.0, 10 * heartbeat_interval_s)
        return ExitDecision(
            Next.RELEASE,
            f"{what} {count} times: releasing the partition",
            avoid_s=avoid,
            failures=count,
        )
    delay = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** max(0, count - 1))
    return ExitDecision(Next.RESTART_LATER, f"{what}: restarting", delay_s=delay, failures=count)
