"""Poison records on the member's side: counting a record's failures in the log, and what
the holder of a claim does about a failing record before it starts a child (the records
themselves are `protocol.recordfailures`; the operator's commands `admin.records`).

A record that keeps failing under ``on_failure = stop`` is counted in the coordination log
(RecordFailed, its own key per claim), so the count survives release and reclaim, across
members. After ``poison_park_after`` failures the claim is parked: its holder keeps it and runs
no child, until an operator skips or retries the record (`marshal-admin skip-record`,
`retry-record`) or ``poison_park_time`` passes. ALO only: in AMO a failing record is lost with
the rest of its granted batch when the child stops (at most once), so no record fails twice.
"""

from __future__ import annotations

from marshal_workers.core import observations as obs
from marshal_workers.core.heldclaim import HeldClaim
from marshal_workers.core.memberstate import MemberState
from marshal_workers.core.pending import WRITE_TRIES, Kind, Op
from marshal_workers.protocol import recordfailures as poison
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.recordfailures import PoisonVerdict, RecordFailed, Step
from marshal_workers.protocol.wire import ClaimKey

PARKED_RECHECK_S = 1.0  # how often a parked claim looks for an operator's decision
PENDING_RECHECK_S = 0.05  # a failure being counted in the log: retry once it is


class RecordParking:
    """The failing records of this member's claims."""

    def __init__(self, ctx: MemberState) -> None:
        self.ctx = ctx
        self._parked_logged: set[tuple[ClaimKey, int]] = set()
        # failures in flight, by operation number: the count, and the token of the tenure of
        # the claim it was written in (`gave_up` writes it again only in that tenure)
        self._sent: dict[int, tuple[RecordFailed, int]] = {}

    @property
    def enabled(self) -> bool:
        """Only at least once handles a failing record again."""
        return self.ctx.s.mode is Mode.ALO

    def state(self, key: ClaimKey) -> poison.PoisonState | None:
        """The fold's poison state of ``key`` (whether or not still in force)."""
        return self.ctx.worlds[self.ctx.home(key)].poison.get(key)

    def note_failure(self, key: ClaimKey, offset: int, error: str, now: float) -> None:
        """Write one more failure on ``offset`` (parked at ``poison_park_after``); past the
        claim's lease, nothing (`past_lease`)."""
        ctx = self.ctx
        if not self.enabled:
            return
        if self.past_lease(key, offset, now):
            return
        failures, outcome = poison.park_outcome(self.state(key), offset, ctx.s.poison_park_after)
        s = ctx.s
        message = RecordFailed(
            int(ctx.wall),
            s.instance_id,
            s.client_id,
            key.group,
            key.topic,
            key.partition,
            offset,
            failures,
            outcome,
            error,
        )
        op = ctx.append(Kind.POISON, key, message, now, start=offset)
        self._sent[op.op] = (message, ctx.held[key].token)  # held: `past_lease` said so

    def past_lease(self, key: ClaimKey, offset: int, now: float, token: int | None = None) -> bool:
        """Whether the claim's lease has ended (or the claim is gone): then no count is
        written (decision 19, for counts). A rival may hold the claim by now and have counted
        this record, or the next, to parked; the log would refuse this count, yet it would be
        the newest record under the counts' key, and once the cleaner runs a reader of the
        compacted log takes it as written: the rival's count is gone and a record is tried
        again from 1. The failure goes uncounted, as after a crash (`poison_bounded` allows
        one per fault).

        ``token``: a count written again (`gave_up`) is written only in the tenure it was first
        written in, the lease of that grant. Lost and won again meanwhile (a stall past the
        lease, the count's record compacted away unread, so that no verdict came), the claim
        has a lease again, but others may have held it since, counted the record to parked,
        and an operator retried it: the old count, landing now, would count once more
        against the new count, and its old outcome (``retry``) unpark the record, which is
        then tried beyond ``poison_park_after`` (marshal-sim seed 2120009 of the unordered
        every-fault mix)."""
        held = self.ctx.held.get(key)
        left = held.lease_remaining(now) if held is not None else None
        if held is not None and token is not None and held.token != token:
            reason = "the claim was lost and won again since"
        elif left is not None and left > 0:
            return False
        else:
            reason = "the lease ended"
        self.ctx.say("warning", "record_failure_not_counted", topic=key.topic,
                     partition=key.partition, offset=offset, reason=reason)  # fmt: skip
        return True

    def gave_up(self, op: Op, now: float) -> None:
        """A failure whose write failed (or got no verdict in time): write the same record
        again, at most `WRITE_TRIES` times, so the count is not lost (the same
        count twice, should the first land after all, only parks the record no later)."""
        sent = self._sent.pop(op.op, None)
        if sent is None:
            return
        message, token = sent
        if self.past_lease(op.key, op.start, now, token):
            return
        if op.tries + 1 >= WRITE_TRIES:
            self.ctx.say("warning", "record_failure_not_counted", topic=op.key.topic,
                         partition=op.key.partition, offset=op.start)  # fmt: skip
            return
        again = self.ctx.append(
            Kind.POISON, op.key, message, now, start=op.start, tries=op.tries + 1
        )
        self._sent[again.op] = (message, token)

    def decided(self, op: Op, event: PoisonVerdict) -> None:
        """The fold's verdict on a failure this member wrote."""
        self._sent.pop(op.op, None)
        ctx, key = self.ctx, op.key
        if not isinstance(event, poison.PoisonNoted):
            reason = getattr(event, "reason", type(event).__name__)
            ctx.say("warning", "poison_record_refused", topic=key.topic,
                    partition=key.partition, offset=op.start, reason=reason)  # fmt: skip
            return
        state = event.state
        ctx.observe(obs.RecordFailures(key, state.offset, state.failures, state.parked))
        ctx.say(
            "error" if state.parked else "warning",
            "record_parked" if state.parked else "record_failure_counted",
            topic=key.topic,
            partition=key.partition,
            offset=state.offset,
            failures=state.failures,
            poison_park_after=ctx.s.poison_park_after,
            error=state.error,
        )

    def parks(self, key: ClaimKey, position: int | None) -> bool:
        """Whether ``key``'s failing record is parked by the log, or by a count of this member
        on its way: its holder then keeps the claim and runs no child, whatever its own streak
        of failures (`childexits.decide`: no release after ``max_handler_failures``)."""
        if not self.enabled:
            return False
        claim = (key.group, key.topic, key.partition)
        for m, _ in self._sent.values():
            if m.outcome is poison.Outcome.PARKED and (m.group_id, m.topic, m.partition) == claim:
                return True
        state = poison.active(self.state(key), position)
        return state is not None and state.parked

    def allows(self, held: HeldClaim, now: float) -> bool:
        """Whether a child may start for ``held``: not while a failure of its is being counted
        in the log (the count decides whether it is parked), nor while it is parked on a
        poison record (looked at again in a second); past a record an operator skipped, the
        position moves past it first (the next heartbeat tells the log)."""
        ctx = self.ctx
        if not self.enabled or held.position is None:
            return True
        key = held.key
        if ctx.pending.in_flight(Kind.POISON, key):  # the count first, then maybe a retry
            held.restart_at = now + PENDING_RECHECK_S
            return False
        state = self.state(key)
        park_ms = int(ctx.s.poison_park_time * 1000)
        step = poison.poison_action(state, held.position, ctx.log_now_ms(key, now), park_ms)
        if step is Step.PARK and state is not None:
            held.restart_at = now + PARKED_RECHECK_S
            if (key, state.offset) not in self._parked_logged:
                self._parked_logged.add((key, state.offset))
                ctx.observe(obs.RecordFailures(key, state.offset, state.failures, True))
                ctx.say("error", "partition_parked", topic=key.topic, partition=key.partition,
                        offset=state.offset, failures=state.failures, error=state.error,
                        next="marshal-admin skip-record or retry-record")  # fmt: skip
            return False
        if state is not None and (key, state.offset) in self._parked_logged:
            self._parked_logged.discard((key, state.offset))  # unparked: an operator decided
            ctx.observe(obs.RecordFailures(key, state.offset, 0, False))
        if step is Step.SKIP and state is not None:
            held.position = state.offset + 1
            held.next_heartbeat = now
            ctx.say("warning", "poison_record_skipped", topic=key.topic,
                    partition=key.partition, offset=state.offset, by=state.client_id)  # fmt: skip
        return True
