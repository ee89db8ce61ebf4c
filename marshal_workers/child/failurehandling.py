"""A child's handler failures: retries, then the policy (dlq, skip or stop; see `child.policy`).

`FailureHandling` is the part of the handling step (`child.handling.Handling`) that a failing
handler call goes to: it retries with backoff (the lease and the pipe checked throughout), then
carries out the policy's verdict on the unit, dead-lettering or skipping it, and returns the
verdict (`Failed`); on ``stop`` the handling step calls `stop_child`. It owns its own counts and
the dead-letter producer; it reads the position and sends through the narrow collaborators it
is given (the lease check, the pipe, the reporter), and writes nobody else's state. The hot
path only calls in here on a failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NoReturn

from confluent_kafka import KafkaException

from marshal_workers.child.deadletters import DeadLetterError, DeadLetters, topic_exists
from marshal_workers.child.leasecheck import LeaseCheck
from marshal_workers.child.pipe import Pipe
from marshal_workers.child.policy import (
    Failure,
    FailurePolicy,
    OnFailure,
    PoisonRate,
    Verdict,
    attempt,
    decide,
    dlq_topic_for,
)
from marshal_workers.child.reporting import Reporter
from marshal_workers.handler import Record
from marshal_workers.ipc.exits import EXIT_HANDLER_FAILED, EXIT_OK, ChildExit
from marshal_workers.ipc.messages import (
    CAUSE_DLQ_FAILED,
    ChildSpec,
    HandlerFailed,
    Poisoned,
    Stopped,
)
from marshal_workers.protocol.modes import Mode

RETRY_POLL_S = 0.05


def failed_once(error: BaseException, call: Callable[[], object]) -> Callable[[], object]:
    """``call``, whose first attempt already raised ``error``: the first call raises it again
    (without running the handler twice), later calls (the retries) run ``call``."""
    pending = [error]

    def again() -> object:
        if pending:
            raise pending.pop()
        return call()

    return again


@dataclass(frozen=True, slots=True)
class Failed:
    """A unit whose attempts all failed, and the verdict on it: dlq and skip are carried out
    already (the unit is dealt with), stop is for the caller (`FailureHandling.stop_child`)."""

    failure: Failure
    verdict: Verdict


class FailureHandling:
    """Retries and the failure policy for one child's handling step."""

    def __init__(
        self,
        spec: ChildSpec,
        log: Any,
        lease: LeaseCheck,
        pipe: Pipe,
        reporter: Reporter,
        poison: PoisonRate,
        policy: FailurePolicy,
    ) -> None:
        self.spec = spec
        self.log = log
        self.lease = lease
        self.pipe = pipe
        self.reporter = reporter
        self.poison = poison
        self.policy = policy
        self.dead_letters: DeadLetters | None = None  # on_failure dlq: `open_dead_letters`
        self.dead_lettered = 0
        self.skipped = 0

    def close(self) -> None:
        """Close the dead-letter producer, if there is one (a failure is logged, not raised)."""
        if self.dead_letters is not None:
            try:
                self.dead_letters.close()
            except Exception as exc:
                self.log.warning("dlq_producer_close_failed", error=repr(exc))

    def handle_unit(self, unit: Sequence[Record], call: Callable[[], object]) -> Failed | None:
        """Handle one record (or a batch) with retries: None once it is handled; if it fails
        for good, the verdict on it (dlq and skip carried out). ALO: `Stop` during a retry's
        wait ends the child before the unit."""
        failure = attempt(
            call,
            self.policy,
            before_attempt=self.lease.require,
            wait=partial(self._retry_wait, unit),
        )
        return None if failure is None else self.settle(unit, failure)

    def settle(self, unit: Sequence[Record], failure: Failure) -> Failed:
        """The policy's verdict on a unit that failed for good: dead-letter it or skip it (then
        it is dealt with), or stop (the caller's to carry out: `stop_child`)."""
        verdict = decide(self.policy, failure, self.poison, time.monotonic())
        if verdict.action is not OnFailure.STOP and self.poison.per_minute > 0:
            self.pipe.send(Poisoned())  # counted: the supervisor passes it on to the next child
        if verdict.action is OnFailure.DLQ:
            verdict = self._dead_letter(unit, failure)
        elif verdict.action is OnFailure.SKIP:
            self.reporter.stats.error("skip")
            self.skipped += len(unit)
            self.log.warning(
                "handler_failed_record_skipped",
                offset=unit[0].offset,
                last_offset=unit[-1].offset,
                records=len(unit),
                attempts=failure.attempts,
                error=failure.summary,
                exc_info=failure.error,
            )
        return Failed(failure, verdict)

    def _retry_wait(
        self, unit: Sequence[Record], seconds: float, error: BaseException, attempt_no: int
    ) -> bool:
        """Wait ``seconds`` before the next attempt, checking the lease and the pipe throughout;
        False to give up retrying. `Stop` (a TERM, a rebalance, a reload): ALO ends the child
        here, before the unit (its next holder tries it); AMO has reserved the unit and the
        rest of its run, so a graceful stop finishes them: under ``dlq`` the retries are cut
        short (the unit is dead-lettered at once, nothing lost), under ``stop`` and ``skip``
        they are kept, backoff and all (cut short, ``stop`` lost the unit and the rest of the
        run, ``skip`` the unit: records a retry might have handled). A stop that outlasts
        ``stop_timeout`` is the supervisor's kill, a crash."""
        reporter = self.reporter
        reporter.stats.error("retry")
        self.log.warning(
            "handler_attempt_failed",
            offset=unit[0].offset,
            last_offset=unit[-1].offset,
            attempt=attempt_no,
            attempts=self.policy.retries + 1,
            retry_in=round(seconds, 3),
            error=f"{type(error).__name__}: {error}",
        )
        reporter.report()  # what came before the failing record is safe to commit now
        kept = False
        until = time.monotonic() + seconds
        while True:
            if self.pipe.stop_requested:  # (read during an earlier wait, or this one)
                if self.spec.mode == Mode.ALO:
                    self.log.info("stop_during_retry", offset=reporter.next_offset)
                    stopped = Stopped(reporter.next_offset)
                    raise ChildExit(EXIT_OK, self.pipe.stop_reason, stopped)
                if self._cut_short():
                    self.log.info("stop_during_retry_retries_cut_short")
                    return False
                if not kept:
                    kept = True
                    self.log.info(
                        "stop_during_retry_retries_kept",
                        offset=unit[0].offset,
                        retry_in=round(max(0.0, until - time.monotonic()), 3),
                        attempts_left=self.policy.retries + 1 - attempt_no,
                    )
            left = until - time.monotonic()
            if left <= 0:
                break
            self.lease.require()
            reporter.send_stats()
            self.pipe.aside(self.pipe.receive(min(RETRY_POLL_S, left)))
        self.lease.require()
        return True

    def _cut_short(self) -> bool:
        """Whether a stop ends an AMO unit's retries (see `_retry_wait`): only where the
        verdict keeps the unit, ``dlq``."""
        return self.policy.on_failure is OnFailure.DLQ

    def open_dead_letters(self, consumer: Any) -> None:
        """on_failure dlq: prepare the producer's home, and warn now if its topic is missing."""
        topic = dlq_topic_for(self.spec.dlq_topic, self.spec.topic)
        self.dead_letters = DeadLetters(self.spec, topic)
        try:
            exists = consumer is None or topic_exists(consumer, topic)
        except KafkaException as exc:
            self.log.warning("dlq_topic_unchecked", dlq_topic=topic, error=str(exc))
            return
        if not exists:
            self.log.warning(
                "dlq_topic_missing",
                dlq_topic=topic,
                consequence="a failing record will stop the child instead (create the topic)",
            )

    def _dead_letter(self, unit: Sequence[Record], failure: Failure) -> Verdict:
        """Write the unit's records to the dead-letter topic and wait for the broker's ack: the
        dlq verdict; if that fails, stop (the records are not counted as handled)."""
        assert self.dead_letters is not None
        try:
            self.dead_letters.write(unit, failure, check=self.lease.require)
        except DeadLetterError as exc:
            return Verdict(OnFailure.STOP, CAUSE_DLQ_FAILED, str(exc))
        self.reporter.stats.error("dlq")
        self.dead_lettered += len(unit)
        self.log.warning(
            "handler_failed_record_dead_lettered",
            offset=unit[0].offset,
            last_offset=unit[-1].offset,
            records=len(unit),
            dlq_topic=self.dead_letters.topic,
            attempts=failure.attempts,
            error=failure.summary,  # the traceback is in the dead letter's headers
        )
        return Verdict(OnFailure.DLQ)

    def stop_child(self, record: Record, failed: Failed, handled: int) -> NoReturn:
        """Stop: report `HandlerFailed` (ALO: after `Progress` up to the record) and end;
        ``handled``: the records the handler completed in this child."""
        failure, verdict = failed.failure, failed.verdict
        lost = {}
        if self.spec.mode == Mode.AMO:  # the rest of the granted run
            lost = {"lost_offsets": f"{record.offset}-{self.reporter.next_offset - 1}"}
        self.log.error(  # the logger is bound with the topic and partition
            "handler_failed_child_stops",
            offset=record.offset,
            attempts=failure.attempts,
            error=failure.summary,
            cause=verdict.cause,
            detail=verdict.detail,
            next="the supervisor restarts the child with backoff; after max_handler_failures "
            "it releases the partition and stops its child",
            **lost,
            exc_info=failure.error,
        )
        self.reporter.report()
        # What was handled before the failure is reported before it: the supervisor takes
        # records handled for work done and forgets the streak of failures, so sent after
        # (with the child's last report) they undid the failure just counted.
        self.reporter.send_stats(final=True)
        self.pipe.send(
            HandlerFailed(
                record.offset,
                failure.summary,
                failure.traceback,
                attempts=failure.attempts,
                handled=handled,
                cause=verdict.cause,
            )
        )
        raise ChildExit(EXIT_HANDLER_FAILED, "handler_failed")
