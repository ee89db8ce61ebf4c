"""What a member does with what its children say and how they end.

`Children` reads a child's messages (its start, ALO progress, AMO grant requests, failures,
statistics) and its exit, which goes through the exit policy (`childexits.decide`): respawn on
reload, restart with back-off, or release after too many failures. An AMO grant is a pending
reservation: the child is answered once the fold has decided, and only if the batch starts at
or after the log's position (docs/design.md: a batch never starts behind it; it may start after it
where the data topic has a gap).
"""

from __future__ import annotations

import signal

from marshal_workers.core import inputs as inp
from marshal_workers.core import observations as obs
from marshal_workers.core.childexits import (
    EARLIER_REFUSED,
    LEASE_EXPIRED,
    LEASE_WAIT,
    ChildEnd,
    ExitDecision,
    Next,
    count_failure,
    decide,
)
from marshal_workers.core.heldclaim import ASKED_TO_STOP, HeldClaim, Phase
from marshal_workers.core.keeping import Keeping
from marshal_workers.core.memberstate import MemberState
from marshal_workers.core.pending import WRITE_TRIES, Kind, Op
from marshal_workers.core.recordparking import RecordParking
from marshal_workers.ipc import messages as ipc
from marshal_workers.ipc.exits import EXIT_HANDLER_FAILED, EXIT_HANDLER_TIMEOUT, EXIT_LEASE_EXPIRED
from marshal_workers.ipc.messages import CAUSE_POISON_RATE
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import ClaimState, resume_offset
from marshal_workers.protocol.wire import ClaimingMessages

# AMO: the phases in which a reservation the log accepted is granted to the child that asked.
# A child told to stop (TERM, a rebalance, a reload, a pause, a settings change) handles every
# batch the log reserved for it before it exits, so a graceful stop loses nothing;
# it asks for nothing new, and a request that crossed the `Stop` is refused before it is written.
GRANTING = (Phase.RUNNING, *ASKED_TO_STOP)
UNCONFIRMED = "reserved in the log after its write was given up"
# how a child ends by the member's lease-ending TERM or KILL, or by its own watchdog on the lease
MEMBERS_SIGNALS = (-signal.SIGTERM, -signal.SIGKILL, EXIT_LEASE_EXPIRED)
CHILD_ENDED = "the child that asked has ended"
UNCONFIRMED_KEPT = 16  # reservations given up on, per claim, that may still turn up landed


def reserved_from(op: Op, event: ev.MessagesClaimed) -> int:
    """Where what ``op``'s bytes reserved in the log begins: at the log's position before its
    record; but where the log already stood at the record's end, an earlier write of its run
    landed first (its first try, told it failed; or another child's, given up) and reserved
    from where the log stood at that record: reported from there, or those records would be
    lost unsaid (a review: seed 11 of `failures,read-latency` reported an empty range for
    629..632). That is ``op.start``, unless the fold showed an earlier try of ``op`` begin
    lower (``op.landed_from``): a request answered with ``op``'s verdict never landed, so the
    try's record reserved its records too (seed 784008 of `failures,read-latency,kill,stall`
    at 0.3 reported 739..740 of 736..740)."""
    if event.start is None or event.start == op.end:
        return op.start if op.landed_from is None else op.landed_from
    return event.start


class Children:
    """The children of a member's claims, as the member sees them."""

    def __init__(self, ctx: MemberState, keeping: Keeping, parking: RecordParking) -> None:
        self.ctx = ctx
        self.keeping = keeping
        self.parking = parking

    def said(self, said: inp.ChildSaid) -> None:
        """A message from a child."""
        held = self.ctx.held.get(said.key)
        if held is None:
            return
        msg = said.message
        if isinstance(msg, ipc.Progress | ipc.Stopped) and msg.next_offset is not None:
            if self.ctx.s.mode is Mode.ALO or held.position is None:
                held.position = msg.next_offset
        elif isinstance(msg, ipc.GrantRequest):
            self.grant_request(held, msg, said.now)
        elif isinstance(msg, ipc.Poisoned):
            self.ctx.poisoned(held.key, said.now)
        elif isinstance(msg, ipc.Stats):
            if msg.handled > 0:  # the child gets work done: earlier failures are not a streak
                held.failures = 0
            self.ctx.observe(obs.ChildStats(held.key, msg))
        elif isinstance(msg, ipc.HandlerFailed):
            self.handler_failed(held, msg)
            self.parking.note_failure(held.key, msg.offset, msg.error, said.now)

    def handler_failed(self, held: HeldClaim, msg: ipc.HandlerFailed) -> None:
        """Count a failure: a streak if nothing succeeded since the last one."""
        # A failure repeats the last one if nothing succeeded in between: the same offset (ALO
        # restarts there), a child that handled nothing before failing (AMO restarts after the
        # lost batch), or the poison-rate limit again (it restarts the count).
        repeated = held.failures > 0 and (
            msg.offset == held.failed_offset or msg.handled == 0 or msg.cause == CAUSE_POISON_RATE
        )
        held.failures = held.failures + 1 if repeated else 1
        held.failed_offset = msg.offset
        self.ctx.observe(obs.HandlerFailed(held.key, msg.offset, msg.error))
        self.ctx.say(
            "error",
            "handler_failed",
            topic=held.key.topic,
            partition=held.key.partition,
            offset=msg.offset,
            error=msg.error,
            cause=msg.cause,
            attempts=msg.attempts,
            failures=held.failures,
            max_handler_failures=self.ctx.s.max_handler_failures,
        )

    def handler_ended(self, held: HeldClaim, end: ChildEnd, now: float) -> None:
        """The child ended inside a handler call (timed out, os._exit, a signal): a failure on
        that record. dlq/skip: the next child settles it (ALO; in AMO it was granted and is lost
        with the rest of its batch); stop: it counts as a failure (and in the log)."""
        ctx, key, failed = self.ctx, held.key, end.failed
        assert failed is not None
        ctx.observe(obs.HandlerFailed(key, failed.offset, failed.error))
        if ctx.s.on_failure == "stop":
            held.failures = count_failure(held.failures, held.failed_offset, failed.offset)
            held.failed_offset = failed.offset
            self.parking.note_failure(key, failed.offset, failed.error, now)
        elif ctx.s.mode is Mode.ALO:
            held.settle = failed
        ctx.say(
            "warning",
            "handler_timed_out" if end.code == EXIT_HANDLER_TIMEOUT else "handler_ended_child",
            topic=key.topic,
            partition=key.partition,
            offset=failed.offset,
            last_offset=failed.end - 1,
            spent_s=end.spent_s,
            handler_timeout_s=ctx.s.handler_timeout,
            error=failed.error,
            on_failure=ctx.s.on_failure,
            failures=held.failures,
            lost=ctx.s.mode is Mode.AMO,  # AMO: the granted batch is not handled again
        )

    def grant_request(self, held: HeldClaim, req: ipc.GrantRequest, now: float) -> None:
        """AMO: reserve the batch in the log; the child is answered once the fold decides.

        A child asks for its next batch before the answer on the one before comes (one batch
        ahead, `child.grants`), so a request must start at or after the end of the newest batch
        this child asked for, granted or still in flight, not only the position. Once one of
        its batches is refused, every later one is too: the child exits at that refusal and
        must not be granted anything after it."""
        refusal = None
        floor = held.position
        if held.asked_end is not None and floor is not None:
            floor = max(floor, held.asked_end)
        if held.phase in ASKED_TO_STOP:
            refusal = ipc.REFUSED_STOPPING  # nothing written: nothing reserved, none lost
        elif held.phase is not Phase.RUNNING or now >= held.lease:
            refusal = "claim not held"
        elif held.refused_from is not None:
            refusal = EARLIER_REFUSED
        elif floor is None or req.start < floor:
            refusal = f"batch starts at {req.start}, before the position {floor}"
        if refusal is not None:
            held.refused_from = refused_from(held, req.start)
            self.keeping.tell(held.key, ipc.Grant(req.request_id, False, refusal))
            return
        held.asked_end = req.end
        message = ClaimingMessages(*self.ctx.fields(held.key), req.end)
        extra = {"request_id": req.request_id, "start": req.start, "end": req.end}
        extra["child"] = held.child_no
        if self.keeping.holds_back(held, now):  # a heartbeat is owed first (decision 18)
            held.held_back.append((message, extra))
            return
        self.ctx.append(Kind.RESERVE, held.key, message, now, **extra)

    def reservation_decided(self, op: Op, event: ev.Event, now: float) -> None:
        """The reservation's verdict (`_decide`), then the landings left to it
        (`_settle_deferred`)."""
        accounted = self._decide(op, event, now)
        self._settle_deferred(op, now, accounted=accounted)

    def _decide(self, op: Op, event: ev.Event, now: float) -> bool:
        """The reservation's verdict: commit and grant, or refuse. Whether what its record
        reserved was granted or reported lost by it (then a landing left to it is too).

        A child's reservations go to one coordination partition through one idempotent
        producer, so the fold decides them in request order; but a verdict read before its
        append is acknowledged is acted on at the acknowledgement, so that order is not relied
        on: the position never moves back, and a refusal refuses the batches from the refused
        one on (`refused_from`), never an earlier one. A verdict for a child that has ended is
        told to nobody (a new child's request ids start again at 1). A reservation the log
        accepted but this member refuses still moves the claim's position to its end: the log
        says those records are reserved, so nobody handles them (lost, as at-most-once allows)
        and the next child starts after them instead of asking for what the log refuses."""
        held = self.ctx.held.get(op.key)
        asker = held is not None and held.child and op.child == held.child_no  # and alive
        refusal = None
        if not isinstance(event, ev.MessagesClaimed):
            refusal = getattr(event, "reason", "reservation not confirmed")
        elif held is None or held.phase not in GRANTING or event.token != held.token:
            refusal = "claim not held"
        elif not asker:
            refusal = CHILD_ENDED
        elif held.refused_from is not None and op.start >= held.refused_from:
            refusal = EARLIER_REFUSED
        elif now >= held.lease:
            refusal = LEASE_EXPIRED
        elif (
            event.start is not None
            and op.start < event.start
            and not (
                op.tries and event.start == op.end  # a write again whose first did land after all
            )
        ):
            refusal = f"batch starts at {op.start}, before the log's position {event.start}"
        if refusal is not None or held is None:
            if held is None:  # the claim is gone: nobody to answer; if it landed, it is lost
                if isinstance(event, ev.MessagesClaimed):
                    start = reserved_from(op, event)
                    why = f"reserved in the log after the claim was let go: {refusal}"
                    self.ctx.amo_lost(op.key, start, op.end, obs.LossCause.REFUSED, why)
                    return True
                return False
            ended = refusal == CHILD_ENDED
            if (
                ended
                and isinstance(event, ev.MessagesClaimed)
                and self._carry_on(held, op, event, now)
            ):
                return True
            reported = self._refused(held, op, event, str(refusal), now, asker=asker)
            if asker:
                held.refused_from = refused_from(held, op.start)
                for covered in held.covered:  # (asked before it: the child ends at the first)
                    self.keeping.tell(op.key, ipc.Grant(covered, False, "not reserved"))
                held.covered.clear()
                grant = ipc.Grant(op.request_id, False, refusal or "claim not held")
                self.keeping.tell(op.key, grant)
            return reported
        # (never back, whatever the order); the reservation commits itself (rule 4): no
        # heartbeat per batch, the periodic ones renew the lease
        held.position = max(held.position or 0, op.end)
        for covered in held.covered:  # reserved by this batch's record too: below its end
            self.keeping.tell(op.key, ipc.Grant(covered, True, ""))
        self._forget_unconfirmed(held, held.covered)
        held.covered.clear()
        self.keeping.tell(op.key, ipc.Grant(op.request_id, True, ""))
        return True

    def _refused(
        self, held: HeldClaim, op: Op, event: ev.Event, refusal: str, now: float, *, asker: bool
    ) -> bool:
        """A reservation of ``held`` its child is refused: if the log accepted it under the
        held token, its records are reported lost (`_reserved_not_granted`) or left to the
        child's end (`_left_to_the_end`); whether they were accounted for so."""
        if not isinstance(event, ev.MessagesClaimed) or event.token != held.token:
            return False
        if self._left_to_the_end(held, op, event, refusal, now, asker=asker):
            held.position = max(held.position or 0, op.end)
            held.left_from = op.start if held.left_from is None else min(held.left_from, op.start)
            return True
        return self._reserved_not_granted(held, op, event, refusal)

    def _left_to_the_end(
        self, held: HeldClaim, op: Op, event: ev.MessagesClaimed, refusal: str, now: float,
        *, asker: bool,
    ) -> bool:  # fmt: skip
        """AMO: whether a reservation the log accepted under the held token, from the claim's
        position on (or behind an earlier batch of its child still in flight, which the log
        accepted before it: `_behind_in_flight`), and refused to its child only because the
        lease ran out in this member's view while a heartbeat that may run it again is in
        flight, or behind such a refusal (`HeldClaim.left_from`), is left to the child's end
        instead of reported lost now: the child is refused it (it never handles past its
        lease), the position moves past it, and the child's end carries it to the tenure's next
        child (`carried`, from where the child stopped; a landing read after that end,
        `_carry_on`) or reports it lost (`_amo_ended`).
        Reported at once, the carry stopped at it and the next child started past it when the
        lease ran again: lost with no crash in the log (marshal-sim seeds 7807027 and 7823021,
        a sweep on 4055ffa)."""
        if not asker or held.position is None:
            return False
        start = reserved_from(op, event)
        if start > held.position and not self._behind_in_flight(held, op, start):
            return False
        if refusal == EARLIER_REFUSED:
            return held.left_from is not None and op.start >= held.left_from
        return refusal == LEASE_EXPIRED and self.keeping.beat_in_flight(held, now)

    def _behind_in_flight(self, held: HeldClaim, op: Op, start: int) -> bool:
        """Whether a reservation that begins past the claim's position (at ``start``, where the
        log stood at its record) is behind an earlier batch of the same child still in flight:
        the log accepted that batch's record first (its own verdict, still to come, answers for
        what it reserved), and this verdict is acted on before it (acknowledged in another
        order than the log's). Refused as the lease ran out and reported lost at once, it was
        released past once the heartbeat's verdict ran the lease again: lost with no crash in
        the log (marshal-sim seed 8123009, a sweep on 98d1340). (A batch's ``start`` is the
        child's first record of it, which in a slice can lie past where its record reserves
        from: only the ends are compared.)"""
        position = held.position
        return position is not None and any(
            o.kind is Kind.RESERVE
            and o.key == held.key
            and o.child == held.child_no
            and o.op != op.op
            and position < o.end <= start
            for o in self.ctx.pending.ops.values()
        )

    def _carried_landings(self, held: HeldClaim, end: int) -> None:
        """The writes given up on whose landing the claim carries for its next child (below
        ``end``): forgotten, so that their landings, read later, are not reported lost."""
        ops = self.ctx.unconfirmed.get(held.key)
        if not ops:
            return
        ops[:] = [o for o in ops if o.end > end]
        if not ops:
            del self.ctx.unconfirmed[held.key]

    def _carry_on(self, held: HeldClaim, op: Op, event: ev.MessagesClaimed, now: float) -> bool:
        """AMO: a reservation of a child that ended at a record boundary landed (its verdict,
        or a write given up on that landed after all), from within or right after what the
        claim carries for its next child (`carried`), which has not started yet (it waits for
        the verdicts, `Keeping.carry_waits`): the next child takes it too; not one that
        reaches into records reported lost (dropped once: none of them may be handled)."""
        carry = held.carry
        if (
            carry is None
            or held.child
            or held.phase not in (Phase.RUNNING, Phase.STOPPING)  # (`carry_before_stopping`)
            or (now >= held.lease and not self.keeping.lease_may_return(held, now))
            or event.token != held.token
            or (
                held.refused_from is not None
                and op.start >= held.refused_from
                and (held.left_from is None or op.start < held.left_from)  # (left to the carry)
            )
            or not carry[0] <= reserved_from(op, event) <= carry[1]
            or any(a < op.end and b > carry[1] for a, b in held.lost)  # (reported: not handled)
        ):
            return False
        # (a landing the fold showed as the child ended is carried already: `ahead_in_the_log`)
        held.carry = (carry[0], max(carry[1], op.end))
        held.position = max(held.position or 0, op.end)
        return True

    def reservation_given_up(self, op: Op, error: str, now: float) -> None:
        """`_give_up`, then the landings left to the reservation: to its write again if it was
        written again, else decided as any landing (`_settle_deferred`)."""
        self._give_up(op, error, now)
        self._settle_deferred(op, now, accounted=False)

    def _give_up(self, op: Op, error: str, now: float) -> None:
        """A reservation not written, or with no verdict in time: write it again (a write that
        was not made is no reason to end the child) while its child may still be
        granted it and no later batch of the child is asked for (the same end again is
        harmless if the first landed after all; an earlier end behind a later one would be
        refused), at most `WRITE_TRIES` times; else refuse it (and, as for any refusal, every
        later batch of its child)."""
        held = self.ctx.held.get(op.key)
        if held is None or op.child != held.child_no:
            # nobody to answer, but it may have landed: kept as given up, so that its landing
            # is reported (a fresh child took the claim at once: a reload, or a child stopped
            # as its lease ended; seed 963174)
            self._unconfirmed(op)
            return
        again = (
            op.tries + 1 < WRITE_TRIES
            and held.phase in GRANTING
            and now < held.lease
            and held.refused_from is None
            and held.asked_end == op.end
        )
        if again:
            message = ClaimingMessages(*self.ctx.fields(held.key), op.end)
            extra = {"request_id": op.request_id, "start": op.start, "end": op.end}
            written = self.ctx.append(
                Kind.RESERVE, held.key, message, now, child=op.child, tries=op.tries + 1, **extra
            )
            written.landed_from = op.landed_from  # (an earlier try's landing, if one was seen)
            if isinstance(op.message, ClaimingMessages):
                written.tried = (*op.tried, op.message)
            return
        later = held.asked_end is not None and held.asked_end > op.end
        if later and held.refused_from is None and held.phase in GRANTING:
            if held.position is not None and held.position >= op.end:
                # a later batch of this child is granted already: its record covers this one
                self.keeping.tell(op.key, ipc.Grant(op.request_id, True, ""))
            else:
                held.covered.append(op.request_id)  # answered with the later batch's verdict
                self._unconfirmed(op)
            return
        self._unconfirmed(op)  # refused below: if it landed, its records are lost
        held.refused_from = refused_from(held, op.start)
        for covered in held.covered:
            self.keeping.tell(op.key, ipc.Grant(covered, False, "not reserved"))
        held.covered.clear()
        grant = ipc.Grant(op.request_id, False, f"reservation not written: {error}")
        self.keeping.tell(op.key, grant)

    def reservation_landed(self, event: ev.MessagesClaimed, now: float) -> None:
        """The fold shows a reservation of this instance landed that no write in flight was
        told: one given up on (told it failed, or no verdict in time) and not written again.
        Adopted as `Claiming.adopt_landed` adopts a claim: granted if its child still waits for
        it (answered with a later batch, `covered`) and it could have been granted; else its
        records are reserved in the log and nobody will be granted them: reported lost."""
        ops = self.ctx.unconfirmed.get(event.key, [])
        op = self._given_up_for(ops, event)
        if op is None:  # not one given up on: an earlier try of a write made again, or a
            self.earlier_try(event)  # verdict that comes before its acknowledgement
            return
        if self._in_flight_alike(event):
            self.ctx.deferred_landings.setdefault(event.key, []).append(event)
            return
        ops.remove(op)
        if not ops:
            del self.ctx.unconfirmed[event.key]
        if reserved_nothing(event):
            return
        held = self.ctx.held.get(op.key)
        if held is None or event.token != held.token:
            # the claim is gone (or held again, under another token) and no child of it was
            # granted these records: reserved in the log, never handled
            start = op.start if event.start is None else event.start
            self.ctx.amo_lost(
                op.key, start, op.end, obs.LossCause.REFUSED, UNCONFIRMED, given_up=True
            )
            return
        waits = held.child and op.child == held.child_no and op.request_id in held.covered
        if (
            waits
            and held.phase in GRANTING
            and now < held.lease
            and held.refused_from is None
            and (
                event.start is None
                or op.start >= event.start
                or reserved_from(op, event) < event.start
            )
        ):
            held.position = max(held.position or 0, op.end)
            granted = [r for r in held.covered if r <= op.request_id]  # asked before it: below
            for request_id in granted:
                self.keeping.tell(op.key, ipc.Grant(request_id, True, ""))
            held.covered = [r for r in held.covered if r > op.request_id]
            self._forget_unconfirmed(held, granted)
            self.ctx.say("info", "reservation_adopted", topic=op.key.topic,
                         partition=op.key.partition, start=op.start, end=op.end)  # fmt: skip
            return
        if self._carry_on(held, op, event, now):  # a child stopped for its lease asked for it
            return
        self._reserved_not_granted(held, op, event, UNCONFIRMED, given_up=True)

    def _given_up_for(self, ops: list[Op], event: ev.MessagesClaimed) -> Op | None:
        """The given-up write ``event`` landed for: of those with its bytes, the claim's current
        child's (one it waits for first), else the earliest. A replaced child's write and the
        fresh child's for the same run in the same wall second have the very same bytes; taken
        for the replaced child's, the run was reported lost, then granted to the fresh child
        with its next batch (a review)."""
        alike = [o for o in ops if wrote(o, event)]
        held = self.ctx.held.get(event.key)
        if held is not None and held.child:
            mine = [o for o in alike if o.child == held.child_no]
            waited = [o for o in mine if o.request_id in held.covered]
            alike = waited + mine + alike
        return alike[0] if alike else None

    def earlier_try(self, event: ev.MessagesClaimed) -> None:
        """A landing of this instance that no given-up write had: an earlier try of a
        reservation written again (told it failed, it landed after all), or a record folded
        before its acknowledgement. Noted on the write of its run in flight under the held token
        (`Op.landed_from`): where the log already stands at that write's end when its own record
        is folded, what the run reserved began at this record (`reserved_from`), which may be
        below the request's start (a request answered with this one's verdict that never
        landed: the try reserved its records too). A record that reserved nothing notes
        nothing."""
        held = self.ctx.held.get(event.key)
        if held is None or event.token != held.token or event.start is None:
            return
        if event.start >= event.end:
            return
        for o in self.ctx.pending.ops.values():
            if o.kind is Kind.RESERVE and o.key == event.key and o.end == event.end:
                below = o.landed_from
                o.landed_from = event.start if below is None else min(below, event.start)

    def _in_flight_alike(self, event: ev.MessagesClaimed) -> bool:
        """Whether a reservation in flight on the claim ends where ``event``'s record does: the
        record may be its, or an earlier try of its request (a write again is stamped anew, so
        its bytes differ by the second), and its verdict decides those records
        (`_settle_deferred`). Taken for an earlier child's given-up write with the same bytes,
        a new child's granted run was reported lost: by the very same bytes (a reviewer: seed
        102 of `failures,stall,kill`), and by the end alone, the new child's first try landing
        while its write again was in flight (seed 180033 of `failures,read-latency` at 0.3).
        What the landing reserved below the request's start is not the request's child's to
        be granted: below its position (granted or reported before), below an earlier request
        of its (decided on its own), or not its slice's (a slice's request starts at its first
        offset at or after its position: seed 317023 of the unordered every-fault mix, when a
        request had to start no lower than the landing)."""
        return any(
            o.kind is Kind.RESERVE and o.key == event.key and o.end == event.end
            for o in self.ctx.pending.ops.values()
        )

    def _reserved_not_granted(
        self,
        held: HeldClaim,
        op: Op,
        event: ev.MessagesClaimed,
        why: str,
        *,
        given_up: bool = False,
    ) -> bool:
        """The log accepted ``op``'s reservation under the held token, and its child is not
        granted it: the records its record reserved (from the log's position there to its
        end) are never handled now; no child was granted them (only this verdict, or a later
        batch's for a request given up on, grants them), whatever order the verdicts come in
        (a verdict is acted on at its acknowledgement). The position moves past them (the
        next child starts after them instead of asking for what the log refuses). ``given_up``:
        a write given up on landed (`obs.AmoLost.given_up`)."""
        if held.position is None:
            return False
        start = reserved_from(op, event)
        held.position = max(held.position, op.end)  # reserved in the log: never handled now
        self.ctx.held_lost(held, start, op.end, obs.LossCause.REFUSED, why, given_up=given_up)
        return True

    def _settle_deferred(self, op: Op, now: float, *, accounted: bool) -> None:
        """The landings left to reservations in flight on ``op``'s claim (`_in_flight_alike`),
        now that ``op`` is decided or given up. One that ends where ``op`` does is accounted
        for if ``op``'s record was granted or reported lost (``accounted``): its records are
        ``op``'s (`_in_flight_alike` says why those below ``op``'s start are nobody's to be
        granted). Every other is decided again as any landing
        (left again to another write in flight that covers it, if there is one). Else a
        landing left to a write that was then rejected, or whose child had ended, was decided
        by nobody, and its records were reserved, never handled and reported by nobody (a
        review: a child killed with its request in flight, the earlier child's given-up write
        of the same run landed, then a later run of it moved the log past the request)."""
        events = self.ctx.deferred_landings.pop(op.key, [])
        for event in events:
            if accounted and event.end == op.end:
                self._drop_unconfirmed(event)
                if event.start is not None and event.start < op.start:
                    self._below_the_request(event, event.start, op.start)
            else:
                self.reservation_landed(event, now)

    def _below_the_request(self, event: ev.MessagesClaimed, start: int, end: int) -> None:
        """A landing accounted for by a request of the same end that began above the log's
        position: what it reserved below the request (``start``..``end``) is granted to nobody
        now, and is reported (an empty report if it was already: `MemberState.held_lost`). For
        a slice those are mostly other slices' offsets. A review: the first child's 101..110
        landed at the log's position 100; the next child's 100..101 was refused behind 110,
        its 101..110 reported from 101, and 100 was reported by nobody."""
        held = self.ctx.held.get(event.key)
        if held is not None and held.token == event.token:
            self.ctx.held_lost(held, start, end, obs.LossCause.REFUSED, UNCONFIRMED, given_up=True)
        else:
            self.ctx.amo_lost(
                event.key, start, end, obs.LossCause.REFUSED, UNCONFIRMED, given_up=True
            )

    def _drop_unconfirmed(self, event: ev.MessagesClaimed) -> None:
        """The given-up write whose bytes ``event`` landed is accounted for by another's
        verdict: it can reserve nothing more (its run is past the log's position now)."""
        ops = self.ctx.unconfirmed.get(event.key)
        if not ops:
            return
        for o in ops:
            if wrote(o, event):
                ops.remove(o)
                break
        if not ops:
            del self.ctx.unconfirmed[event.key]

    def _unconfirmed(self, op: Op) -> None:
        """``op``'s reservation was given up on: remember it in case it landed."""
        ops = self.ctx.unconfirmed.setdefault(op.key, [])
        ops.append(op)
        del ops[:-UNCONFIRMED_KEPT]

    def _forget_unconfirmed(self, held: HeldClaim, request_ids: list[int]) -> None:
        """The reservations given up on for these requests of the claim's child were granted
        after all (a later batch's record covers them): none of them can be lost now."""
        ops = self.ctx.unconfirmed.get(held.key)
        if not ops or not request_ids:
            return
        gone = set(request_ids)
        ops[:] = [o for o in ops if not (o.child == held.child_no and o.request_id in gone)]
        if not ops:
            del self.ctx.unconfirmed[held.key]

    def exited(self, exited: inp.ChildExited) -> None:
        """A child ended (its process group is gone): respawn, restart later, or release."""
        ctx, keeping = self.ctx, self.keeping
        held = ctx.held.get(exited.key)
        if held is None:
            return
        now, code, key = exited.now, exited.code, exited.key
        held.child = False
        if held.phase is Phase.LOST:
            keeping.drop(key)
            return
        if ctx.s.mode is Mode.ALO and exited.position is not None and held.position is not None:
            held.position = max(held.position, exited.position)  # up to the record it ended in
        if exited.end is not None:
            code = exited.end.code
            if exited.end.failed is not None:
                self.handler_ended(held, exited.end, now)
        decision = decide(
            code=code,
            running=held.phase in (Phase.RUNNING, Phase.STARTING),
            reloading=held.phase is Phase.RELOADING,
            # a child killed because its lease was ending ended with it, though the lease may
            # have a kill grace left: that is a lease expiry, not a crash to restart
            lease_valid=held.lease - now > ctx.s.kill_grace,
            failures=held.failures,
            max_failures=ctx.s.max_handler_failures,
            heartbeat_interval_s=ctx.s.heartbeat_interval,
            on_failure=ctx.s.on_failure,
            first_backoff_s=ctx.s.restart_backoff,
            parked=self.parking.parks(key, held.position),
            stopped_for_lease=held.term_sent and code in MEMBERS_SIGNALS,
            carries=ctx.s.mode is Mode.AMO and exited.stopped_at is not None,
            feed_lost=exited.end is not None and exited.end.feed_lost,
            lived_s=now - held.child_since,
        )
        held.failures = max(held.failures, decision.failures)
        fields = {"topic": key.topic, "partition": key.partition, "reason": decision.reason}
        if ctx.s.mode is Mode.AMO:
            self._amo_ended(held, exited, code, decision)
        if decision.reason == LEASE_WAIT and held.carry is None:  # nothing to wait with
            decision = ExitDecision(Next.RELEASE, LEASE_EXPIRED, avoid_s=ctx.s.heartbeat_interval)
        if (
            decision.next is Next.RESPAWN
            and self.parking.allows(held, now)
            and not keeping.carry_waits(held)
        ):
            held.phase = Phase.RUNNING
            keeping.spawn(held, restart=False, now=now)
        elif decision.next is Next.RESPAWN:  # a failure count in flight: started once decided
            held.phase = Phase.RUNNING
            held.restart_at = now
        elif decision.next is Next.RESTART_LATER:
            held.phase = Phase.RUNNING
            held.restart_at = now + decision.delay_s
            ctx.say(
                "warning" if code else "info",
                "child_restarting",
                **fields,
                offset=held.failed_offset,
                failures=held.failures,
                backoff_s=decision.delay_s,
            )
        elif decision.next is Next.RELEASE:
            ctx.say(
                # a lease that ran out (a freeze, a stall) is said where it is seen: each claim's
                # release after it is a consequence, not one more error
                "warning" if decision.reason == LEASE_EXPIRED else "error",
                "claim_releasing",
                **fields,
                offset=held.failed_offset,
                failures=held.failures,
                not_reclaimed_for_s=decision.avoid_s,
            )
            ctx.avoid_until[key] = ctx.failure_avoid[key] = now + decision.avoid_s
            keeping.finish(held, now, release=True)  # the log refuses it if taken meanwhile
        elif not (held.phase is Phase.STOPPING and keeping.carry_before_stopping(held, now)):
            keeping.finish(held, now, release=held.phase is Phase.STOPPING)

    def _amo_ended(
        self, held: HeldClaim, exited: inp.ChildExited, code: int, decision: ExitDecision
    ) -> None:
        """AMO, a child ended: what it was granted and did not handle goes to the next child of
        the tenure (`carried`), or is lost, with the cause; and a landing past the position
        (`ahead_in_the_log`) likewise."""
        ctx, now = self.ctx, exited.now
        logged = ahead_in_the_log(ctx.state_of(held.key), held)
        if exited.position is not None and held.position is not None:
            if (exited.end is not None and exited.end.failed is not None) or (
                code == EXIT_HANDLER_FAILED  # it raised for good under `stop`, and said so
            ):
                cause = obs.LossCause.HANDLER_FAILED
            elif held.lease - now <= ctx.s.kill_grace or (
                held.term_sent and held.phase in (Phase.RUNNING, Phase.STARTING)
            ):
                cause = obs.LossCause.LEASE_EXPIRED
            else:
                cause = obs.LossCause.CRASH
            # (none after a handler's failure); a landing past the position is carried too:
            # nobody was granted it (`ahead_in_the_log`)
            end = held.position if logged is None else logged
            carries = cause is not obs.LossCause.HANDLER_FAILED
            # (asked to stop: only after its member's TERM, never after a child that failed:
            # no restart's back-off applies while stopping; with no time left for a child, the
            # claim is let go unreleased, `Keeping.finish`)
            stops_after = (
                held.term_sent
                and code in MEMBERS_SIGNALS
                and self.keeping.carries_when_stopping(held, now)
            )
            held.carry = (
                carried(held, exited, decision.next, end, stops_after=stops_after)
                if carries
                else None
            )
            if held.carry is not None:
                self.lost_past_carry(held, held.carry, end)
                held.position, logged = end, None
                self._carried_landings(held, end)
            else:
                why = LEASE_EXPIRED if decision.reason == LEASE_WAIT else decision.reason
                self.ctx.held_lost(held, exited.position, held.position, cause, why)
        if logged is not None and held.position is not None:
            lost_from, held.position = held.position, logged
            why = f"reserved in the log by a write given up on ({decision.reason})"
            self.ctx.held_lost(held, lost_from, logged, obs.LossCause.REFUSED, why, given_up=True)

    def lost_past_carry(self, held: HeldClaim, carry: tuple[int, int], end: int) -> None:
        """AMO: a carry that ends before ``end`` ends at a range reported lost (`carried`): a
        write given up on that landed after all. What follows that range up to ``end`` (other
        such landings, or runs granted to the stopped child after it) no child will be handed,
        since the next one starts at the position: lost to that write, and reported now as a
        given-up write's loss (a fault of the coordination path, not a crash)."""
        if carry[1] < end:
            why = "reserved in the log past records reported lost"
            self.ctx.held_lost(held, carry[1], end, obs.LossCause.REFUSED, why, given_up=True)


def carried(
    held: HeldClaim, exited: inp.ChildExited, next_: Next, end: int, *, stops_after: bool = False
) -> tuple[int, int] | None:
    """AMO, a child of ``held`` ended: what of the claim's reserved records, up to ``end`` (the
    position, or past it where the log shows more reserved, `ahead_in_the_log`), the next child
    of the same tenure handles without asking (`HeldClaim.carry`), or None.

    Only a child that stopped at a record boundary says where (``stopped_at``: its member's
    TERM as the lease was ending, its own lease check), and only a claim that goes on under
    the same lease starts another child (or, asked to stop, ``stops_after``: one that stops
    after the carry, `Keeping.carry_before_stopping`): everything from there to the claim's
    position was reserved for this tenure and started by nobody, so the next child may take
    it, as the one before would have. Reported lost instead, a lease whose heartbeat only
    landed late lost records though nothing crashed (an AMO chaos test in CI: 974..1024, the
    log showing no lease end; the audit saw nothing at risk). Where part of it was reported lost
    already (a refused batch of the child, a write given up on that landed), only what comes
    before that part: the next child is refused past it and starts again at the position (all
    of it was dropped once, and so lost in no crash: seeds 5329015 and 7500018 of failing-write
    mixes, 8 faults at 0.3); what follows that part nobody is handed: the caller reports it
    lost at once (`Children.lost_past_carry`)."""
    stopped = exited.stopped_at
    if stopped is None or not (next_ in (Next.RESPAWN, Next.RESTART_LATER) or stops_after):
        return None
    start = stopped if exited.position is None else max(stopped, exited.position)
    lost = [a for a, b in held.lost if a < end and b > start]
    if start > end or (lost and min(lost) <= start):
        return None
    return (start, min([end, *lost]))  # (empty, it still waits for reservations in flight)


def wrote(op: Op, event: ev.MessagesClaimed) -> bool:
    """Whether ``event``'s record is one of ``op``'s tries: its own bytes, or an earlier try's
    (written again in a later second, so stamped anew). A given-up write again whose first
    try landed after all was matched by its own bytes only, and the landing went unreported
    (seed 963009 of `failures,read-latency,kill,stall` at 0.3: 505..510 of tg1/0)."""
    return op.message == event.message or event.message in op.tried


def reserved_nothing(event: ev.MessagesClaimed) -> bool:
    """Whether a reservation's record landed where the log stood at its end already: it
    reserved nothing. The record that moved the log there (the very same bytes landed before,
    or a write again of the request) was granted or reported where its verdict came; taken for
    a given-up write's, a run a later child of the claim was granted and handled was reported
    lost (seed 180054 of `failures,read-latency` at 0.3: an earlier child's last try and the
    next child's first two had the same bytes; the first landing answered the next child's
    write again, the second was read as the given-up write's)."""
    return event.start is not None and event.start >= event.end


def refused_from(held: HeldClaim, start: int) -> int:
    """Where a child's refused batches begin once the batch at ``start`` is refused."""
    return start if held.refused_from is None else min(held.refused_from, start)


def ahead_in_the_log(state: ClaimState | None, held: HeldClaim) -> int | None:
    """AMO, a child of ``held`` ended: where the fold (``state``) says this tenure has reserved
    up to, if that is past the claim's position (a write given up on that landed after all),
    else None. The log refuses any batch behind its position, so a child started at the claim's
    position would be refused there, and its successor too, for ever (a child's first request
    covers a single record until it has timed one); nobody will be granted those records now,
    so the position moves there (a loss, reported) and the next child asks after it."""
    if state is None or state.token != held.token or held.position is None:
        return None
    logged = resume_offset(state, Mode.AMO)
    return logged if logged is not None and logged > held.position else None
