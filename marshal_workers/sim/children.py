"""Simulated children: handlers with a speed, leases they obey, and the records they handle.

A `SimChild` stands for one child process: it starts after a delay, handles records of its
partition at its handler's speed, reads its lease before every record (and its watchdog ends
it at the deadline, even while its supervisor is frozen), asks for grants in AMO one run
ahead as the real child does (the next run is asked for before the answer on the one before
comes, so two reservations are in flight, once its time per record allows it; each sized as
the real child sizes it, by its time per record in virtual time:
`protocol.reservations.ReservationSizer`), publishes its ALO position in "shared
memory", and when told to stop finishes its batch (AMO: and every batch it asked for that is
granted; it asks for nothing new). Every record it handles is reported to the checker with
the virtual time.
"""

from __future__ import annotations

import itertools
import signal
from collections.abc import Callable
from dataclasses import dataclass, field

from marshal_workers.core.childexits import ChildEnd
from marshal_workers.ipc import messages as ipc
from marshal_workers.ipc.exits import (
    EXIT_HANDLER_FAILED,
    EXIT_HANDLER_TIMEOUT,
    EXIT_KAFKA,
    EXIT_LEASE_EXPIRED,
    EXIT_NOT_GRANTED,
)
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.reservations import ReservationSizer
from marshal_workers.protocol.wire import ClaimKey

# A child continued past its lease ends before the call it was stopped in goes on: its SIGCONT
# handler, in the main thread (`child.fencing.fence_on_resume`, `common.threadsignals`). False:
# the defect a CI run showed, the call completed first (the watchdog's fence came later).
FENCE_ON_CONTINUE = True
STATS_INTERVAL_S = 1.0  # `child.stats.REPORT_INTERVAL_S`
LATENCY_SLOTS = len(ipc.LATENCY_BUCKETS)  # the buckets after the first, then +Inf

Handled = Callable[["SimChild", int, float], None]
Died = Callable[["SimChild", int, float], None]


@dataclass(slots=True)
class DataPartition:
    """A data partition: a backlog plus records produced at a steady rate."""

    backlog: int
    rate: float  # records per second
    born: float = 0.0
    poison: dict[int, str] = field(default_factory=dict)  # offset -> "fail" or "hang"

    def high_watermark(self, t: float) -> int:
        """The offset the next produced record gets, at time ``t``."""
        return self.backlog + int(max(0.0, t - self.born) * self.rate)


@dataclass(slots=True)
class SimChild:
    """One child process of a simulated member."""

    cid: str
    key: ClaimKey
    spec: ipc.ChildSpec
    lease: Callable[[], float]  # reads the lease the member's runtime keeps
    data: DataPartition
    speed: float  # records per second
    ready_at: float
    on_handled: Handled
    on_failed: Handled  # a handler call failed (raised, or timed out) on a record
    on_died: Died  # the process ended (its exit code; negative: the signal)
    on_granted: Handled = lambda child, end, t: None  # AMO: a batch up to ``end`` was granted
    position: int = 0
    alive: bool = True
    exit_code: int | None = None
    exited_at: float = 0.0
    stopping: bool = False
    outbox: list[ipc.ToSupervisor] = field(default_factory=list)
    published: int | None = None  # the ALO position in shared memory
    batch: tuple[int, int] | None = None  # AMO: the granted batch being handled
    batch_since: float = 0.0  # AMO: when its handling began (the sizer's timing)
    batch_handled: int = 0  # AMO: records of it handled (a slice's own, as the real child's)
    sizer: ReservationSizer = field(init=False)  # AMO: reservation sizes, as the real child's
    asks: list[tuple[int, int, int]] = field(default_factory=list)  # AMO: unanswered requests
    answers: dict[int, bool] = field(default_factory=dict)  # AMO: answers on `asks`, by id
    asked_end: int = 0  # AMO: the end of the newest batch asked for
    requests: int = 0
    budget: float = 0.0
    hung_until: float = 0.0
    hung_since: float | None = None  # a handler call stuck on a poison record, since
    end: ChildEnd | None = None  # how it ended, as its shared cells would say
    refusals: dict[int, str] = field(default_factory=dict)  # AMO: why, by request id
    refused: str | None = None  # AMO: it ended at a refused grant, for this reason
    stopped_at: int | None = None  # it stopped at a record boundary there (`child.termstop`)
    feed_lost_at: float | None = None  # its records stopped coming (`lose_feed`), at
    # a slice's child (`sim.slices`): the offsets its slice takes; None: the whole partition
    takes: Callable[[int], bool] | None = None
    tally: int = 0  # records handled since the last `Stats`
    calls: int = 0  # handler calls since the last `Stats` (failed ones included)
    stats_due: float = 0.0

    def __post_init__(self) -> None:
        self.position = self.asked_end = self.spec.start_offset or 0
        self.stats_due = self.ready_at + STATS_INTERVAL_S
        # (no growth cap: virtual time times a short run exactly, `ReservationSizer`)
        self.sizer = ReservationSizer(self.spec.batch_size, self.spec.amo_window)

    def _stats(self, t: float, *, final: bool = False) -> None:
        """`ipc.Stats` about once a second, once more before a `HandlerFailed` (the records
        handled before the failure, reported before it, as `child.failurehandling` does) and
        once more as the child ends (not when killed or ended by its watchdog)."""
        if not (final or t >= self.stats_due):
            return
        self.stats_due = t + STATS_INTERVAL_S
        if final and not (self.tally or self.calls):
            return
        latencies = (self.calls,) + (0,) * LATENCY_SLOTS  # (every call in the fastest bucket)
        self.outbox.append(ipc.Stats(self.tally, latencies, 0.0, (), self.data.high_watermark(t)))
        self.tally = self.calls = 0

    def _end(self, code: int, t: float) -> None:
        """The child ends by itself (its loop's `ChildExit`): final `Stats`, then the exit."""
        self._stats(t, final=True)
        self.die(code, t)

    def die(self, code: int, t: float) -> None:
        """The process ends."""
        if self.alive:
            self.alive, self.exit_code, self.exited_at = False, code, t
            self.on_died(self, code, t)

    def continued(self, t: float, stopped_at: float) -> None:
        """SIGCONT after its tree was stopped at ``stopped_at`` (`SimNode.stop_tree`): within
        its lease it goes on; past it, its SIGCONT handler ends it (the watchdog's code) before
        the call it was stopped in goes on (`FENCE_ON_CONTINUE`). With the fix this is what its
        next step does anyway: the fault tests the member's side and the takeovers, and the
        defect test that the checker sees a call completed late."""
        if not self.alive or t < self.lease():
            return
        if not FENCE_ON_CONTINUE and stopped_at >= self.ready_at:
            self._call_completed(t, stopped_at)
        self.die(EXIT_LEASE_EXPIRED, t)

    def _call_completed(self, t: float, stopped_at: float) -> None:
        """The defect: the handler call in progress at the stop, if any, completes now: a
        record there by then, not one that fails or hangs (a poison record's call ends so)."""
        if self.hung_since is not None or self.position in self.data.poison:
            return
        if self.spec.mode is Mode.ALO:
            end = self.data.high_watermark(stopped_at)
        elif self.batch is not None:
            end = self.batch[1]
        else:
            return
        if self.position < end and (self.takes is None or self.takes(self.position)):
            self.on_handled(self, self.position, t)
            self.position += 1

    def lose_feed(self, t: float) -> bool:
        """Its records stop coming (`feed-loss`): the host's reader of its partition ended,
        went silent or broke a rule of the feed (`child.feedsource`), or, a whole partition's
        child, its consumer failed (`child.fetching`). It ends with the Kafka exit code
        between two handler calls, as the real loop does, having published what it handled and
        read past (a batch it never got cannot move its position: the feed's rule); in AMO
        only once every run it asked for is answered and the granted ones handled, as the real
        one finds the feed lost at its next fetch and hands those on first
        (`child.reserving`): the log may have reserved them for its claim (`step` ends it).
        Not while a handler call hangs: the loop sees its feed only between calls, and its
        watchdog ends it at the call's deadline. Whether the loss reached it."""
        if not self.alive or self.hung_since is not None or self.feed_lost_at is not None:
            return False
        self.feed_lost_at = t
        if not (self.spec.mode is Mode.AMO and (self.batch is not None or self.asks)):
            self._feed_lost(t)
        return True

    def _feed_lost(self, t: float) -> None:
        """End with the Kafka exit code, its feed lost; a slice's child (fed by its host's
        reader) says so, as the runtime does (`Supervisor._reap_children`: `ChildEnd.feed_lost`)."""
        if self.spec.slice is not None:
            self.end = ChildEnd(EXIT_KAFKA, feed_lost=True)
        self.stopped_at = self.position  # (between runs: `TermStop.mark_here`)
        self._end(EXIT_KAFKA, t)

    def terminate(self, t: float) -> None:
        """Its member's TERM (`child.termstop`): it stops at the next record boundary, which in
        a step of whole records is now, saying where; inside a hung handler call there is none,
        and the member's KILL ends it (the real one also stops between grants and fetches)."""
        if not self.alive or self.hung_since is not None:
            return
        self.stopped_at = self.position
        self.die(-signal.SIGTERM, t)

    def receive(self, message: ipc.ToChild, t: float) -> None:
        """A message from the supervisor over the pipe."""
        if not self.alive:
            return
        if isinstance(message, ipc.Stop):
            self.stopping = True
        elif isinstance(message, ipc.Grant) and any(message.request_id == a[0] for a in self.asks):
            self.answers[message.request_id] = message.granted  # taken in request order
            if not message.granted:
                self.refusals[message.request_id] = message.reason
            else:
                end = next(a[2] for a in self.asks if a[0] == message.request_id)
                self.on_granted(self, end, t)

    def step(self, t: float, dt: float) -> None:
        """Run for ``dt`` seconds of virtual time ending at ``t``."""
        if not self.alive:
            return
        if t >= self.lease():
            self.die(EXIT_LEASE_EXPIRED, t)  # the watchdog
            return
        if t < self.ready_at or t < self.hung_until:
            return
        if self.feed_lost_at is not None and self.batch is None and not self.asks:
            # AMO: what it asked for is handed on; then the Kafka exit code, after a Stop too,
            # as the real one raises the loss once its last run is handed on (`Reserving.turn`)
            self._feed_lost(t)
            return
        if self.stopping and self.batch is None and not self.asks and not self._carrying():
            self._stats(t, final=True)
            self.outbox.append(ipc.Stopped(self.position))
            self.die(0, t)
            return
        self.budget = min(self.budget + self.speed * dt, self.speed * dt + 1)
        if self.spec.mode is Mode.ALO:
            self._handle_alo(t)
        else:
            self._handle_amo(t, dt)
        if self.alive:
            self._stats(t)

    def _handle_alo(self, t: float) -> None:
        high = self.data.high_watermark(t)
        takes = self.takes
        while self.budget >= 1 and self.position < high:
            if takes is not None and not takes(self.position):
                self.position += 1  # another slice's: read past (`Reporter.past`)
                continue
            if t >= self.lease():
                self.stopped_at = self.position  # (`LeaseCheck.require`, at the boundary)
                self._end(EXIT_LEASE_EXPIRED, t)  # the loop's check before a call
                return
            if self._poisoned(t):
                return
            self.on_handled(self, self.position, t)
            self.tally += 1
            self.calls += 1
            self.position += 1
            self.budget -= 1
            if self.stopping:
                break
        self.published = self.position

    def _poisoned(self, t: float) -> bool:
        """A poison record at the position: the handler raises (the child reports it and exits
        4 under the stop policy), or hangs until the child's watchdog ends it at the handler
        deadline (exit 10, the call noted in the shared cells). Whether the child stopped."""
        kind = self.data.poison.get(self.position)
        if kind == "fail":
            self.on_failed(self, self.position, t)
            self.calls += 1
            self._stats(t, final=True)
            self.outbox.append(ipc.HandlerFailed(self.position, "PoisonError: on purpose", ""))
            self._end(EXIT_HANDLER_FAILED, t)
            return True
        if kind == "hang":
            amo = self.spec.mode is Mode.AMO
            if self.hung_since is None:
                self.hung_since = t
                if amo:  # an attempt however it ends (a kill while hung too): never another
                    self.on_failed(self, self.position, t)
            timeout = self.spec.handler_timeout_s
            if timeout and t - self.hung_since >= timeout:
                failed = ipc.Settle(self.position, self.position + 1, "the handler call timed out")
                self.end = ChildEnd(EXIT_HANDLER_TIMEOUT, failed, t - self.hung_since)
                if not amo:
                    self.on_failed(self, self.position, t)
                self.die(EXIT_HANDLER_TIMEOUT, t)
            return True
        return False

    def _handle_amo(self, t: float, dt: float) -> None:
        if self.batch is None and self.asks and self.asks[0][0] in self.answers:
            request, start, end = self.asks.pop(0)
            if not self.answers.pop(request):  # the batches before it are handled: end here
                self.refused = self.refusals.get(request, "")  # what it asked may be lost
                if self.stopping:  # asked before the stop and refused: a clean end
                    self._stats(t, final=True)
                    self.outbox.append(ipc.Stopped(self.position))
                    self.die(0, t)
                else:
                    self._end(EXIT_NOT_GRANTED, t)
                return
            self.batch, self.position = (start, end), max(self.position, start)
            # its handling begins with this step's budget, earned over (t - dt, t]
            self.batch_since, self.batch_handled = t - dt, 0
        self._ask_ahead(t)
        if self.batch is None:
            return
        _, end = self.batch
        takes = self.takes
        while self.budget >= 1 and self.position < end:
            if takes is not None and not takes(self.position):
                self.position += 1  # another slice's record inside the reserved range
                continue
            if t >= self.lease():
                self.stopped_at = self.position  # (`LeaseCheck.require`, at the boundary)
                self._end(EXIT_LEASE_EXPIRED, t)  # the loop's check before a call
                return
            if self._poisoned(t):  # (`amo-poison`: it ends with the rest of its runs lost)
                return
            self.on_handled(self, self.position, t)
            self.tally += 1
            self.calls += 1
            self.batch_handled += 1
            self.position += 1
            self.budget -= 1
        if self.position >= end:
            self.sizer.handled(self.batch_handled, t - self.batch_since)
            self.batch = None

    def _ask_ahead(self, t: float) -> None:
        """Asking ahead (`child.reserving`): the next run while the one before is handled or
        awaited, as far ahead as the sizer allows (none until a run was timed, nor for slow
        records); a run below `ChildSpec.granted_until` is granted already, not sent."""
        high = self.data.high_watermark(t)
        in_hand = (self.batch is not None) + len(self.asks)
        asking = (not self.stopping or self._carrying()) and self.feed_lost_at is None
        if asking and in_hand <= self.sizer.ahead() and high > self.asked_end:
            size = self.sizer.size(0.0)  # (one record until a run was handled, then by time)
            if self.takes is None:
                start, end = self.asked_end, min(high, self.asked_end + size)
            else:
                start, end = self._slice_run(high, size)
            until = self.spec.granted_until
            if until is not None and start < until:
                end = min(end, until)  # granted before it started (`ChildSpec.granted_until`)
            if start < end:
                self.requests += 1
                self.asks.append((self.requests, start, end))
                if until is not None and start < until:
                    self.answers[self.requests] = True
                    self.on_granted(self, end, t)
                else:
                    self.outbox.append(ipc.GrantRequest(self.requests, start, end))
            self.asked_end = end

    def _carrying(self) -> bool:
        """AMO: records granted before it started (`ChildSpec.granted_until`) are still to be
        asked for: a stop hands them on first, as the real child does (`Reserving.pending`)."""
        until = self.spec.granted_until
        return until is not None and self.asked_end < until

    def _slice_run(self, high: int, size: int) -> tuple[int, int]:
        """AMO, a slice's child: the range to ask for, as the real child asks (`Asked.ask`):
        from its first record after what it asked for to its ``size``-th record's end, or
        ``(high, high)`` when nothing below ``high`` is its slice's (nothing to ask)."""
        assert self.takes is not None
        mine = list(itertools.islice(filter(self.takes, range(self.asked_end, high)), size))
        return (mine[0], mine[-1] + 1) if mine else (high, high)
