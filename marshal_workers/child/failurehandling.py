"""A child's handler failures: retries, then the policy (dlq, skip or stop; see `failures`).

`FailureHandling` is the part a child's loop (`child.loop.ChildLoop`) owns and hands a failing
handler call to: it retries with backoff (the lease and the pipe checked throughout), then
dead-letters, skips or stops as configured. The hot path only calls in here on a failure; this
calls back only through `Loop`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NoReturn, Protocol

from confluent_kafka import KafkaException

from marshal_workers.child.deadletters import DeadLetterError, DeadLetters, topic_exists
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
from marshal_workers.child.stats import StatsTally
from marshal_workers.handler import Record
from marshal_workers.ipc.exits import EXIT_HANDLER_FAILED, EXIT_OK, ChildExit
from marshal_workers.ipc.messages import (
    CAUSE_DLQ_FAILED,
    ChildSpec,
    HandlerFailed,
    Poisoned,
    Stop,
    Stopped,
    ToChild,
    ToSupervisor,
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


class Loop(Protocol):
    """What failure handling needs of the child's loop (`ChildLoop`), and all it may touch."""

    spec: ChildSpec
    log: Any
    stats: StatsTally
    handled: int  # records the handler completed
    next_offset: int | None  # ALO: handled below; AMO: granted below
    stop_requested: bool  # AMO: `Stop` came
    stop_reason: str  # its reason (the plugin's teardown gets it)

    def require_lease(self) -> None: ...

    def report_progress(self) -> None: ...

    def send_stats(self, final: bool = False) -> None: ...

    def receive(self, timeout: float) -> ToChild | None: ...

    def send(self, msg: ToSupervisor) -> None: ...

    def aside(self, msg: ToChild | None) -> None: ...


class FailureHandling:
    """Retries and the failure policy for one child's loop."""

    def __init__(self, loop: Loop, policy: FailurePolicy, poison: PoisonRate) -> None:
        self.loop = loop
        self.policy = policy
        self.poison = poison
        self.dead_letters: DeadLetters | None = None  # on_failure dlq: `open_dead_letters`
        self.dead_lettered = 0
        self.skipped = 0

    def close(self) -> None:
        """Close the dead-letter producer, if there is one (a failure is logged, not raised)."""
        if self.dead_letters is not None:
            try:
                self.dead_letters.close()
            except Exception as exc:
                self.loop.log.warning("dlq_producer_close_failed", error=repr(exc))

    def handle_unit(self, unit: Sequence[Record], call: Callable[[], object]) -> None:
        """Handle one record (or a batch) with retries; settle it by the policy if it fails.

        Returns once the unit is handled, dead-lettered or skipped; otherwise ends the child."""
        failure = attempt(
            call,
            self.policy,
            before_attempt=self.loop.require_lease,
            wait=partial(self._retry_wait, unit),
        )
        if failure is None:
            self.loop.handled += len(unit)
            return
        self.settle(unit, failure)

    def settle(self, unit: Sequence[Record], failure: Failure) -> None:
        """Settle a unit that failed for good by the policy: dead-letter, skip, or stop."""
        verdict = decide(self.policy, failure, self.poison, time.monotonic())
        if verdict.action is not OnFailure.STOP and self.poison.per_minute > 0:
            self.loop.send(Poisoned())  # counted: the supervisor passes it on to the next child
        if verdict.action is OnFailure.DLQ:
            self._dead_letter(unit, failure)
        elif verdict.action is OnFailure.SKIP:
            self.loop.stats.error("skip")
            self.skipped += len(unit)
            self.loop.log.warning(
                "handler_failed_record_skipped",
                offset=unit[0].offset,
                last_offset=unit[-1].offset,
                records=len(unit),
                attempts=failure.attempts,
                error=failure.summary,
                exc_info=failure.error,
            )
        else:
            self._failed(unit[0], failure, verdict)  # the supervisor counts stops

    def _retry_wait(
        self, unit: Sequence[Record], seconds: float, error: BaseException, attempt_no: int
    ) -> bool:
        """Wait ``seconds`` before the next attempt, checking the lease and the pipe throughout;
        False to give up retrying (AMO: `Stop` came). ALO: `Stop` ends the child here."""
        if self.loop.stop_requested:
            return False
        self.loop.stats.error("retry")
        self.loop.log.warning(
            "handler_attempt_failed",
            offset=unit[0].offset,
            last_offset=unit[-1].offset,
            attempt=attempt_no,
            attempts=self.policy.retries + 1,
            retry_in=round(seconds, 3),
            error=f"{type(error).__name__}: {error}",
        )
        self.loop.report_progress()  # what came before the failing record is safe to commit now
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            self.loop.require_lease()
            self.loop.send_stats()
            msg = self.loop.receive(min(RETRY_POLL_S, left))
            if isinstance(msg, Stop):
                if self.loop.spec.mode == Mode.ALO:
                    self.loop.log.info("stop_during_retry", offset=self.loop.next_offset)
                    raise ChildExit(EXIT_OK, msg.reason, Stopped(self.loop.next_offset))
                self.loop.log.info("stop_during_retry_retries_cut_short")
                self.loop.stop_requested, self.loop.stop_reason = True, msg.reason
                return False
            self.loop.aside(msg)
        self.loop.require_lease()
        return True

    def open_dead_letters(self, consumer: Any) -> None:
        """on_failure dlq: prepare the producer's home, and warn now if its topic is missing."""
        topic = dlq_topic_for(self.loop.spec.dlq_topic, self.loop.spec.topic)
        self.dead_letters = DeadLetters(self.loop.spec, topic)
        try:
            exists = consumer is None or topic_exists(consumer, topic)
        except KafkaException as exc:
            self.loop.log.warning("dlq_topic_unchecked", dlq_topic=topic, error=str(exc))
            return
        if not exists:
            self.loop.log.warning(
                "dlq_topic_missing",
                dlq_topic=topic,
                consequence="a failing record will stop the child instead (create the topic)",
            )

    def _dead_letter(self, unit: Sequence[Record], failure: Failure) -> None:
        """Write the unit's records to the dead-letter topic and wait for the broker's ack;
        if that fails, the child stops (the records are not counted as handled)."""
        assert self.dead_letters is not None
        try:
            self.dead_letters.write(unit, failure, check=self.loop.require_lease)
        except DeadLetterError as exc:
            self._failed(unit[0], failure, Verdict(OnFailure.STOP, CAUSE_DLQ_FAILED, str(exc)))
        self.loop.stats.error("dlq")
        self.dead_lettered += len(unit)
        self.loop.log.warning(
            "handler_failed_record_dead_lettered",
            offset=unit[0].offset,
            last_offset=unit[-1].offset,
            records=len(unit),
            dlq_topic=self.dead_letters.topic,
            attempts=failure.attempts,
            error=failure.summary,  # the traceback is in the dead letter's headers
        )

    def _failed(self, record: Record, failure: Failure, verdict: Verdict) -> NoReturn:
        """Stop: report `HandlerFailed` (ALO: after `Progress` up to the record) and end."""
        lost = {}
        if self.loop.spec.mode == Mode.AMO and self.loop.next_offset is not None:
            lost = {"lost_offsets": f"{record.offset}-{self.loop.next_offset - 1}"}  # granted batch
        self.loop.log.error(  # the logger is bound with the topic and partition
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
        self.loop.report_progress()
        self.loop.send(
            HandlerFailed(
                record.offset,
                failure.summary,
                failure.traceback,
                attempts=failure.attempts,
                handled=self.loop.handled,
                cause=verdict.cause,
            )
        )
        raise ChildExit(EXIT_HANDLER_FAILED, "handler_failed")
