"""What the supervisor does when a child exits (pure): respawn, restart later, release, forget.

A child of a claim that is still held exits for one of these reasons:

- it was asked to (graceful release, stop, reload): the caller's phase says what comes next;
- its lease ran out (its heartbeats were not confirmed in time): release the claim (the child
  is dead, so a release is safe; the log refuses it if the claim was taken meanwhile);
- its handler failed (exit 4) or it crashed in any other way (setup failure, Kafka error, a
  signal, a clean exit nobody asked for): restart it after a backoff that doubles with each
  consecutive failure, and after ``max_failures`` of them release the partition and keep away
  from it for a while, so a broken handler or host does not spin;
- it ended inside a handler call: the call outlived ``handler_timeout`` (the watchdog killed the
  child, exit 10, also noted in the shared cells) or the handler ended the process itself
  (``os._exit``, a signal the supervisor did not send: 11). That is a handler failure on the
  record in progress (`read_end` says which): with ``on_failure`` dlq or skip the next child
  settles it (dead-letters or skips it, ALO) and goes on at once; with stop it counts as a
  failure like exit 4.

`read_end` turns an exit status and the shared cells (`exits.EndNote`) into what happened;
`decide` says what comes next. Both are pure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Final

from marshal_workers.ipc.exits import (
    EXIT_HANDLER_ENDED,
    EXIT_HANDLER_FAILED,
    EXIT_HANDLER_TIMEOUT,
    EXIT_NOT_GRANTED,
    EndNote,
)
from marshal_workers.ipc.messages import Settle
from marshal_workers.protocol.unclaimed import keep_away_s

HANDLER_ENDINGS = (EXIT_HANDLER_TIMEOUT, EXIT_HANDLER_ENDED)

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


@dataclass(frozen=True, slots=True)
class ChildEnd:
    """How a child ended: the exit code that counts (the watchdog's noted code, or
    `EXIT_HANDLER_ENDED`), and the handler call it ended in, if that is to blame."""

    code: int
    failed: Settle | None = None
    spent_s: float | None = None
    feed_lost: bool = False  # a slice child whose host reader was lost (`supervisor.feeds`)


def read_end(status: int, note: EndNote, *, killed_by_supervisor: bool, now: float) -> ChildEnd:
    """What a child's exit ``status`` (negative: a signal) and its shared cells say happened.

    The watchdog's note wins (whatever else killed the child meanwhile); a child
    the supervisor signalled ended for the supervisor's reason; a child that ended inside a
    handler call any other way was ended by its handler."""
    in_call = note.in_call and note.position is not None
    spent = round(now - note.call_started, 3) if in_call and note.call_started > 0 else None
    if note.fence or status == EXIT_HANDLER_TIMEOUT:
        note = replace(note, fence=note.fence or status)
        failed = None
        if note.fence == EXIT_HANDLER_TIMEOUT and in_call:
            failed = _unit(
                note,
                "the handler call timed out and was killed"
                + (f" after {spent} s" if spent is not None else ""),
            )
        return ChildEnd(note.fence, failed, spent)
    if killed_by_supervisor or not in_call:
        return ChildEnd(status)
    how = f"killed by signal {-status}" if status < 0 else f"exit code {status}"
    return ChildEnd(
        EXIT_HANDLER_ENDED, _unit(note, f"the handler ended the child process ({how})"), spent
    )


def _unit(note: EndNote, error: str) -> Settle:
    assert note.position is not None
    end = note.unit_end if note.unit_end is not None else note.position + 1
    return Settle(note.position, max(end, note.position + 1), error)


@dataclass(frozen=True, slots=True)
class CallSample:
    """A handler call as the supervisor first saw it: run number and record, and when."""

    run: int
    position: int
    since: float


BACKSTOP_GRACE_S = 1.0  # after the child's own deadline: its watchdog is meant to act first


def watch_call(
    seen: CallSample | None,
    run: int,
    position: int | None,
    keep_until: float,
    now: float,
    timeout_s: float | None,
) -> tuple[CallSample | None, bool]:
    """The supervisor's backstop for a handler deadline the child's watchdog cannot enforce
    (a call that holds the GIL in C starves the watchdog thread): the call seen now, and whether
    it has outlived its timeout (or its keepalive) by `BACKSTOP_GRACE_S` since first seen."""
    if not run or position is None or not timeout_s:
        return None, False
    if seen is None or (seen.run, seen.position) != (run, position):
        return CallSample(run, position, now), False
    deadline = max(seen.since + timeout_s, keep_until) + BACKSTOP_GRACE_S
    return seen, now >= deadline


def count_failure(failures: int, failed_offset: int | None, offset: int) -> int:
    """Consecutive failures after one more on ``offset``: a streak goes on on the same offset,
    starts again at 1 on another."""
    return failures + 1 if failures and failed_offset == offset else 1


LEASE_EXPIRED: Final = "lease expired"  # a release's reason when the lease ran out (and a grant's)
# AMO: a grant's refusal for a batch after one of the same child that was refused
EARLIER_REFUSED: Final = "an earlier batch was refused"
# AMO: a child stopped at a record boundary as its lease was ending; the lease's verdicts decide
LEASE_WAIT: Final = "stopped as its lease was ending; its verdicts decide"


def decide(
    *,
    code: int,
    running: bool,
    reloading: bool,
    lease_valid: bool,
    failures: int,
    max_failures: int,
    heartbeat_interval_s: float,
    on_failure: str = "stop",
    first_backoff_s: float = FIRST_BACKOFF_S,
    parked: bool = False,
    stopped_for_lease: bool = False,
    carries: bool = False,
    feed_lost: bool = False,
    lived_s: float = 0.0,
) -> ExitDecision:
    """Decide after a child exited with ``code``.

    ``running`` is whether the claim was meant to go on (not stopping, releasing or lost),
    ``failures`` counts the consecutive failed runs before this exit (handler failures on one
    offset are counted by the caller as they are reported); ``parked``: the record it failed
    on is parked (`RecordParking.parks`): the holder keeps the claim and starts no child until
    an operator decides, however many failures in a row it has seen. ``feed_lost``: a slice
    child ended as its host's reader was lost, after ``lived_s`` seconds: one that ran two
    heartbeats or more is restarted without a count (the reader's loss is no streak of the
    claim's; a quiet slice, handling nothing, never clears one), one lost sooner counts as
    any failure (a reader that cannot read fails every child at once). ``carries``: AMO, the
    child stopped at a record boundary, so what it was granted and did not start can go to the
    next child of the tenure (`children.carried`): stopped for a lease that is ending, the
    claim waits for the lease's next verdict instead of being let go at once (`Keeping.keep`
    starts that child if the lease runs again, and lets the claim go if it runs out)."""
    if reloading and lease_valid:
        return ExitDecision(Next.RESPAWN, "reload: same claim, fresh code")
    if not running and not reloading:
        return ExitDecision(Next.FINISH, "the child was asked to stop")
    if not lease_valid and stopped_for_lease and carries:
        return ExitDecision(Next.RESTART_LATER, LEASE_WAIT, delay_s=0.0, failures=failures)
    if not lease_valid:
        return ExitDecision(Next.RELEASE, LEASE_EXPIRED, avoid_s=heartbeat_interval_s)
    if code == EXIT_NOT_GRANTED:
        # a batch the log did not reserve (a coordination write not made, a claim that moved
        # on): the handler did nothing wrong, so nothing is counted; the next
        # child starts where the log says
        return ExitDecision(
            Next.RESTART_LATER, "grant refused: restarting", delay_s=first_backoff_s,
            failures=failures,
        )  # fmt: skip
    if stopped_for_lease and code not in (EXIT_HANDLER_FAILED, *HANDLER_ENDINGS):
        return ExitDecision(
            Next.RESPAWN, "stopped as its lease was ending; the lease runs again",
            failures=failures,
        )  # fmt: skip
    if feed_lost and lived_s >= 2 * heartbeat_interval_s:
        return ExitDecision(
            Next.RESTART_LATER, "its host's reader was lost: restarting",
            delay_s=first_backoff_s, failures=failures,
        )  # fmt: skip
    if code in HANDLER_ENDINGS and on_failure != "stop":
        # the next child dead-letters or skips the record at once: not a streak of failures
        return ExitDecision(Next.RESPAWN, f"handler call ended the child: {on_failure}")
    # handler failures (4, and 10/11 under stop) are counted by the caller, per offset
    counted = code in (EXIT_HANDLER_FAILED, *HANDLER_ENDINGS)
    count = failures if counted else failures + 1
    if code == EXIT_HANDLER_TIMEOUT:
        what = "handler timed out"
    elif code == EXIT_HANDLER_ENDED:
        what = "handler ended the child"
    elif code == EXIT_HANDLER_FAILED:
        what = "handler failed"
    elif code == 0:  # nobody asked it to stop: a handler or plugin ended it
        what = "child exited unasked"
    else:
        what = f"child failed (exit {code})"
    if count >= max_failures and not parked:
        avoid = keep_away_s(heartbeat_interval_s)
        return ExitDecision(
            Next.RELEASE,
            f"{what} {count} times: releasing the partition",
            avoid_s=avoid,
            failures=count,
        )
    delay = min(MAX_BACKOFF_S, first_backoff_s * 2 ** max(0, count - 1))
    return ExitDecision(Next.RESTART_LATER, f"{what}: restarting", delay_s=delay, failures=count)


def slow_call(call_s: float | None, handler_timeout_s: float | None, lag_s: float = 0.0) -> bool:
    """Whether a handler call that has run ``call_s`` seconds is past half its timeout (shown in
    the metrics and /healthz before the watchdog kills it at the whole). ``lag_s``: how much
    ``call_s`` may overstate (the supervisor's reading of a call's start can still be the
    previous call's, a watchdog's tick old, `childlink.callstate.watchdog_tick`): not slow on
    that alone."""
    if call_s is None or not handler_timeout_s:
        return False
    return 2 * (call_s - lag_s) > handler_timeout_s
