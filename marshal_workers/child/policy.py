"""Error policies: what a child does when its handler raises.

Theory of operation. The child handles a *unit*: one record for a per-record handler, the whole
fetched batch for a ``handle_batch`` plugin (which cannot say which record failed). For a unit:

1. `attempt` calls the handler up to ``1 + retries`` times. Before every attempt it runs the
   caller's check (the child's lease check, which ends the child once the lease is gone, so no
   attempt ever starts outside the lease). Between attempts it asks the caller to wait the
   backoff (``retry_backoff`` seconds, doubling, at most `MAX_BACKOFF_S`); the child waits in
   short slices, checking the lease and its pipe, so a wait never outlives the lease, and a
   wait may be cut short (the supervisor said `Stop`). A handler that raises `StopProcessing`
   is not retried.
2. If every attempt failed, `decide` gives the verdict from the policy:
   - ``dlq``: the child writes the unit's records to the dead-letter topic (`deadletters`), goes on;
   - ``skip``: the child logs the unit with its coordinates, counts it, and goes on;
   - ``stop``: the child reports `HandlerFailed` and exits; the supervisor restarts it with
     backoff and, after ``max_handler_failures`` repeated failures, releases the partition.
   ``dlq`` and ``skip`` are turned into ``stop`` when the unit would be one too many for the
   poison-record rate limit (`PoisonRate`: more than ``max_poison_rate`` units dead-lettered or
   skipped in a minute means something is systematically wrong), and a `StopProcessing` is
   always ``stop``. The rate is the partition's, not the child's: the child tells the
   supervisor of every unit it admits (`Poisoned`), the supervisor keeps the partition's last
   minute of them and starts the next child with it (`ChildSpec.poison_ages`), so a restarted
   child that finds the minute full stops at its first poison unit. The supervisor counts
   every poison-rate stop as a repeated failure, so a partition that keeps hitting the limit is
   released after ``max_handler_failures``.

Any way a handler leaves a call other than by returning is a failure: an exception of any
class (``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit`` included: a handler may not end
the child on its own). A call that ends the process (``os._exit``, a signal) or outlives
``handler_timeout`` cannot be retried in the child: the supervisor settles its record
(`childexits`), and the next child applies dlq or skip to it with a `HandlerEnded` error.

Everything here is pure except what the caller passes in (the clock is a parameter, waiting is
a callable), so the rules are unit-tested without a broker or a process.
"""

from __future__ import annotations

import traceback
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from marshal_workers.handler.errors import StopProcessing
from marshal_workers.ipc.messages import (
    CAUSE_FATAL,
    CAUSE_POISON_RATE,
    CAUSE_POLICY,
    POISON_WINDOW_S,
)

MAX_BACKOFF_S = 30.0


class OnFailure(StrEnum):
    """What to do with a unit whose every attempt failed."""

    DLQ = "dlq"
    SKIP = "skip"
    STOP = "stop"


@dataclass(frozen=True, slots=True)
class FailurePolicy:
    """How handler failures are retried and then settled."""

    retries: int = 3
    retry_backoff_s: float = 0.5
    on_failure: OnFailure = OnFailure.STOP
    max_backoff_s: float = MAX_BACKOFF_S

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after the failed attempt number ``attempt`` (1-based)."""
        return float(min(self.max_backoff_s, self.retry_backoff_s * 2 ** (attempt - 1)))


@dataclass(frozen=True, slots=True)
class Failure:
    """A unit whose attempts all failed: the last error and how many attempts were made."""

    error: BaseException
    attempts: int

    @property
    def fatal(self) -> bool:
        """The handler asked to stop (`StopProcessing`): no policy but stop applies."""
        return isinstance(self.error, StopProcessing)

    @property
    def error_type(self) -> str:
        """The error's qualified class name (builtins without their module)."""
        cls = type(self.error)
        name = cls.__qualname__
        return name if cls.__module__ == "builtins" else f"{cls.__module__}.{name}"

    @property
    def summary(self) -> str:
        """``Type: message``, as one line for logs and `HandlerFailed`."""
        return f"{type(self.error).__name__}: {self.error}"

    @property
    def traceback(self) -> str:
        """The last error's formatted traceback."""
        return "".join(traceback.format_exception(self.error))


def attempt(
    call: Callable[[], object],
    policy: FailurePolicy,
    *,
    before_attempt: Callable[[], None],
    wait: Callable[[float, BaseException, int], bool],
) -> Failure | None:
    """Call ``call`` until it returns, at most ``1 + policy.retries`` times.

    Any exception ends an attempt, ``SystemExit`` and ``KeyboardInterrupt`` included.
    ``before_attempt()`` runs before every attempt and may raise to abandon the unit (the lease
    is gone). ``wait(seconds, error, attempt)`` runs between attempts and returns False to cut
    the retries short. Returns None on success, else the last `Failure`.
    """
    attempts = 0
    while True:
        before_attempt()
        attempts += 1
        try:
            call()
        except BaseException as exc:  # (any way out of a handler is a failure)
            if (
                isinstance(exc, StopProcessing)
                or attempts > policy.retries
                or not wait(policy.backoff(attempts), exc, attempts)
            ):
                return Failure(exc, attempts)
        else:
            return None


class PoisonRate:
    """At most ``per_minute`` poison units (dead-lettered or skipped) in any 60 s window.

    ``per_minute`` 0 means no limit. Time is the caller's (monotonic seconds). ``ages``: units
    admitted before this one started (by earlier children of the partition), in seconds
    before ``now``.
    """

    def __init__(
        self,
        per_minute: int,
        window_s: float = POISON_WINDOW_S,
        *,
        ages: Iterable[float] = (),
        now: float = 0.0,
    ) -> None:
        self.per_minute = per_minute
        self.window_s = window_s
        self._times: deque[float] = deque(sorted(now - age for age in ages if 0 <= age < window_s))

    def admit(self, now: float) -> bool:
        """Count one more poison unit at ``now`` if the limit allows it; False (not counted)
        if it would be one too many."""
        if self.per_minute <= 0:
            return True
        while self._times and self._times[0] <= now - self.window_s:
            self._times.popleft()
        if len(self._times) >= self.per_minute:
            return False
        self._times.append(now)
        return True


@dataclass(frozen=True, slots=True)
class Verdict:
    """What becomes of a failed unit, and why (``cause``: one of the CAUSE_* codes for stop)."""

    action: OnFailure
    cause: str = ""
    detail: str = ""


def decide(policy: FailurePolicy, failure: Failure, rate: PoisonRate, now: float) -> Verdict:
    """The verdict on a unit whose attempts all failed (counts it against ``rate`` if it is to
    be dead-lettered or skipped)."""
    if failure.fatal:
        return Verdict(OnFailure.STOP, CAUSE_FATAL, f"the handler raised {failure.error_type}")
    if policy.on_failure is OnFailure.STOP:
        return Verdict(OnFailure.STOP, CAUSE_POLICY, "on_failure is stop")
    if not rate.admit(now):
        return Verdict(
            OnFailure.STOP,
            CAUSE_POISON_RATE,
            f"more than {rate.per_minute} poison records within {rate.window_s:g} s: "
            "something is systematically wrong, stopping instead of "
            f"{policy.on_failure.value}",
        )
    return Verdict(policy.on_failure)


def dlq_topic_for(template: str, topic: str) -> str:
    """The dead-letter topic of ``topic``: ``{topic}`` in the template replaced by it."""
    return template.replace("{topic}", topic)
