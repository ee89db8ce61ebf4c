"""What must hold in every simulated run, checked as it runs and at its end.

- ``no_overlap``: no two processes handle one partition at overlapping virtual times (each
  child's handling, from its first record to its last, is disjoint from every other child's on
  that partition);
- ``amo_no_double_grant``: in AMO no offset is handled twice;
- ``amo_loss_only_on_crash``: in AMO every offset below the position the log ends with was
  handled, except those a child had asked for and not handled when it crashed (killed, its lease
  ran out, its handler failed or hung) or a fault refused a grant it asked for (a reservation
  whose write timed out may have landed: `FAULT_REFUSALS`; its member reports such a landing
  as a write given up on, `AmoLost.given_up`, also once the child that asked has ended); each
  such window is at most what a child may have reserved (``amo_window``: ``AHEAD + 1``
  reservations of up to half of it). A child that stopped gracefully (exit 0), or whose feed
  was lost (the Kafka exit code after `feed-loss`: it hands on what it asked for first),
  explains no loss; nor does one that stopped at a record boundary for its lease (its member's
  TERM, its own lease check) unless its tenure ended there and the log shows a crash's loss
  over what it left (`protocol.amolosses`: taken over, gone stale, refused, replaced; what the
  audit accepts): a tenure that goes on hands it to its next child (`core.children.carried`;
  a CI chaos run lost 974..1024 so), and a release over it says it was handled (seed 5200003
  of `failures,read-latency,stall`, 8 faults at 0.3: 761..766);
- ``amo_loss_reported``: in AMO every offset below the position the log ends with that nobody
  handled was reported lost: by a member (its `AmoLost`: the warning `amo_records_lost` and
  the loss metric) or by the log (`protocol.amolosses`, what `marshal-admin status` shows:
  a crashed or replaced holder's last reservations, a release's unhandled rest), whatever the
  path (a reservation given up on but landed included); but what children still had in hand
  at the end, and, under a cleaner below the safe window, a reservation no fold could
  confirm and what a holder that started from a compacted fold's estimate above the whole
  log's position passed over (`holder_started`); a loss a member reports as a child of the
  claim ends names the handler (cause `handler_failed`) exactly when that child's handler
  failed (it raised under the `stop` policy, exit 4, or outlived its deadline, exit 10), a
  crash or the lease otherwise (a metric that blames the wrong thing sends operators to the
  wrong place: `amo-poison`); and no offset a member reported lost as
  reserved and granted to nobody (cause `refused`) while it held the claim was handled after
  all by a child of that tenure (a report that is not true teaches operators to ignore it; a
  later holder may handle such records where a cleaner removed the reservation, decision
  19's residual);
- ``alo_no_skip``: in ALO every offset below the position the log ends with was handled (but
  a record an operator skipped: skip-record, accepted by the whole log), from
  where the partition's first claim started (its reset's watermark: groups alternate between
  ``earliest`` and ``latest``, and a start lookup answers the retained range's end; a claim
  starts where a member adopts a lookup's answer, not where it asks: a member stopped or
  killed with its lookup on the way started nothing);
- ``alo_rehandle_bound``: in ALO a record is handled again only if its first handling was in
  the last 2*HB + 0.5 s of its handler's work (a heartbeat carries the position of at most
  HB/2 ago; a frozen supervisor's children work on for its 2*HB lease). Work, not wall time:
  while the handler's host is stopped with every clock held (`stall`) nothing is handled nor
  written, and nothing shows the stop until a record of the log does;
- ``fold_agreement``: every member's fold agrees with a reader of the whole, uncompacted log
  read up to the same offsets on who holds each claim it considers certain, with which token,
  and where a new holder would resume it never on the side that breaks a guarantee, judged by
  what the children had done by the fold's moment (AMO: not below the end of a batch already
  granted, a double; ALO: not above an offset nobody had handled, a skip; a compacted reader's
  position is an estimate and may differ from the whole log's otherwise): at the end of the
  run, and at every fault's start for every live member (a member the fault kills is judged
  by its last fold);
- ``isolation``: a member writes only about its own group's claims;
- ``pause_respected``: a member writes no data claim while its own fold shows another client's
  pause of its group in force (from its first round on);
- ``poison_bounded``: a record that always fails is attempted at most ``park_after`` times,
  across members, restarts and compaction, plus one for each failure whose count never reached
  the log because its member was killed, frozen, stalled or replaced before it landed, or
  because every write of it failed (``WRITE_TRIES``). Checked exactly: the whole log's fold
  counts at most ``park_after`` distinct failures of a record between two retries of it by an
  operator (nobody tries a record the log has parked; the same record written again after a
  write that timed out and landed is one failure), and each member's failures on a claim that
  the whole log did not count are at most the faults that member suffered (one fault loses at
  most the count in flight of each claim);
- ``retry_heeded``: after an operator's retry of a failing record (``marshal-admin
  retry-record``), the fleet tries the record again within `retry_bound_s` of log time (a
  settle, a pause and a handler deadline): nothing that released the claim after its failures
  may leave it unclaimed;
- ``release_claimed``: a member whose fold shows another member's release of a data claim of
  its group, and that has room for it in its fair share, claims it in that same turn, whatever
  it handed over recently, unless it is reading the log again after its lease clock stood
  still (`sim.releases`);
- ``handler_deadline``: no handler call outlives its deadline by more than a second;
- ``heartbeat_pace``: a member writes at most two heartbeats of a claim's tenure in any HB/4
  of its lease clock (`sim.pace`);
- ``liveness``: after the last fault, every partition is held by a live member's child and
  moving (a record of its own handled in the last 2 s, or none available for that long: a
  key slice may get one every few seconds), and shares are fair, within the stated bound
  (checked in every run: each ends with a fault-free settle, and the fleet must be converged
  at one of the checks in the `CHECK_WINDOW_S` after the bound, which counts from the last
  fault's end once none is still to come; under lasting write failures, whose leases can end
  at the bound itself, `FAILURES_RECOVERY_HB` longer, or else no problem, a claim held by no
  live child or not moving, a member not announced or over its share, may last past the
  bound on recovering one: at 30% of writes failing one claim or another is always
  recovering, `convergence.Recovering`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from marshal_workers.core.observations import LossCause
from marshal_workers.ipc.exits import EXIT_HANDLER_FAILED, EXIT_HANDLER_TIMEOUT, EXIT_KAFKA
from marshal_workers.protocol.amolosses import CRASH_CAUSES, AmoLoss
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import World, resume_offset
from marshal_workers.protocol.reservations import AHEAD, reservation_size
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.sim.children import SimChild

# AMO: the refusals a fault causes (a write that timed out may have landed; a lease run out;
# a batch behind a position a lost write moved; and those after one). A refusal of a batch the
# log reserved for a claim its member only stops ("claim not held") is a graceful loss.
FAULT_REFUSALS = (
    "reservation not written",
    "not reserved",  # asked before a batch whose write failed, and answered with its refusal
    "lease expired",
    "batch starts at",
    "an earlier batch was refused",
)

# AMO: the causes of a loss a member reports as a child ends (a refusal's and an estimate's are
# reported on other paths); `handler_failed` exactly when the child's handler failed
CHILD_END_CAUSES = frozenset(
    {LossCause.CRASH.value, LossCause.LEASE_EXPIRED.value, LossCause.HANDLER_FAILED.value}
)
HANDLER_FAILED = LossCause.HANDLER_FAILED.value

INVARIANTS = (
    "no_overlap",
    "amo_no_double_grant",
    "amo_loss_only_on_crash",
    "amo_loss_reported",
    "alo_no_skip",
    "alo_rehandle_bound",
    "fold_agreement",
    "isolation",
    "pause_respected",
    "liveness",
    "poison_bounded",
    "retry_heeded",
    "release_claimed",
    "handler_deadline",
    "no_crash",  # `sim.forgery`: no record makes a reader raise
    "own_group_state",  # `sim.forgery`: a member keeps no other group's state
    "one_instance",  # an instance another of its client id replaced stops
    "heartbeat_pace",  # `sim.pace`: at most two heartbeats of a claim's tenure in any HB/4
)


def in_hand(child: SimChild) -> int:
    """The end of what a child asked for or was granted before it started (AMO)."""
    return max(child.asked_end, child.spec.granted_until or 0)


def tenure(child: SimChild) -> tuple[str, str, int]:
    """The tenure a child works under: its node, instance and token."""
    return (child.cid.split("/", 1)[0], child.spec.instance_id, child.spec.fencing_token)


def range_of(key: ClaimKey, start: int, end: int) -> Sequence[int]:
    """Every offset of ``start``..``end``: what a claim on a whole partition covers."""
    return range(start, end)


@dataclass(slots=True)
class Span:
    """One child's handling of its partition: first and last record's time."""

    cid: str
    first: float
    last: float
    instance: str  # the member instance whose child it is (its host's stops: `Checker.stopped`)


@dataclass
class Checker:
    """Collects what the children handled and the violations found."""

    modes: dict[str, Mode]  # by group
    heartbeat_interval: float
    speed: float
    violations: list[dict[str, Any]] = field(default_factory=list)
    spans: dict[ClaimKey, dict[str, Span]] = field(default_factory=lambda: defaultdict(dict))
    counts: dict[ClaimKey, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    first: dict[ClaimKey, dict[int, tuple[float, str]]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    rehandled: dict[ClaimKey, int] = field(default_factory=lambda: defaultdict(int))
    last_handled: dict[ClaimKey, float] = field(default_factory=dict)
    handled_total: int = 0
    park_after: int = 4
    failures: dict[tuple[ClaimKey, int], int] = field(default_factory=dict)
    # per member instance and claim
    failed_by: dict[tuple[str, ClaimKey], int] = field(default_factory=dict)
    skipped: set[tuple[ClaimKey, int]] = field(default_factory=set)  # an operator's skips
    # AMO: per claim, the ranges a child had asked for and not handled when it crashed
    crash_windows: dict[ClaimKey, list[tuple[int, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    graceful_stops: int = 0  # AMO children that ended with exit 0
    starts: dict[ClaimKey, int] = field(default_factory=dict)  # first start of each partition
    # the cleaner ran below the safe window (`eager-compaction`): an unconfirmed reservation
    # ("reservation not confirmed", a fold the cleaner made uncertain) is a fault's refusal
    eager_compaction: bool = False
    # children at work at the end, and reservations still in flight then (`deciding`)
    unfinished: dict[ClaimKey, list[tuple[int, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # the offsets of start..end a claim covers: all of them, bar a slice's (`sim.slices`)
    owed: Callable[[ClaimKey, int, int], Sequence[int]] = range_of
    # the seconds of start..end the host of a member instance was stopped with every clock
    # held (`stall`, `SimNode.stopped_between`)
    stopped: Callable[[str, float, float], float] = lambda instance, start, end: 0.0
    # AMO: per claim, (time, end) of every batch granted to a child, in time order
    grants: dict[ClaimKey, list[tuple[float, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )

    # AMO: per claim, the ranges members reported lost (`AmoLost`)
    reported: dict[ClaimKey, list[tuple[int, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # AMO: the ranges reported lost as passed over by a start at a compacted estimate
    estimated_reported: dict[ClaimKey, list[tuple[int, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # AMO: the ranges reported lost as reserved in the log and granted to nobody by a member
    # holding the claim, with that tenure (instance, token)
    refused_reported: dict[ClaimKey, list[tuple[int, int, tuple[str, int]]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # AMO: per claim, the tenure (instance, token) of the child that first handled each offset
    tenure_of: dict[ClaimKey, dict[int, tuple[str, int]]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    # AMO, under eager compaction: ranges a child asked for and no fold could confirm, and
    # ranges a holder started past from a compacted fold's estimate (`holder_started`)
    unconfirmable: dict[ClaimKey, list[tuple[int, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )

    # AMO: per claim, what children asked for and had not handled when they stopped at a record
    # boundary (their member's TERM as the lease was ending, their own lease check), with the
    # tenure (node, instance, token) and the time; and when each tenure's children were ready
    # (those that were, before they ended)
    lease_stops: dict[ClaimKey, list[tuple[tuple[str, str, int], float, tuple[int, int]]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    tenure_children: dict[ClaimKey, list[tuple[tuple[str, str, int], float]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # AMO: the ranges reported lost as a write given up on that landed after all (a fault of
    # the coordination path: `FAULT_REFUSALS`), which a stop for the lease leaves to nobody
    given_up_reported: dict[ClaimKey, list[tuple[int, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )

    # the invariants this run evaluated on some of its data (`checked` of the JSON summary)
    ran: set[str] = field(default_factory=set)

    def mark(self, invariant: str) -> None:
        """``invariant`` was evaluated in this run."""
        self.ran.add(invariant)

    def granted(self, child: SimChild, end: int, t: float) -> None:
        """AMO: a child was granted a batch ending at ``end``."""
        self.grants[child.key].append((t, end))

    def granted_end(self, key: ClaimKey, at: float) -> int:
        """AMO: the end of everything granted on ``key`` before ``at`` (0: nothing)."""
        return max((end for t, end in self.grants.get(key, ()) if t <= at), default=0)

    def handled_prefix(self, key: ClaimKey, at: float) -> int:
        """ALO: the first offset owed on ``key`` (from its first start) that nobody had
        handled before ``at``: everything below it had been handled."""
        first = self.first.get(key, {})
        offset = self.starts.get(key, 0)
        while (offset in first and first[offset][0] <= at) or not self.owed(
            key, offset, offset + 1
        ):
            offset += 1  # handled, or another slice's (a slice is owed only its own offsets)
        return offset

    def started(self, key: ClaimKey, offset: int) -> None:
        """A claim with no position in the log started at ``offset`` (its reset's watermark):
        the first such start is where the partition's records are owed from."""
        self.starts.setdefault(key, offset)

    def violation(self, invariant: str, detail: str, t: float | None = None) -> None:
        """Record a violation (the first few per invariant are enough)."""
        if sum(1 for v in self.violations if v["invariant"] == invariant) < 5:
            self.violations.append({"invariant": invariant, "detail": detail, "t": t})

    def failed(self, child: SimChild, offset: int, t: float) -> None:
        """A handler call failed on ``offset`` (a poison record; in AMO told as a hung call
        begins, since a kill may end it before its deadline). In AMO the call was an attempt
        all the same: the record is never tried again, nor handled after it
        (`amo_no_double_grant`), and nothing counts its failure in the log (only ALO tries a
        failing record again, so only ALO parks one: `poison_bounded` counts ALO's)."""
        key = child.key
        mark = (key, offset)
        tried = self.failures.get(mark, 0)
        self.failures[mark] = tried + 1
        if self.modes[key.group] is Mode.AMO:
            self.mark("amo_no_double_grant")
            if tried or offset in self.counts.get(key, {}):
                self.violation(
                    "amo_no_double_grant",
                    f"{key.topic}/{key.partition} offset {offset} tried again by {child.cid} "
                    f"(tried before: {tried} failed, {self.counts.get(key, {}).get(offset, 0)} "
                    "handled)",
                    t,
                )
            return
        by = (child.spec.instance_id, key)
        self.failed_by[by] = self.failed_by.get(by, 0) + 1

    @property
    def retry_bound_s(self) -> float:
        """How long after an operator's retry the record must be tried again: the liveness
        settle (10 HB + 3 s), a pause of the group (at most 4 HB) and a handler call's
        deadline (2 HB)."""
        return 16 * self.heartbeat_interval + 3.0

    def retry_tried(
        self, key: ClaimKey, retried_ms: int, tried_ms: int | None, end_ms: int = 0
    ) -> None:
        """An operator retried a record of ``key`` at log time ``retried_ms``; the log counted
        its next failure at ``tried_ms`` (None: not by the end of the log, ``end_ms``)."""
        bound_ms = self.retry_bound_s * 1000
        if tried_ms is None and end_ms - retried_ms <= bound_ms:
            return  # the run ended too soon after it to tell
        self.mark("retry_heeded")
        waited = (tried_ms if tried_ms is not None else end_ms) - retried_ms
        if waited > bound_ms:
            self.violation(
                "retry_heeded",
                f"{key.topic}/{key.partition}: retried by an operator, "
                + ("not tried again" if tried_ms is None else "tried again only")
                + f" {waited / 1000:.1f}s later (bound {self.retry_bound_s:.0f}s)",
                retried_ms / 1000,
            )

    def _poison(
        self, noted: dict[tuple[ClaimKey, int, int], dict[str, int]], faults: dict[str, int]
    ) -> None:
        """``noted``: the failures the whole log's fold counted, per record, epoch (each
        operator's retry of the record starts one: its count starts again) and writer
        instance; ``faults``: the faults each member instance suffered."""
        self.mark("poison_bounded")
        counted_by: dict[tuple[str, ClaimKey], int] = defaultdict(int)
        for (key, offset, epoch), by in noted.items():
            for instance, n in by.items():
                counted_by[(instance, key)] += n
            total = sum(by.values())
            if total > self.park_after:
                tried = self.failures.get((key, offset), 0)
                self.violation(
                    "poison_bounded",
                    f"{key.topic}/{key.partition} offset {offset}: the log counts {total} "
                    f"failures after {epoch} retries by an operator (parked after "
                    f"{self.park_after}; tried {tried} times in all)",
                )
        # A fault (kill, freeze, stall, stop) loses at most the one failure of each claim whose
        # count was on its way: a claim's child ends at its failure, so no second one comes
        # before its count. One freeze with two claims failing loses two (sliced seed 1).
        for (instance, key), n in self.failed_by.items():
            lost = n - counted_by.get((instance, key), 0)
            if lost > faults.get(instance, 0):
                self.violation(
                    "poison_bounded",
                    f"member instance {instance}, {key.topic}/{key.partition}: {lost} failures "
                    f"never counted in the log, after {faults.get(instance, 0)} faults (or "
                    f"counts the log failed to take)",
                )

    def died(self, child: SimChild, code: int, t: float) -> None:
        """A child ended with ``code``: in AMO, what it asked for and did not handle is
        explained (a crash) or not (a graceful end: it must have handled all it was granted)."""
        if self.modes[child.key.group] is not Mode.AMO:
            return
        if child.ready_at <= t:  # (one ended before it was ready took nothing on: seed 7920281)
            self.tenure_children[child.key].append((tenure(child), child.ready_at))
        faults = FAULT_REFUSALS + (("reservation not confirmed",) if self.eager_compaction else ())
        refused = child.refused or ""
        unconfirmed = self.eager_compaction and refused.startswith("reservation not confirmed")
        if unconfirmed and child.asked_end > child.position:
            self.unconfirmable[child.key].append((child.position, child.asked_end))
        if code == 0 and not (child.refused and child.refused.startswith(faults)):
            self.graceful_stops += 1
            return
        if code == EXIT_KAFKA and child.feed_lost_at is not None:
            return  # its feed was lost: it hands on what it asked for first, no crash
        if in_hand(child) > child.position:
            window = (child.position, in_hand(child))
            if child.stopped_at is None:
                self.crash_windows[child.key].append(window)
            else:  # a crash only if its tenure ended there (`_excused`)
                self.lease_stops[child.key].append((tenure(child), t, window))
            bound = (AHEAD + 1) * reservation_size(child.spec.batch_size, child.spec.amo_window)
            lost = len(self.owed(child.key, *window))
            if lost > bound:
                self.violation(
                    "amo_loss_only_on_crash",
                    f"{child.cid} crashed (exit {code}) with {lost} records "
                    f"asked for and not handled ({window[0]}..{window[1]}), above {bound}",
                    t,
                )

    def in_progress(self, child: SimChild) -> None:
        """A child still at work when the run ends: what it asked for is not lost (yet)."""
        self.tenure_children[child.key].append((tenure(child), child.ready_at))
        if in_hand(child) > child.position:
            self.unfinished[child.key].append((child.position, in_hand(child)))

    def holder_started(self, key: ClaimKey, start: int, whole_log_at: int | None) -> None:
        """An AMO holder's child started at ``start``; the whole, uncompacted log would resume
        the claim at ``whole_log_at`` now. Under a cleaner below the safe window a compacted
        fold's position is an estimate that a replaced or frozen holder's refused reservation
        can raise (its key's newest record within seconds there): the records between were
        reserved by no holder the whole log accepted, and no reader of the compacted log can
        tell, so nobody reports them (AMO loss under that cleaner is outside the guarantees:
        seed 157023 of the unordered/4 every-fault mix). Without that cleaner it is no
        excuse: such a start stays a loss nobody reported. Nor is it one for
        ``amo_loss_only_on_crash``, which does not read these ranges: a start that passes over
        records no crashed child had asked for is still a loss outside a crash there."""
        if self.eager_compaction and whole_log_at is not None and start > whole_log_at:
            self.unconfirmable[key].append((whole_log_at, start))

    def deciding(self, key: ClaimKey, start: int, end: int) -> None:
        """A live member's reservation of ``start``..``end`` still in flight when the run ends:
        its verdict, which the end cuts off, grants it or reports it lost (seed 153021 of
        `failures,read-latency,kill,stall` at 0.3: a child TERMed as its lease ended while its
        last request's write was written again)."""
        if end > start:
            self.unfinished[key].append((start, end))

    def handled(self, child: SimChild, offset: int, t: float) -> None:
        """A child handled ``offset`` at ``t``."""
        key = child.key
        self.handled_total += 1
        self.last_handled[key] = t
        span = self.spans[key].get(child.cid)
        if span is None:
            self.spans[key][child.cid] = Span(child.cid, t, t, child.spec.instance_id)
        else:
            span.last = t
        amo = self.modes[key.group] is Mode.AMO
        self.ran.add("amo_no_double_grant" if amo else "alo_rehandle_bound")
        counts = self.counts[key]
        seen = counts.get(offset, 0)
        counts[offset] = seen + 1
        if not seen:
            self.first[key][offset] = (t, child.cid)
            if amo:
                self.tenure_of[key][offset] = (child.spec.instance_id, child.spec.fencing_token)
                if (key, offset) in self.failures:  # (`amo-poison`)
                    self.violation(
                        "amo_no_double_grant",
                        f"{key.topic}/{key.partition} offset {offset} handled by {child.cid} "
                        "after a handler failed on it",
                        t,
                    )
            return
        self.rehandled[key] += 1
        where = f"{key.topic}/{key.partition} offset {offset}"
        if amo:
            self.violation("amo_no_double_grant", f"{where} handled again by {child.cid}", t)
            return
        first_t, first_cid = self.first[key][offset]
        previous = self.spans[key].get(first_cid)
        window = 2 * self.heartbeat_interval + 0.5
        if previous is None:
            return
        stopped = self.stopped(previous.instance, first_t, previous.last)
        work = previous.last - first_t - stopped
        if work > window:
            also = f", its host stopped {stopped:.2f}s of it" if stopped else ""
            self.violation(
                "alo_rehandle_bound",
                f"{where} handled again by {child.cid}: first handled at {first_t:.2f} by "
                f"{first_cid}, {work:.2f}s of work before it stopped{also} (bound "
                f"{window:.1f}s)",
                t,
            )

    def lost_reported(
        self,
        key: ClaimKey,
        start: int,
        end: int,
        tenure: tuple[str, int] | None = None,
        *,
        estimated: bool = False,
        cause: str = "",
        ended: int | None = None,
        given_up: bool = False,
    ) -> None:
        """A member reported ``start``..``end`` of ``key`` lost (AMO). ``tenure`` (its instance
        and the token it holds the claim under), for a report of records reserved in the log
        and granted to nobody while it holds the claim: no child of that tenure may handle any
        of them after all. ``estimated``: passed over by a start at a compacted log's estimate
        (cause `estimate`): nobody was granted them, so no child may have handled any.
        ``ended``: the exit code of the claim's child whose end the report came with; its cause
        (``cause``) says whether that child's handler failed, or not."""
        if ended is not None and cause in CHILD_END_CAUSES:
            self.mark("amo_loss_reported")
            handler = ended in (EXIT_HANDLER_FAILED, EXIT_HANDLER_TIMEOUT)
            if handler != (cause == HANDLER_FAILED):
                self.violation(
                    "amo_loss_reported",
                    f"{key.topic}/{key.partition}: {start}..{end} reported lost to {cause} by "
                    f"a child that ended with exit {ended}",
                )
        self.reported[key].append((start, end))
        if given_up:
            self.given_up_reported[key].append((start, end))
        if tenure is not None:
            self.refused_reported[key].append((start, end, tenure))
        if estimated:
            self.estimated_reported[key].append((start, end))

    def finish(
        self,
        reference: dict[int, World],
        readers: Iterable[tuple[str, float, World]],
        noted: dict[tuple[ClaimKey, int, int], dict[str, int]],
        faults: dict[str, int],
        log_losses: Sequence[AmoLoss] = (),
        settled_losses: Sequence[AmoLoss] | None = None,
    ) -> None:
        """The checks made at the end of a run (``noted`` and ``faults``: see `_poison`;
        ``log_losses``: every loss the whole log shows, `_amo_reported`; ``settled_losses``:
        those it shows once every holder that writes no more has been silent 2*HB,
        `_amo_losses`; ``log_losses`` if not given)."""
        self._overlaps()
        self._alo(reference)
        self._amo_losses(reference, log_losses if settled_losses is None else settled_losses)
        self._amo_reported(reference, log_losses)
        self._poison(noted, faults)
        for name, at, world in readers:
            self.agree(name, world, reference[world.partition], at)

    def _overlaps(self) -> None:
        self.mark("no_overlap")
        for key, by_child in self.spans.items():
            spans = sorted(by_child.values(), key=lambda s: s.first)
            latest: Span | None = None
            for span in spans:
                if latest is not None and span.first <= latest.last:
                    self.violation(
                        "no_overlap",
                        f"{key.topic}/{key.partition}: {span.cid} handled from {span.first:.3f} "
                        f"while {latest.cid} handled until {latest.last:.3f}",
                        span.first,
                    )
                if latest is None or span.last > latest.last:
                    latest = span

    def _alo(self, reference: dict[int, World]) -> None:
        positions = {}
        for world in reference.values():
            for key, state in world.claims.items():
                if state.committed is not None:
                    positions[key] = state.committed
        for key, counts in self.counts.items():
            if self.modes[key.group] is not Mode.ALO:
                continue
            self.mark("alo_no_skip")
            committed = positions.get(key, 0)
            owed = self.owed(key, self.starts.get(key, 0), committed)
            missing = [o for o in owed if o not in counts and (key, o) not in self.skipped]
            if missing:
                self.violation(
                    "alo_no_skip",
                    f"{key.topic}/{key.partition}: {len(missing)} offsets below the position "
                    f"{committed} never handled (first {missing[0]})",
                )

    def _amo_losses(self, reference: dict[int, World], log_losses: Sequence[AmoLoss]) -> None:
        crashes: dict[ClaimKey, list[tuple[str, int, int, int]]] = defaultdict(list)
        for loss in log_losses:  # (a tenure's: its instance and token)
            if loss.cause in CRASH_CAUSES:
                start = 0 if loss.start is None else loss.start
                crashes[loss.key].append((loss.instance_id, loss.token, start, loss.end))
        ends: dict[ClaimKey, int] = {}
        for world in reference.values():
            for key, state in world.claims.items():
                ends[key] = max(state.committed or 0, state.reserved or 0)
        for key, end in ends.items():
            if key.group not in self.modes or self.modes[key.group] is not Mode.AMO:
                continue
            self.mark("amo_loss_only_on_crash")
            counts = self.counts.get(key, {})
            windows = (
                self.crash_windows.get(key, [])
                + self.unfinished.get(key, [])
                + self._excused(key, crashes.get(key, []))
                + self.given_up_reported.get(key, [])
            )
            lost = [
                o
                for o in self.owed(key, self.starts.get(key, 0), end)
                if o not in counts and not any(a <= o < b for a, b in windows)
            ]
            if lost:
                self.violation(
                    "amo_loss_only_on_crash",
                    f"{key.topic}/{key.partition}: {len(lost)} offsets below the position {end} "
                    f"never handled and lost in no crash (first {lost[0]})",
                )

    def _excused(
        self, key: ClaimKey, crashes: list[tuple[str, int, int, int]]
    ) -> list[tuple[int, int]]:
        """What children stopped at a record boundary had asked for and not handled, where
        their tenure ended there (no child of it was ready after) and the log shows a crash's
        loss of that tenure over it (``crashes``: `protocol.amolosses`, what the audit and
        `marshal-admin status` show; a claim taken over, gone stale, refused or replaced, with
        the holder's instance and token, which must be the stopped child's own tenure: a
        later tenure's crash does not excuse an earlier one's stop). A tenure whose
        lease ran again (a heartbeat's verdict came late) hands those records to its next
        child (`core.children.carried`); lost there, they are lost in no crash (an AMO chaos
        test in CI: 974..1024, the log showing no lease end). Nor is a tenure that ended by
        a release that covered them: the log then says they were handled (seed 5200003 of
        `failures,read-latency,stall`, 8 faults at 0.3: a child TERMed as its lease was ending
        stopped at 761, its member released the claim at 766 as the lease ran out in its
        view, while the log still held it; the audit sees 761..766 lost in no crash)."""
        later = self.tenure_children.get(key, [])
        excused = []
        for who, t, (start, end) in self.lease_stops.get(key, []):
            if any(other == who and r > t for other, r in later):
                continue  # the tenure went on: its next child takes them
            shown = [
                (max(start, a), min(end, b))
                for instance, token, a, b in crashes
                if (instance, token) == who[1:] and a < end and b > start
            ]
            excused.extend(shown)
        return excused

    def _amo_reported(self, reference: dict[int, World], log_losses: Sequence[AmoLoss]) -> None:
        """``amo_loss_reported``: what nobody handled below the log's end was reported lost."""
        shown: dict[ClaimKey, list[tuple[int, int]]] = defaultdict(list)
        for loss in log_losses:
            shown[loss.key].append((0 if loss.start is None else loss.start, loss.end))
        for world in reference.values():
            for key, state in world.claims.items():
                if key.group not in self.modes or self.modes[key.group] is not Mode.AMO:
                    continue
                self.mark("amo_loss_reported")
                end = max(state.committed or 0, state.reserved or 0)
                counts = self.counts.get(key, {})
                windows = (
                    self.reported.get(key, [])
                    + shown.get(key, [])
                    + self.unfinished.get(key, [])
                    + self.unconfirmable.get(key, [])
                )
                unreported = [
                    o
                    for o in self.owed(key, self.starts.get(key, 0), end)
                    if o not in counts and not any(a <= o < b for a, b in windows)
                ]
                if unreported:
                    self.violation(
                        "amo_loss_reported",
                        f"{key.topic}/{key.partition}: {len(unreported)} offsets below the "
                        f"position {end} never handled and reported lost by no member and "
                        f"not shown by the log (first {unreported[0]})",
                    )
                # (a later holder may handle what a report covered: a cleaner removed the
                # reservation, a residual; the tenure that reported it may not)
                tenures = self.tenure_of.get(key, {})
                untrue = [
                    o
                    for a, b, tenure in self.refused_reported.get(key, [])
                    for o in range(a, b)
                    if tenures.get(o) == tenure
                ]
                if untrue:
                    self.violation(
                        "amo_loss_reported",
                        f"{key.topic}/{key.partition}: {len(untrue)} offsets reported lost as "
                        f"granted to nobody were handled (first {untrue[0]})",
                    )
                # a start at a compacted estimate reports what nobody was granted: a record of
                # it handled by anyone, ever, makes the report untrue (a report that cries wolf)
                passed = [
                    o
                    for a, b in self.estimated_reported.get(key, [])
                    for o in self.owed(key, a, b)
                    if o in counts
                ]
                if passed:
                    self.violation(
                        "amo_loss_reported",
                        f"{key.topic}/{key.partition}: {len(passed)} offsets reported lost as "
                        f"passed over by a compacted estimate were handled (first {passed[0]})",
                    )

    def agree(self, name: str, world: World, reference: World, at: float) -> None:
        """``world`` (a member's fold at virtual time ``at``) against ``reference`` (the whole
        log folded up to the same offset): every claim it considers certain has the same
        holder, instance and token, and would resume where a new holder breaks no guarantee
        (see below)."""
        self.mark("fold_agreement")
        for key, state in world.claims.items():
            if not state.certain or state.holder_client is None:
                continue
            ref = reference.claims.get(key)
            mine = (state.holder_client, state.holder_instance, state.token)
            theirs = None if ref is None else (ref.holder_client, ref.holder_instance, ref.token)
            if mine != theirs:
                self.violation(
                    "fold_agreement",
                    f"{name} folds {key} as held by {mine}, the whole log by {theirs}",
                )
                continue
            mode = self.modes.get(key.group)
            if mode is None or ref is None:
                continue
            mine_at, theirs_at = resume_offset(state, mode), resume_offset(ref, mode)
            if mine_at is None:
                continue
            # The position of a compacted reader is an estimate (the largest offset it saw:
            # a replaced or frozen holder's refused report counts), so it may differ from the
            # whole log's. What a new holder must never do is judged by what was done: AMO
            # resuming below the end of a batch already granted to a child (granted twice);
            # ALO resuming above an offset nobody had handled yet (skipped). The whole log's
            # committed position filters (it is on the safe side of both), the children's
            # record decides: a refused release of a frozen ALO holder reports what its child
            # handled after the rival's start (seeds 70, 177 of freeze + eager-compaction),
            # and a new AMO holder's first heartbeat commits a reservation nobody was granted
            # (seed 178).
            committed = ref.committed or 0
            if mode is Mode.AMO and mine_at < committed:
                bound = self.granted_end(key, at)
                unsafe, what = mine_at < bound, f"granted up to {bound}"
            elif mode is Mode.ALO and mine_at > committed:
                bound = self.handled_prefix(key, at)
                unsafe, what = mine_at > bound, f"handled up to {bound}"
            else:
                continue
            if unsafe:
                self.violation(
                    "fold_agreement",
                    f"{name} would resume {key} at {mine_at} (position {state.committed}, "
                    f"reserved to {state.reserved}), the whole log at {theirs_at} "
                    f"({ref.committed}, {ref.reserved}); {what} at t={at:.2f}",
                )
