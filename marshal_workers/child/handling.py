"""The handling step of the child's chain: the user's handler over a run of records, in order.

`Handling.run` takes a run the earlier steps may hand on (ALO: a fetched batch; AMO: a run the
log granted) and calls the handler on each record, or ``handle_batch`` once per batch, checking
the lease before every call. A call that fails goes to `FailureHandling` (retries, then the
policy's verdict: dead-letter, skip or stop). The step owns what a handler call needs and
leaves behind: the plugin and its `Context`, the shared call cells (the position per call and
the run in progress, for the supervisor), the `CallClock` the watchdog reads, and the count of
records handled; it tells the reporter how far the run is dealt with.

The per-record hot path (`_run_calls`) does, per record, one lease-clock reading (the lease
check, kept as the call's start for the watchdog and the latency statistics), one load of the
shared deadline, one list read (the member's TERM: `child.termstop`, the child stops before the
next call), one 8-byte store (the shared position) and the call; the rest is once per run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from marshal_workers.child.callclock import CallClock
from marshal_workers.child.failurehandling import Failed, FailureHandling, failed_once
from marshal_workers.child.leasecheck import LeaseCheck
from marshal_workers.child.plugin import Plugin
from marshal_workers.child.policy import Failure, OnFailure
from marshal_workers.child.reporting import Reporter
from marshal_workers.childlink.callstate import CallCells
from marshal_workers.handler import Context, Record
from marshal_workers.handler.errors import HandlerEnded
from marshal_workers.handler.record import MessageRecords
from marshal_workers.ipc.messages import Settle


def keepalive(call_clock: CallClock, lease: LeaseCheck, cells: CallCells) -> Callable[[], float]:
    """`Context.keepalive`: the call in progress may go on for one more handler timeout from
    now, never past the lease; the seconds it has left."""

    def keep() -> float:
        left = call_clock.keepalive(lease.clock(), lease.deadline)
        cells.keep_until.value = call_clock.deadline()  # for the supervisor's backstop
        return left

    return keep


class Handling:
    """Runs of records through the handler, each through the failure policy."""

    def __init__(
        self,
        plugin: Plugin,
        ctx: Context,
        lease: LeaseCheck,
        cells: CallCells,
        call_clock: CallClock,
        failures: FailureHandling,
        reporter: Reporter,
        settle: Settle | None = None,
    ) -> None:
        self.plugin = plugin
        self.ctx = ctx
        self.lease = lease
        self.cells = cells
        self.call_clock = call_clock
        self.failures = failures
        self.reporter = reporter
        self.settle = settle  # the previous child's call to dead-letter or skip, once
        self.run_no = 0  # numbers the runs of handler calls (in the shared cells)
        self.handled = 0  # records the handler completed (dead letters and skips not counted)
        # told once the first record is dealt with (a batch plugin: the first batch), then
        # dropped: `child.priority.Lowering.now`
        self.first_dealt_with: Callable[[], None] | None = None

    def run(self, records: Sequence[Record]) -> None:
        """Deal with ``records`` in order (each handled, or settled by the policy), or end the
        child (the lease, or the policy's stop)."""
        done = self.first_dealt_with
        if done is None:
            self._run(records)
            return
        self.first_dealt_with = None
        if self.plugin.handle_batch is None and self.settle is None and len(records) > 1:
            self._run(records[:1])  # the child's first record alone: then `first_dealt_with`
            done()
            self._run(records[1:])
            return
        self._run(records)
        done()

    def _run(self, records: Sequence[Record]) -> None:
        if self.settle is not None:
            records = self._settle_first(records, self.settle)
            if not records:
                return
        if self.plugin.handle_batch is not None:
            self._run_batch(records)
            return
        start = 0
        while start < len(records):
            start = self._run_calls(records, start)

    def _run_batch(self, records: Sequence[Record]) -> None:
        """One ``handle_batch`` call over the batch, the batch its unit."""
        batch = self.plugin.handle_batch
        assert batch is not None
        first, end = records[0].offset, records[-1].offset + 1
        if self.lease.term.asked[0]:  # the member's TERM: stop before the call
            self.lease.term.stop_at(first)
        # batch_view "messages": the plugin gets the consumer's messages themselves
        given = records.messages if isinstance(records, MessageRecords) else records
        self.cells.unit_end.value = end  # the unit: the whole batch
        stats = self.reporter.stats
        call = self._in_call(first, stats.timed(partial(batch, given, self.ctx), len(records)))
        failed = self.failures.handle_unit(records, call)
        self.cells.unit_end.value = -1
        if failed is None:
            self.handled += len(records)
        else:
            self._carry_out(records[0], failed)
        self.reporter.dealt_with(end)

    def _run_calls(self, records: Sequence[Record], start: int) -> int:
        """The per-record hot path: handle ``records[start:]`` until one raises, the lease
        reads expired or the member's TERM came; settle that one (the policy, the lease check
        or the TERM's stop, which end the child before the next record) and return where to
        go on."""
        handle, ctx = self.plugin.handle, self.ctx
        clock, lease = self.lease.clock, self.lease.cell
        term = self.lease.term.asked  # the member's TERM: stop before the next call
        # the shared cells (see `childlink.callstate`): per call one store, the record in progress
        # (ALO: everything below it is handled; the supervisor heartbeats it); per run, in_call
        position, in_call = self.cells.position, self.cells.in_call
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
        stop = None  # the offset it stops before, at the member's TERM
        for offset, record in zip(run_offsets, run, strict=True):
            now = clock()
            if now >= lease.value:
                expired = True
                break
            if term[0]:
                stop = offset
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
        calls = len(starts)
        self.reporter.stats.observe_calls(starts, clock(), failed=error is not None)
        done = calls - 1 if error is not None else calls  # handled, in order, from start
        self.handled += done
        if error is None and not expired and stop is None:
            self.reporter.dealt_with(records[-1].offset + 1)
            return len(records)
        if done:  # what came before is dealt with (a retry's wait reports it)
            self.reporter.dealt_with(records[start + done - 1].offset + 1)
        if stop is not None:
            self.lease.term.stop_at(stop)
        if expired:  # ends the child (unless extended meanwhile), before the next record
            self.lease.require(stop_at=records[start + calls].offset)
            return start + calls
        assert error is not None
        self._retry(records[start + done], error)
        return start + calls

    def _retry(self, record: Record, error: BaseException) -> None:
        """The first call on ``record`` raised ``error``: the retries, then the policy's
        verdict (stop ends the child)."""
        timed = self.reporter.stats.timed(partial(self.plugin.handle, record, self.ctx), 1)
        retry = self._in_call(record.offset, timed)
        failed = self.failures.handle_unit([record], failed_once(error, retry))
        if failed is None:
            self.handled += 1
        else:
            self._carry_out(record, failed)
        self.reporter.dealt_with(record.offset + 1)

    def _carry_out(self, record: Record, failed: Failed) -> None:
        """The policy's verdict on a unit that failed for good: stop ends the child here."""
        if failed.verdict.action is OnFailure.STOP:
            self.failures.stop_child(record, failed, self.handled)

    def _in_call(self, offset: int, call: Callable[[], object]) -> Callable[[], object]:
        """``call`` (a retry, or a ``handle_batch`` call) with the cells and the call clock
        saying that a handler call on ``offset`` is in progress while it runs."""
        cells, call_clock, clock = self.cells, self.call_clock, self.lease.clock

        def in_call() -> object:
            cells.position.value = offset
            call_clock.starts = [clock()]
            self.run_no += 1
            cells.in_call.value = self.run_no
            try:
                return call()
            finally:
                cells.in_call.value = 0
                call_clock.starts = None

        return in_call

    def _settle_first(self, records: Sequence[Record], settle: Settle) -> Sequence[Record]:
        """The previous child of this claim ended inside a handler call on ``settle``'s offsets
        (a timeout, ``os._exit``, a signal): dead-letter or skip them by the policy without
        calling the handler again, and return the rest of the batch. Only once, and only if
        the batch starts there (else the claim moved on: nothing to settle)."""
        self.settle = None
        if records[0].offset != settle.offset:
            return records
        count = sum(1 for r in records if r.offset < settle.end)
        unit = records[:count]
        failed = self.failures.settle(unit, Failure(HandlerEnded(settle.error), attempts=1))
        self._carry_out(unit[0], failed)
        self.reporter.dealt_with(unit[-1].offset + 1)
        return records[count:]
