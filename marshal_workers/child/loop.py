"""A child's main thread: set up the handler and consumer, then fetch, (AMO: ask), handle,
report, until told to stop or fenced.

AMO asks ahead (`child.grants`): having fetched run k+1 it sends its `GrantRequest` before it
waits for run k's `Grant` and handles run k, so the coordination log's round trip for one
overlaps the handling of the other. A run is what is fetched already, up to half the
`amo_window` (several batches under one reservation record); the window bounds what a crash
loses. On `Stop` it asks for nothing more and handles every
batch it asked for that the supervisor grants before it exits (a graceful stop loses nothing:
the log reserved those batches for this claim, and nobody else may handle them).

`ChildLoop` checks its lease before every batch and every handler call, hands a failing call
to its `FailureHandling` (retries, then dlq, skip or stop), and unwinds to one
shutdown path that tears the plugin down and tells the supervisor where it stopped. Exit codes
(the protocol between child and supervisor) are listed in `child`'s docstring and defined in
`childexit`.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

from confluent_kafka import Consumer, KafkaException

from marshal_workers.child.callclock import CallClock
from marshal_workers.child.consumer import (
    ConsumerSetupError,
    FatalKafkaError,
    Reach,
    fetch,
    fetch_messages,
    open_consumer,
)
from marshal_workers.child.failurehandling import FailureHandling, failed_once
from marshal_workers.child.fencing import (
    REASON_LEASE_EXPIRED,
    REASON_PARENT_GONE,
)
from marshal_workers.child.grants import Asked, ReservationSizer, record_bytes
from marshal_workers.child.plugin import Plugin
from marshal_workers.child.policy import Failure, FailurePolicy, OnFailure, PoisonRate
from marshal_workers.child.stats import StatsTally, cached_high_watermark
from marshal_workers.common.errors import EXIT_OK, EXIT_RUNTIME
from marshal_workers.common.stacks import log_stacks
from marshal_workers.handler import Context, Record
from marshal_workers.handler.errors import HandlerEnded
from marshal_workers.handler.loading import LoadError, load_handler, working_directory_on_path
from marshal_workers.handler.record import MessageRecords
from marshal_workers.ipc.exits import (
    EXIT_KAFKA,
    EXIT_LEASE_EXPIRED,
    EXIT_NOT_GRANTED,
    EXIT_PARENT_GONE,
    EXIT_SETUP,
    ChildExit,
)
from marshal_workers.ipc.messages import (
    ChildSpec,
    DumpStacks,
    Grant,
    GrantRequest,
    Progress,
    Settle,
    Started,
    Stop,
    Stopped,
    ToChild,
    ToSupervisor,
)
from marshal_workers.ipc.sharedlease import SharedLease
from marshal_workers.protocol.modes import Mode

GRANT_POLL_S = 0.05
# ALO, while full batches keep coming: the least time between two `Progress` (the supervisor
# heartbeats only every HB/2, and each message costs it a loop turn). A short batch (caught up),
# a failure, a retry or the end always reports at once.
PROGRESS_INTERVAL_S = 0.05


# The cyclic collector's thresholds in a child. Every fetched message and record is a tracked
# object, and an AMO child holds a reservation's worth (thousands) until it handles them, so at
# CPython's default (a collection every 700 allocations) a large part of them is traversed over
# and over. Measured on the trivial benchmarks (8 children, 2 cores, docs/design.md decision
# 20): on top of the freeze after setup, these thresholds cut a run's CPU (children, supervisor
# and broker) by 8-24% in AMO and 2-15% in ALO. Cyclic garbage waits longer (about 50,000
# allocations) before it is freed; a plugin may set its own thresholds in its setup.
GC_THRESHOLDS = (50_000, 20, 20)


class ChildLoop:
    """The child's main thread: setup, the fetch-handle loop, shutdown (a failing call goes to
    its `FailureHandling`, which calls back only through the methods `failurehandling.Loop`
    names)."""

    def __init__(self, spec: ChildSpec, lease: SharedLease, conn: Connection, log: Any) -> None:
        self.spec = spec
        self.lease = lease
        self.conn = conn
        self.log = log
        self.ctx = Context(
            client_id=spec.client_id,
            instance_id=spec.instance_id,
            group_id=spec.group_id,
            topic=spec.topic,
            partition=spec.partition,
            fencing_token=spec.fencing_token,
            mode=spec.mode,
            log=log,
            pid=os.getpid(),
            lease_remaining=lease.remaining,
            keepalive=self._keepalive,
            slice=None if spec.slice is None else spec.slice.name,
        )
        self.calls = lease.calls  # the shared cells: handled position, call in progress
        self.call_clock = CallClock(spec.handler_timeout_s)  # read by the watchdog
        self.run_no = 0  # numbers the runs of handler calls (in the shared cells)
        self.plugin: Plugin | None = None  # set once setup() succeeded
        self.consumer: Consumer | None = None
        self.next_offset: int | None = None  # ALO: handled below; AMO: granted below
        self.reported: int | None = None  # the last Progress sent
        self.progress_due = 0.0  # ALO: full batches report at most once per PROGRESS_INTERVAL_S
        self.asked = Asked()  # AMO: the batches asked for, not yet handled
        self.sizer = ReservationSizer(spec.batch_size, spec.amo_window)  # AMO: run sizes
        self.fetch_now = spec  # AMO, with a batch asked for: fetch without waiting (see setup)
        self.stats = StatsTally()  # sent as `Stats` about once a second (see stats)
        self.handled = 0  # records the handler completed (dead letters and skips not counted)
        self.stop_requested = False  # AMO: Stop came; handle the batches granted, then exit
        self.stop_reason = "stop"  # the `Stop`'s reason, for the plugin's teardown
        self.reach = Reach()  # a slice's child: how far it read (other slices' records skipped)
        # retries, then the policy (the spec's, once setup has checked it); the poison rate
        # counts the partition's last minute, not this child's alone (`Poisoned`)
        poison = PoisonRate(spec.max_poison_rate, ages=spec.poison_ages, now=time.monotonic())
        self.failures = FailureHandling(self, FailurePolicy(), poison)

    def run(self) -> int:
        """Run until something ends the child; its exit code."""
        try:
            self._setup()
            self._loop()
        except ChildExit as end:
            return self._shutdown(end)
        except BaseException:  # (nothing may end the child but its protocol)
            self.log.exception("child_crashed")
            return self._shutdown(ChildExit(EXIT_RUNTIME, "crash"))
        raise AssertionError("the loop only ends by ChildExit")  # pragma: no cover

    def _setup(self) -> None:
        gc.set_threshold(*GC_THRESHOLDS)  # before the plugin's setup, which may set its own
        try:
            self.failures.policy = FailurePolicy(
                retries=self.spec.retries,
                retry_backoff_s=self.spec.retry_backoff_s,
                on_failure=OnFailure(self.spec.on_failure),
            )
        except ValueError as exc:
            self.log.error("bad_error_policy", error=str(exc))
            raise ChildExit(EXIT_SETUP, "setup_failed") from None
        try:
            working_directory_on_path()  # the supervisor's (inherited); a spawned child's too
            plugin = Plugin(load_handler(self.spec.handler))
            plugin.setup(self.ctx)
        except LoadError as exc:
            self.log.error("handler_load_failed", handler=self.spec.handler, error=str(exc))
            raise ChildExit(EXIT_SETUP, "setup_failed") from None
        except Exception as exc:
            self.log.exception("handler_setup_failed", handler=self.spec.handler, error=repr(exc))
            raise ChildExit(EXIT_SETUP, "setup_failed") from None
        self.plugin = plugin
        try:
            self.consumer, position = open_consumer(self.spec)
        except ConsumerSetupError as exc:
            self.log.error("consumer_setup_failed", error=str(exc))
            raise ChildExit(EXIT_SETUP, "setup_failed") from None
        except KafkaException as exc:
            self.log.error("kafka_failed", error=str(exc))
            raise ChildExit(EXIT_KAFKA, "kafka_failed") from None
        self.next_offset = self.reported = position
        self.calls.position.value = position
        self.fetch_now = replace(self.spec, batch_timeout_s=0.0)
        if self.failures.policy.on_failure is OnFailure.DLQ:
            self.failures.open_dead_letters(self.consumer)
        # What setup made (modules, the plugin, the consumer) lives as long as the child: frozen,
        # it is not traversed again by every full collection (see GC_THRESHOLDS). Setup's own
        # cyclic garbage is collected first (a frozen object is never freed): about 3 ms.
        gc.collect()
        gc.freeze()
        self.send(Started(os.getpid(), position))
        self.log.info("child_started", mode=str(self.spec.mode), position=position)

    def _loop(self) -> None:
        assert self.consumer is not None
        while True:
            self._read_stop()
            self.send_stats()
            self.require_lease()
            if self.spec.mode == Mode.AMO:
                self._amo_turn()
                continue
            records = self._fetch(self.spec)
            if not records:
                self._past_other_slices()
                self.report_progress()  # caught up (ALO): what is handled is reported
                continue
            self._handle(records)
            self._past_other_slices()
            if len(records) < self.spec.batch_size or time.monotonic() >= self.progress_due:
                self.report_progress()

    def _past_other_slices(self) -> None:
        """ALO, a slice's child, every record it kept handled: what it read beyond its last
        one belongs to other slices, so its position moves to the end of the read (else a
        slice with few records would report, and restart from, far behind its reading)."""
        end = self.reach.end
        if end is not None and self.next_offset is not None and end > self.next_offset:
            self.next_offset = end
            self.calls.position.value = end

    def _fetch(self, spec: ChildSpec) -> Sequence[Record]:
        """A batch: records, or (a batch plugin with ``batch_view = "messages"``) a view over
        the consumer's messages that makes a record only for an item asked for."""
        assert self.consumer is not None and self.plugin is not None
        try:
            if self.plugin.messages:
                return fetch_messages(self.consumer, spec, self.log, self.reach)
            return fetch(self.consumer, spec, self.log, self.reach)
        except (FatalKafkaError, KafkaException) as exc:
            self.log.error("kafka_failed", error=str(exc))
            raise ChildExit(EXIT_KAFKA, "kafka_failed") from None

    def _amo_turn(self) -> None:
        """AMO, asking ahead: fetch the next batch and ask for it, then, once as many batches
        are asked for as may be (or nothing more came), wait for the answer on the oldest and
        handle it. With a batch asked for, the fetch does not wait for records (caught up, the
        batch in hand would wait with it)."""
        asked = self.asked
        fetched = False
        if asked.may_ask() and not self.stop_requested:
            records = self._fetch(self.fetch_now if asked.batches else self.spec)
            if records:
                self.send(asked.ask(self._fill(records)))
                fetched = True
        if asked.batches and (asked.full() or not fetched or self.stop_requested):
            request, reserved = asked.take()
            self._await_grant(request)
            started = time.monotonic()
            step = self.spec.batch_size if self.plugin and self.plugin.handle_batch else 0
            if step and len(reserved) > step:  # a batch plugin gets batches, not the whole run
                for i in range(0, len(reserved), step):
                    self._handle(reserved[i : i + step])
            else:
                self._handle(reserved)
            self.sizer.handled(len(reserved), time.monotonic() - started)

    def _fill(self, records: Sequence[Record]) -> Sequence[Record]:
        """AMO: ``records`` and what more is fetched already, up to one reservation
        (`ReservationSizer`), so that one record in the log reserves several batches (a batch
        plugin's view of the consumer's messages stays one: its batches are its slices)."""
        size = self.sizer.size(record_bytes(records))
        if len(records) + self.spec.batch_size > size:
            return records
        views = isinstance(records, MessageRecords)
        run: list[Any] = (
            list(records.messages) if isinstance(records, MessageRecords) else list(records)
        )
        while len(run) + self.spec.batch_size <= size:
            more = self._fetch(self.fetch_now)
            if not more:
                break
            run.extend(more.messages if isinstance(more, MessageRecords) else more)
        return MessageRecords(run) if views else run

    def _handle(self, records: Sequence[Record]) -> None:
        """Handle a batch in order, each unit through the error policy (see the module doc)."""
        plugin = self.plugin
        assert plugin is not None
        alo = self.spec.mode == Mode.ALO
        settle = self.spec.settle
        if settle is not None:
            records = self._settle_first(records, settle)
            if not records:
                return
        batch = plugin.handle_batch
        if batch is not None:
            first, end = records[0].offset, records[-1].offset + 1
            # batch_view "messages": the plugin gets the consumer's messages themselves
            given = records.messages if isinstance(records, MessageRecords) else records
            self.calls.unit_end.value = end  # the unit: the whole batch
            self.failures.handle_unit(
                records,
                self._in_call(
                    first, self.stats.timed(partial(batch, given, self.ctx), len(records))
                ),
            )
            self.calls.unit_end.value = -1
            if alo:
                self.next_offset = end
            self.calls.position.value = end  # (AMO: what the supervisor counts as handled)
            return
        start = 0
        while start < len(records):
            start = self._handle_run(records, start)

    def _handle_run(self, records: Sequence[Record], start: int) -> int:
        """The per-record hot path: handle ``records[start:]`` until one raises or the lease
        reads expired; settle that one (the policy, or the lease check that ends the child) and
        return where to go on. Per record: one clock reading (the lease check, and the previous
        call's latency), one 8-byte store (the shared position), one call; the bookkeeping is
        done once per run."""
        plugin = self.plugin
        assert plugin is not None
        handle, ctx = plugin.handle, self.ctx
        clock, lease = time.monotonic, self.lease.cell
        # the shared cells (see callcells): per call one store, the record in progress (ALO:
        # everything below it is handled; the supervisor heartbeats it); per run, in_call
        position, in_call = self.calls.position, self.calls.in_call
        starts: list[float] = []
        started = starts.append
        self.call_clock.starts = starts  # the watchdog's view of the call in progress
        self.run_no += 1
        in_call.value = self.run_no
        error: BaseException | None = None
        expired = False
        run = records[start:] if start else records
        first, count = run[0].offset, len(run)
        # the offsets without a property call per record: a range if the run has no gaps
        gapless = run[-1].offset - first == count - 1
        run_offsets = range(first, first + count) if gapless else [r.offset for r in run]
        for offset, record in zip(run_offsets, run, strict=True):
            now = clock()
            if now >= lease.value:
                expired = True
                break
            started(now)
            position.value = offset
            try:
                handle(record, ctx)
            except BaseException as exc:  # any way out is a failure: that was attempt 1
                error = exc
                break
        in_call.value = 0
        self.call_clock.starts = None
        self.stats.observe_calls(starts, clock(), failed=error is not None)
        calls = len(starts)
        done = calls - 1 if error is not None else calls  # handled, in order, from start
        self.handled += done
        if done and self.spec.mode == Mode.ALO:
            self.next_offset = records[start + done - 1].offset + 1
        if error is None and self.next_offset is not None:
            position.value = self.next_offset  # AMO: the granted end (nothing reads it there)
        if expired:
            self.require_lease()  # ends the child (unless extended meanwhile)
            return start + calls
        if error is not None:
            record = records[start + done]
            retry = self._in_call(record.offset, self.stats.timed(partial(handle, record, ctx), 1))
            self.failures.handle_unit([record], failed_once(error, retry))
            if self.spec.mode == Mode.ALO:
                self.next_offset = record.offset + 1
                position.value = self.next_offset
            return start + calls
        return len(records)

    def _in_call(self, offset: int, call: Callable[[], object]) -> Callable[[], object]:
        """``call`` (a retry, or a ``handle_batch`` call) with the cells and the call clock
        saying that a handler call on ``offset`` is in progress while it runs."""
        cells, clock = self.calls, self.call_clock

        def in_call() -> object:
            cells.position.value = offset
            clock.starts = [time.monotonic()]
            self.run_no += 1
            cells.in_call.value = self.run_no
            try:
                return call()
            finally:
                cells.in_call.value = 0
                clock.starts = None

        return in_call

    def _keepalive(self) -> float:
        """`Context.keepalive`: the call in progress may go on for one more handler timeout
        from now, never past the lease; the seconds it has left."""
        left = self.call_clock.keepalive(time.monotonic(), self.lease.deadline)
        self.calls.keep_until.value = self.call_clock.deadline()  # for the supervisor's backstop
        return left

    def _settle_first(self, records: Sequence[Record], settle: Settle) -> Sequence[Record]:
        """The previous child of this claim ended inside a handler call on ``settle``'s offsets
        (a timeout, ``os._exit``, a signal): dead-letter or skip them by the policy without
        calling the handler again, and return the rest of the batch. Only once, and only if
        the batch starts there (else the claim moved on: nothing to settle)."""
        self.spec = replace(self.spec, settle=None)
        if records[0].offset != settle.offset:
            return records
        count = sum(1 for r in records if r.offset < settle.end)
        unit = records[:count]
        self.failures.settle(unit, Failure(HandlerEnded(settle.error), attempts=1))
        if self.spec.mode == Mode.ALO:
            self.next_offset = unit[-1].offset + 1
            self.calls.position.value = self.next_offset
        return records[count:]

    def _await_grant(self, request: GrantRequest) -> None:
        """AMO: wait for the answer on ``request``; return only if granted (the granted end is
        then the position this child reports)."""
        grant = self._grant_for(request)
        if not grant.granted:
            self.log.warning(
                "grant_refused", start=request.start, end=request.end, reason=grant.reason
            )
            if self.stop_requested:  # (asked before the stop: nothing of it reserved for us)
                raise ChildExit(EXIT_OK, self.stop_reason, Stopped(self.next_offset))
            raise ChildExit(EXIT_NOT_GRANTED, "not_granted")
        self.next_offset = request.end

    def _grant_for(self, request: GrantRequest) -> Grant:
        """The supervisor's answer to ``request``, the lease and `Stop` checked while waiting."""
        answered = self.asked.answer(request)
        if answered is not None:
            return answered
        while True:
            self.require_lease()
            msg = self.receive(min(GRANT_POLL_S, max(0.0, self.lease.remaining())))
            if isinstance(msg, Grant) and msg.request_id == request.request_id:
                return msg
            if isinstance(msg, Stop):  # the answer comes all the same: a granted batch is ours
                self.log.info("stop_while_awaiting_grant", start=request.start, end=request.end)
                self.stop_requested, self.stop_reason = True, msg.reason
                continue
            self.aside(msg)

    def _read_stop(self) -> None:
        """Drain the pipe; on `Stop`, end with `Stopped` (the batch in hand is already done),
        once no batch asked for is left (AMO: each is handled if granted, see the module doc)."""
        while (msg := self.receive(0.0)) is not None:
            if isinstance(msg, Stop):
                self.stop_requested, self.stop_reason = True, msg.reason
            else:
                self.aside(msg)
        if self.stop_requested and not self.asked.batches:
            raise ChildExit(EXIT_OK, self.stop_reason, Stopped(self.next_offset))

    def aside(self, msg: ToChild | None) -> None:
        """A message read while waiting for another (`Stop` is each waiter's own): answer
        `DumpStacks`, keep an answer on a batch asked for (AMO), log anything unexpected; None
        (nothing came) is ignored."""
        if isinstance(msg, DumpStacks):
            log_stacks(self.log, "stack_dump")
        elif isinstance(msg, Grant) and self.asked.keep(msg):
            return  # taken when its batch comes up
        elif msg is not None:
            self.log.warning("unexpected_message", message=repr(msg))

    def require_lease(self) -> None:
        if not self.lease.valid():
            self.log.warning("lease_expired", deadline=self.lease.deadline)
            raise ChildExit(EXIT_LEASE_EXPIRED, REASON_LEASE_EXPIRED)

    def report_progress(self) -> None:
        """ALO: send `Progress` if records were handled since the last one."""
        if self.spec.mode == Mode.ALO and self.next_offset != self.reported:
            assert self.next_offset is not None
            self.calls.position.value = self.next_offset
            self.send(Progress(self.next_offset))
            self.reported = self.next_offset
            self.progress_due = time.monotonic() + PROGRESS_INTERVAL_S

    def send_stats(self, final: bool = False) -> None:
        """Send `Stats` when one is due (or ``final``) and there is something to say."""
        if not (final or self.stats.due()):
            return
        high = None
        if self.consumer is not None:
            high = cached_high_watermark(self.consumer, self.spec.topic, self.spec.partition)
        stats = self.stats.report(high)
        if final and not (stats.handled or any(stats.latency_counts) or stats.errors):
            return
        self.send(stats)

    def receive(self, timeout: float) -> ToChild | None:
        try:
            if not self.conn.poll(timeout):
                return None
            msg: ToChild = self.conn.recv()
        except (EOFError, OSError):
            raise ChildExit(EXIT_PARENT_GONE, REASON_PARENT_GONE) from None
        return msg

    def send(self, msg: ToSupervisor) -> None:
        try:
            self.conn.send(msg)
        except OSError:
            raise ChildExit(EXIT_PARENT_GONE, REASON_PARENT_GONE) from None

    def _shutdown(self, end: ChildExit) -> int:
        """Report what was done, tear the plugin down, send the final message, close."""
        if end.reason != REASON_PARENT_GONE:
            with contextlib.suppress(ChildExit):
                self.report_progress()
            with contextlib.suppress(ChildExit):
                self.send_stats(final=True)
        if self.plugin is not None:
            try:
                self.plugin.teardown(self.ctx, end.reason)
            except Exception:
                self.log.exception("handler_teardown_failed", reason=end.reason)
        if end.final is not None:
            with contextlib.suppress(ChildExit):
                self.send(end.final)
        if self.consumer is not None:
            try:
                self.consumer.close()
            except Exception as exc:
                self.log.warning("consumer_close_failed", error=repr(exc))
        self.failures.close()
        self.log.info(
            "child_exit",
            reason=end.reason,
            exit_code=end.code,
            handled=self.handled,
            dead_lettered=self.failures.dead_lettered,
            skipped=self.failures.skipped,
        )
        return end.code
