"""The supervisor's children: spawning, listening, AMO grants, reaping, and what comes next.

`ChildCare` is the half of `Supervisor` that deals with the one child process per held claim:
it starts a child at the claim's position with the claim's lease and token, reads what the
child reports (progress, grant requests, failures, statistics), answers AMO grant requests
only after the reservation is folded as valid, sends TERM then KILL before a lease ends, reaps
exited children, and applies the exit policy (`exitpolicy`): respawn on reload, restart with
backoff, or release. A claim is released only once its child has exited.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable
from multiprocessing.context import SpawnContext
from typing import Any

from marshal_workers import events as ev
from marshal_workers import ipc
from marshal_workers.child import start_child
from marshal_workers.childexit import EXIT_HANDLER_TIMEOUT
from marshal_workers.config import RunConfig
from marshal_workers.coordination import Coordinator
from marshal_workers.datatopics import DataTopics
from marshal_workers.exitpolicy import (
    ChildEnd,
    Next,
    count_failure,
    decide,
    read_end,
    watch_call,
)
from marshal_workers.failures import CAUSE_POISON_RATE
from marshal_workers.holding import Holding, Phase
from marshal_workers.observe import Observer
from marshal_workers.poison import Step
from marshal_workers.poisonlog import PoisonLog
from marshal_workers.protocol import ClaimKey, Message
from marshal_workers.rationalizer import ClaimState, Mode, resume_offset

_ASKED_TO_STOP = (Phase.STOPPING, Phase.RELOADING)  # killed once their stop deadline passes
PARKED_RECHECK_S = 1.0  # wp-child: how often a parked claim looks for an operator's decision


class ChildCare:
    """The children of a supervisor's claims (a base of `Supervisor`, which sets these)."""

    config: RunConfig
    co: Coordinator
    topics: DataTopics
    mp: SpawnContext
    observer: Observer
    hb: float
    kill_grace: float
    holdings: dict[ClaimKey, Holding]
    avoid_until: dict[ClaimKey, float]
    clock: Callable[[], float]
    poison_log: PoisonLog
    _log: Any

    def _decide(self, msg: Message) -> ev.Event | None:
        """Write ``msg`` and fold to it (the supervisor's)."""
        raise NotImplementedError

    def _start_position(self, key: ClaimKey, state: ClaimState | None) -> int:
        known = resume_offset(state, self.config.mode)
        if known is not None:
            return known
        low, high = self.topics.watermarks(key.topic, key.partition)
        return low if self.config.auto_offset_reset == "earliest" else high

    def _spawn(self, holding: Holding, *, restart: bool) -> None:
        if not self._poison_allows(holding):  # wp-child: parked on a poison record
            return
        c = self.config
        spec = ipc.ChildSpec(
            handler=c.handler,
            mode=c.mode,
            bootstrap_servers=c.bootstrap_servers,
            group_id=c.group,
            client_id=c.client_id,
            instance_id=c.instance_id,
            topic=holding.key.topic,
            partition=holding.key.partition,
            start_offset=holding.position,
            fencing_token=holding.token,
            auto_offset_reset=c.auto_offset_reset,
            batch_size=c.batch_size,
            kafka_config=tuple(sorted(c.kafka.items())),
            log_json=c.log_json,
            retries=c.retries,
            retry_backoff_s=c.retry_backoff,
            on_failure=c.on_failure,
            dlq_topic=c.dlq_topic,
            max_poison_rate=c.max_poison_rate,
            handler_timeout_s=c.handler_timeout or None,  # wp-child: the handler deadline
            settle=holding.settle,  # wp-child: a record the last child ended in, to settle
        )
        holding.settle = None
        holding.child = start_child(spec, holding.lease, self.mp)
        holding.term_sent = holding.kill_sent = False
        self.observer.child_started(holding.key, holding.child.pid, restart)
        self._log.info(
            "child started",
            topic=spec.topic,
            partition=spec.partition,
            child_pid=holding.child.pid,
            position=holding.position,
            token=holding.token,
        )

    def _poison_allows(self, holding: Holding) -> bool:
        """wp-child: whether a child may start for the claim (`poisonlog`): not while it is
        parked on a poison record (checked again in a second); past a record an operator
        skipped, the position moves past it first."""
        step, state = self.poison_log.step(holding.key, holding.position)
        if step is Step.PARK:
            holding.restart_at = self.clock() + PARKED_RECHECK_S
            return False
        if step is Step.SKIP and state is not None:
            holding.position = state.offset + 1
            self.co.heartbeat(holding.key, holding.position)
            self._log.warning(
                "poison record skipped by an operator",
                topic=holding.key.topic,
                partition=holding.key.partition,
                offset=state.offset,
                by=state.client_id,
            )
        return True

    def _kill(self, holding: Holding, sig: signal.Signals, why: str) -> None:
        if holding.child is not None:
            holding.child.signal_group(sig)
            holding.term_sent = True
            holding.kill_sent = holding.kill_sent or sig is signal.SIGKILL
            if sig is signal.SIGKILL:
                self.observer.fencing_kill(holding.key, holding.child.pid, why)

    def _read_child(self, holding: Holding) -> None:
        assert holding.child is not None
        conn = holding.child.conn
        with contextlib.suppress(EOFError, OSError):  # a dead child is reaped by the loop
            while conn.poll():
                self._on_child_message(holding, conn.recv())

    def _on_child_message(self, holding: Holding, msg: ipc.ToSupervisor) -> None:
        if isinstance(msg, ipc.Progress | ipc.Stopped) and msg.next_offset is not None:
            holding.position = msg.next_offset
        elif isinstance(msg, ipc.GrantRequest):
            granted, reason = self._grant(holding, msg)
            tell(holding, ipc.Grant(msg.request_id, granted, reason))
        elif isinstance(msg, ipc.Stats):
            if msg.handled > 0:  # the child gets work done: earlier failures are not a streak
                holding.failures = 0
            self.observer.child_stats(holding.key, msg)
        elif isinstance(msg, ipc.HandlerFailed):
            # A failure repeats the last one if nothing succeeded in between: the same offset
            # (ALO restarts there), a child that handled nothing before failing (AMO restarts
            # after the lost batch), or the poison-rate limit again (it restarts the count).
            repeated = holding.failures > 0 and (
                msg.offset == holding.failed_offset
                or msg.handled == 0
                or msg.cause == CAUSE_POISON_RATE
            )
            holding.failures = holding.failures + 1 if repeated else 1
            holding.failed_offset = msg.offset
            self.observer.handler_failed(holding.key, msg.offset, msg.error)
            self.poison_log.note_failure(holding.key, msg.offset, msg.error)  # wp-child
            self._log.error(
                "handler failed",
                topic=holding.key.topic,
                partition=holding.key.partition,
                offset=msg.offset,
                error=msg.error,
                cause=msg.cause,
                attempts=msg.attempts,
                failures=holding.failures,
                max_handler_failures=self.config.max_handler_failures,
            )

    def _grant(self, holding: Holding, req: ipc.GrantRequest) -> tuple[bool, str]:
        """AMO: reserve the batch in the log, check the verdict, commit, and only then grant."""
        if holding.phase is not Phase.RUNNING or not holding.lease.valid():
            return False, "claim not held"
        if req.start < holding.position:
            return False, f"batch starts at {req.start}, before the position {holding.position}"
        verdict = self._decide(self.co.reserving(holding.key, req.end))
        if not isinstance(verdict, ev.MessagesClaimed) or holding.phase is not Phase.RUNNING:
            return False, getattr(verdict, "reason", "reservation not confirmed")
        holding.position = req.end
        self.co.heartbeat(holding.key, holding.position)  # the committing heartbeat
        return True, ""

    def _check_children(self, now: float) -> None:
        for holding in list(self.holdings.values()):
            child = holding.child
            if child is None:
                if holding.phase is not Phase.RUNNING:
                    self._finish(holding)
                elif not holding.is_member and now >= holding.restart_at:
                    self._spawn(holding, restart=True)
                continue
            remaining = holding.lease.deadline - now
            if holding.phase in _ASKED_TO_STOP and now >= holding.stop_deadline:
                remaining = min(remaining, 0.0)
            if remaining <= self.kill_grace and not holding.term_sent:
                self._kill(holding, signal.SIGTERM, "lease ending")
            if remaining <= self.kill_grace / 3 and not holding.kill_sent:
                self._kill(holding, signal.SIGKILL, "lease ending")
            if child.exitcode is None:
                self._watch_call(holding, now)  # wp-child: the handler deadline's backstop
            if child.exitcode is not None:
                self._read_child(holding)
                self._on_exit(holding, child.exitcode, now)

    def _refresh_position(self, holding: Holding) -> None:
        """wp-child: ALO, the child's handled position from the shared cells (at heartbeat)."""
        if self.config.mode is Mode.ALO and not holding.is_member:
            shared = holding.lease.calls.handled_position()
            if shared is not None and shared > holding.position:
                holding.position = shared

    def _on_exit(self, holding: Holding, code: int, now: float) -> None:
        assert holding.child is not None
        key, pid = holding.key, holding.child.pid
        # wp-child: whatever the child started dies with it, before the claim can move on
        holding.child.signal_group(signal.SIGKILL)
        holding.child.close()
        holding.child = None
        self._refresh_position(holding)  # wp-child: up to the record it ended in
        end = read_end(
            code,
            holding.lease.calls.take_end_note(),
            killed_by_supervisor=holding.term_sent,
            now=now,
        )
        if end.failed is not None:
            self._on_handler_ended(holding, end)
        code = end.code
        self.observer.child_exited(key, pid, code)
        self._log.info(
            "child exited",
            topic=key.topic,
            partition=key.partition,
            child_pid=pid,
            code=code,
            phase=holding.phase.value,
        )
        decision = decide(
            code=code,
            running=holding.phase is Phase.RUNNING,
            reloading=holding.phase is Phase.RELOADING,
            lease_valid=now < holding.lease.deadline,
            failures=holding.failures,
            max_failures=self.config.max_handler_failures,
            heartbeat_interval_s=self.hb,
            on_failure=self.config.on_failure,
            first_backoff_s=self.config.restart_backoff,  # wp-child: a setting now
        )
        holding.failures = max(holding.failures, decision.failures)
        fields = {"topic": key.topic, "partition": key.partition, "reason": decision.reason}
        if decision.next is Next.RESPAWN:
            holding.phase = Phase.RUNNING
            self._spawn(holding, restart=False)
        elif decision.next is Next.RESTART_LATER:
            holding.phase = Phase.RUNNING
            holding.restart_at = now + decision.delay_s
            log = self._log.warning if code else self._log.info
            log(
                "restarting child",
                **fields,
                offset=holding.failed_offset,
                failures=holding.failures,
                backoff_s=decision.delay_s,
            )
        elif decision.next is Next.RELEASE:
            self._log.error(
                "releasing claim",
                **fields,
                offset=holding.failed_offset,
                failures=holding.failures,
                not_reclaimed_for_s=decision.avoid_s,
            )
            self.avoid_until[key] = now + decision.avoid_s
            holding.phase = Phase.STOPPING  # the child is dead, so releasing is safe; the
            self._finish(holding)  # log refuses the release if the claim was taken meanwhile
        else:
            self._finish(holding)

    def _watch_call(self, holding: Holding, now: float) -> None:
        """wp-child: kill a child whose handler call outlived its deadline by the backstop's
        grace (its watchdog could not: a call holding the GIL in C). The kill is noted as the
        watchdog's would be, so the exit is read as a handler timeout on that record."""
        calls = holding.lease.calls
        holding.call_seen, stuck = watch_call(
            holding.call_seen,
            int(calls.in_call.value),
            calls.handled_position(),
            float(calls.keep_until.value),
            now,
            self.config.handler_timeout or None,
        )
        if stuck and holding.child is not None and not holding.kill_sent:
            self._log.warning(
                "handler call stuck past its deadline: killing the child",
                topic=holding.key.topic,
                partition=holding.key.partition,
                offset=calls.handled_position(),
                handler_timeout_s=self.config.handler_timeout,
            )
            calls.fence.value = EXIT_HANDLER_TIMEOUT
            holding.child.signal_group(signal.SIGKILL)
            holding.call_seen = None

    def _on_handler_ended(self, holding: Holding, end: ChildEnd) -> None:
        """wp-child: the child ended inside a handler call (timeout, os._exit, a signal): a
        failure on that record. dlq/skip: the next child settles it (ALO; in AMO it was granted
        and is lost with the rest of its batch); stop: it counts as a failure."""
        failed = end.failed
        assert failed is not None
        key = holding.key
        self.observer.handler_failed(key, failed.offset, failed.error)
        if self.config.on_failure == "stop":
            holding.failures = count_failure(holding.failures, holding.failed_offset, failed.offset)
            holding.failed_offset = failed.offset
            self.poison_log.note_failure(key, failed.offset, failed.error)
        elif self.config.mode is Mode.ALO:
            holding.settle = failed
        self._log.warning(
            "handler timed out" if end.code == EXIT_HANDLER_TIMEOUT else "handler ended the child",
            topic=key.topic,
            partition=key.partition,
            offset=failed.offset,
            last_offset=failed.end - 1,
            spent_s=end.spent_s,
            handler_timeout_s=self.config.handler_timeout,
            error=failed.error,
            on_failure=self.config.on_failure,
            failures=holding.failures,
            lost=self.config.mode is Mode.AMO,  # AMO: the granted batch is not handled again
        )

    def _finish(self, holding: Holding) -> None:
        """The child is gone: release the claim if it ended gracefully, then forget it."""
        if holding.phase is Phase.STOPPING:
            key = holding.key
            verdict = self._decide(self.co.releasing(key, holding.position))
            confirmed = isinstance(verdict, ev.Released)
            if confirmed:
                self.observer.claim_released(key)
            self._log.info(
                "claim released",
                topic=key.topic,
                partition=key.partition,
                position=holding.position,
                confirmed=confirmed,
            )
        self.holdings.pop(holding.key, None)

    def _stop_child(self, holding: Holding, deadline: float, phase: Phase = Phase.STOPPING) -> None:
        """Ask the child to finish its batch and stop (``phase``: what comes after it exits)."""
        holding.phase = phase
        holding.stop_deadline = deadline  # the lease still ends it earlier if heartbeats fail
        tell(holding, ipc.Stop())


def tell(holding: Holding, msg: ipc.ToChild) -> None:
    """Send to a child; a child that is already gone is reaped by the loop."""
    if holding.child is not None:
        holding.child.send(msg)
