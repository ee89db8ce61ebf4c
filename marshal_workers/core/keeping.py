"""The claims a member holds: heartbeats, leases, children's lives, losing and releasing.

`Keeping` keeps each `heldclaim.HeldClaim` on its timers: a heartbeat every HB/2 (with the
newest position), the lease extended by each heartbeat folded valid, the child started once
its position is known (and a takeover's wait is over), TERM then KILL before a lease ends, and
a release written only once its child is gone and no replaced instance may still be running.
"""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Mapping

from marshal_workers.core import commands as cmd
from marshal_workers.core import observations as obs
from marshal_workers.core.childexits import EARLIER_REFUSED, LEASE_EXPIRED
from marshal_workers.core.heldclaim import ASKED_TO_STOP, HeldClaim, Phase
from marshal_workers.core.memberstate import MemberState
from marshal_workers.core.pending import Kind, Op
from marshal_workers.core.recordparking import RecordParking
from marshal_workers.ipc import messages as ipc
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.members import is_member_key
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.slicing import records_at_most, split_topic
from marshal_workers.protocol.wire import ClaimKey, Heartbeat, ReleasingPartition


class Keeping:
    """Every claim this member holds, on its timers."""

    def __init__(self, ctx: MemberState, parking: RecordParking) -> None:
        self.ctx = ctx
        self.parking = parking

    def hold(self, key: ClaimKey, token: int, lease: float, now: float) -> HeldClaim:
        """A claim won or taken over: hold it under ``lease``."""
        ctx = self.ctx
        member = is_member_key(key)
        held = HeldClaim(key, token, lease, position=0 if member else None, is_member=member)
        held.phase = Phase.RUNNING if member else Phase.STARTING
        held.next_heartbeat = now  # the first heartbeat commits the position at once
        ctx.held[key] = held
        ctx.avoid_until.pop(key, None)
        ctx.out.append(cmd.SetLease(key, lease))
        ctx.observe(obs.ClaimWon(key, token))
        return held

    def take_positions(self, positions: Mapping[ClaimKey, int]) -> None:
        """ALO: the positions children published in shared memory go into the next
        heartbeats, so a heartbeat is at most HB/2 behind the handling, whatever the batch."""
        if self.ctx.s.mode is not Mode.ALO:
            return
        held_claims = self.ctx.held
        for key, position in positions.items():
            held = held_claims.get(key)
            if held is not None and held.position is not None and position > held.position:
                held.position = position

    def keep(self, held: HeldClaim, now: float) -> None:
        """One claim's timers: heartbeat, start the child, lease ending, restart."""
        s = self.ctx.s
        if held.phase not in (Phase.LOST, Phase.RELEASING):
            if self.heartbeat_owed(held, now) and not self.waits_for_reservation(held, now):
                self.heartbeat(held, now)
            expired = now >= held.lease and held.phase is not Phase.STOPPING
            expired = expired and not self.lease_may_return(held, now)
            if expired and not held.child and not held.is_member:
                # no child runs: release (the log refuses it if the claim was taken meanwhile)
                key = held.key
                ctx = self.ctx
                ctx.say("warning", "lease_expired", topic=key.topic, partition=key.partition)
                ctx.avoid_until[key] = now + s.heartbeat_interval
                self.finish(held, now, release=True)
                return
            if held.is_member and now >= held.lease:
                self.lose(held, "member claim's lease expired")
                return
        if held.child:
            self.end_child_in_time(held, now)
            return
        if held.phase is Phase.STOPPING:
            if not self.carry_before_stopping(held, now):
                self.finish(held, now, release=True)  # no child to wait for
            return
        if held.phase is Phase.RELOADING:
            held.phase = Phase.RUNNING  # no child to replace: the next one starts fresh
        if held.is_member or held.position is None:
            return
        if held.phase is Phase.STARTING:
            self.start_child(held, now)
        elif (
            held.phase is Phase.RUNNING
            and held.restart_at <= now < held.lease
            and self.parking.allows(held, now)
            and not self.carry_waits(held)
            and not self.too_late_to_carry(held, now)
        ):
            self.spawn(held, restart=held.failures > 0, now=now)

    def carry_left(self, held: HeldClaim) -> bool:
        """AMO: whether the claim, let go, leaves records it carries for a child that will not
        start now (`children.carried`): its release would say they were handled, so it is
        withheld (`finish`) and the log shows the crash as the claim goes stale."""
        return held.carry is not None and held.carry[0] < held.carry[1]

    def carries_when_stopping(self, held: HeldClaim, now: float) -> bool:
        """AMO: whether a child that stopped at a record boundary for its member's TERM while
        the claim was asked to stop leaves its unstarted records as a carry: always. A child
        may take them (`carry_before_stopping`, with time left), else the claim is let go
        unreleased (`carry_left`); reported lost at once, the release went over them."""
        return True

    def too_late_to_carry(self, held: HeldClaim, now: float) -> bool:
        """Whether a child for what the claim carries would start with a kill grace or less of
        the lease left: it would be TERMed as it began. It waits for the lease's verdicts
        instead (`lease_may_return`)."""
        return held.carry is not None and held.lease - now <= self.ctx.s.kill_grace

    def lease_may_return(self, held: HeldClaim, now: float) -> bool:
        """AMO: whether a claim whose lease ran out in this member's view, and that carries
        records for its next child (`children.carried`), waits for a heartbeat of it in flight
        instead of being let go: the log may have accepted it in time (its verdict came late),
        and then the lease runs on and that child takes the records; let go first, they were
        lost though the log showed no lease end (marshal-sim seed 5200003 of
        `failures,read-latency,stall`, 8 faults at 0.3). A lease that runs out with none in
        flight lets the claim go with them, reported lost, as a crash loses them. Only a
        heartbeat whose verdict would leave more than a kill grace of lease counts."""
        return held.carry is not None and self.beat_in_flight(held, now)

    def beat_in_flight(self, held: HeldClaim, now: float) -> bool:
        """Whether a heartbeat of ``held`` is in flight whose verdict, if the log accepted it,
        would leave more than a kill grace of lease: the lease may run again."""
        grace, ctx = self.ctx.s.kill_grace, self.ctx
        return any(
            op.kind is Kind.HEARTBEAT and op.key == held.key and ctx.lease_of(op) - grace > now
            for op in ctx.pending.ops.values()
        )

    def carry_waits(self, held: HeldClaim) -> bool:
        """AMO: the next child waits while the claim carries records for it (`children.carried`)
        and a reservation of the child before is in flight: one that lands goes to it too
        (`Children._carry_on`), where it would be reported lost once a child had started."""
        return held.carry is not None and self.ctx.pending.in_flight(Kind.RESERVE, held.key)

    def carry_before_stopping(self, held: HeldClaim, now: float) -> bool:
        """AMO, a claim asked to stop (a deploy, a release over the fair share) with no child
        while it carries records for the next child of its tenure (`children.carried`): that
        child is started and asked to stop at once, and handles the carried records, asking
        for nothing more, before the claim is let go. Let go first, the claim reported them
        lost though nothing crashed, and its release left nothing at risk in the log. While a
        reservation of the child before is in flight, its verdict is awaited (one that lands
        is carried too). Not with a kill grace or less left of the lease or of the stop's time
        (a fast stop has none): the claim is let go and the carry reported lost, as a crash
        loses it. Whether the claim waits for that child (or verdict)."""
        carry = held.carry
        if carry is None or not self.stops_after_carry(held, now):
            return False
        if self.carry_waits(held):
            return True
        if carry[0] >= carry[1] or not self.parking.allows(held, now):
            return False
        self.spawn(held, restart=False, now=now)
        self.stop_child(held, held.stop_deadline, reason="stop" if self.ctx.stopping else "revoke")
        return True

    def stops_after_carry(self, held: HeldClaim, now: float) -> bool:
        """Whether a claim asked to stop may still start a child for what it carries: more
        than a kill grace of its lease left, and of its stop's time (else the child would be
        killed as it began)."""
        grace = self.ctx.s.kill_grace
        return (
            held.phase is Phase.STOPPING
            and held.lease - now > grace
            and held.stop_deadline - now > grace
        )

    def start_child(self, held: HeldClaim, now: float) -> None:
        """A claim won or taken over starts its first child once its position is known and in
        the log (`HeldClaim.durable`: a looked-up start is heartbeated first, so a later holder
        resumes there instead of looking up a later one past what this child did), the old
        instance's lease has ended (a takeover) and its own lease runs."""
        if (
            held.phase is Phase.STARTING
            and held.position is not None
            and held.durable
            and held.start_after <= now < held.lease
        ):
            held.phase = Phase.RUNNING
            if self.parking.allows(held, now):
                self.spawn(held, restart=False, now=now)

    def end_child_in_time(self, held: HeldClaim, now: float) -> None:
        """The claim's child gets SIGTERM a kill grace before its lease ends (at once when it
        was asked to stop and its stop deadline passed, or the claim is lost), SIGKILL a third
        of the grace before; each signal once."""
        s = self.ctx.s
        remaining = held.lease - now
        if held.phase in ASKED_TO_STOP and now >= held.stop_deadline:
            remaining = min(remaining, 0.0)
        if held.phase is Phase.LOST:
            remaining = min(remaining, 0.0)
        if remaining <= s.kill_grace and not held.term_sent:
            held.term_sent = True
            self.signal_child(held, signal.SIGTERM, "lease ending")
        if remaining <= s.kill_grace / 3 and not held.kill_sent:
            held.kill_sent = held.term_sent = True
            self.signal_child(held, signal.SIGKILL, "lease ending")

    def heartbeat_owed(self, held: HeldClaim, now: float) -> bool:
        """Whether the claim's next heartbeat is due, or one must follow a heartbeat that went
        while a reservation was in flight (`beat_behind`). Never past the claim's lease: a
        member may then have lost the claim without its fold showing it yet, and writes
        nothing more that carries the position (decision 19, see `finish`)."""
        if held.position is None or now >= held.lease:
            return False
        return held.beat_behind or now >= held.next_heartbeat

    def waits_for_reservation(self, held: HeldClaim, now: float) -> bool:
        """AMO: a heartbeat owed while a reservation of the claim is in flight waits for its
        verdict (`after_reservation` then writes it, with the new position), at most HB/4
        past its time; meanwhile new reservations are held back (`holds_back`), so the
        reservations in flight drain.

        An accepted reservation commits what it reserves (rationalizer rule 4), and a heartbeat
        sets the committed position outright. One written now would carry the position before
        the reservation and land after it: the log's newest record on the claim's position key
        would then be behind the reservation, and once the cleaner removed the reservation, a
        reader of the compacted log would resume the claim there and hand its records out a
        second time (decision 18)."""
        hb = self.ctx.s.heartbeat_interval
        if now - held.next_heartbeat >= hb / 4:
            return False  # the lease first: written anyway, and again after the verdicts
        if held.lease - now <= hb and now >= held.next_heartbeat:
            # the heartbeat before was not confirmed (lost, or its verdict late): a lease with
            # less than HB left has no time to spare, so it goes now (marshal-sim seed 28 of
            # the sliced every-fault mix: a timed-out heartbeat, then one that waited, and the
            # child was stopped at its lease's end); the one owed after it (`beat_behind`)
            # waits for the verdicts like any other, not written again on every turn
            return False
        return self.ctx.pending.in_flight(Kind.RESERVE, held.key)

    def holds_back(self, held: HeldClaim, now: float) -> bool:
        """AMO, a child asks for a batch: whether its reservation waits for the heartbeat the
        claim owes. With no reservation in flight the heartbeat is written now, before it;
        with one in flight the reservation waits (`held_back`) until the heartbeat goes after
        the verdicts, else a heartbeat would never find the claim without one in flight (a
        child asks for its next batch as soon as it may)."""
        if not self.heartbeat_owed(held, now):
            return False
        if self.ctx.pending.in_flight(Kind.RESERVE, held.key):
            return True
        self.heartbeat(held, now)
        return False

    def after_reservation(self, held: HeldClaim, now: float) -> None:
        """A reservation's verdict came: once none of the claim's is in flight, the heartbeat
        that waited for them (or must follow one that could not wait) is written, with the
        position they moved, and then the reservations held back meanwhile."""
        if held.phase in (Phase.LOST, Phase.RELEASING):
            return
        if self.ctx.pending.in_flight(Kind.RESERVE, held.key):
            return
        if self.heartbeat_owed(held, now):
            self.heartbeat(held, now)

    def heartbeat(self, held: HeldClaim, now: float) -> None:
        """Write a heartbeat with the claim's position (its verdict extends the lease)."""
        assert held.position is not None
        ctx = self.ctx
        # one written while a reservation is in flight may land behind it: write another
        # after the verdict (`after_reservation`)
        held.beat_behind = ctx.pending.in_flight(Kind.RESERVE, held.key)
        held.next_heartbeat = now + ctx.s.heartbeat_interval / 2
        message = Heartbeat(*ctx.fields(held.key), held.position)
        ctx.append(Kind.HEARTBEAT, held.key, message, now, end=held.position)
        if held.held_back and not held.beat_behind:
            self.write_held_back(held, now)

    def write_held_back(self, held: HeldClaim, now: float) -> None:
        """AMO: the reservations held back for a heartbeat, written after it in the order
        asked (as they would have been), unless their child has ended or the claim is gone; one
        after a refused batch of its child, or once the lease is over, is refused unwritten."""
        waiting, held.held_back = held.held_back, []
        for message, extra in waiting:
            if extra["child"] != held.child_no or held.phase in (Phase.LOST, Phase.RELEASING):
                continue  # nobody to answer: the child has ended or is being killed
            refusal = None
            if held.refused_from is not None and extra["start"] >= held.refused_from:
                refusal = EARLIER_REFUSED
            elif now >= held.lease:
                refusal = "claim not held"
            if refusal is not None:
                start = extra["start"]
                held.refused_from = (
                    start if held.refused_from is None else min(held.refused_from, start)
                )
                self.tell(held.key, ipc.Grant(extra["request_id"], False, refusal))
                continue
            self.ctx.append(Kind.RESERVE, held.key, message, now, **extra)

    def heartbeat_decided(self, op: Op, event: ev.Event, now: float) -> None:
        """A heartbeat folded valid extends the lease by what it proves, and makes a looked-up
        start durable (its child may start now)."""
        held = self.ctx.held.get(op.key)
        if (
            held is not None
            and held.phase is not Phase.LOST
            and isinstance(event, ev.HeartbeatAccepted)
            and event.token == held.token
        ):
            deadline = self.ctx.lease_of(op)
            if deadline > held.lease:
                held.lease = deadline
                self.ctx.out.append(cmd.SetLease(held.key, deadline))
            if not held.durable and held.position is not None and op.end >= held.position:
                held.durable = True
                self.start_child(held, now)

    def late_heartbeat_landed(self, event: ev.HeartbeatAccepted) -> None:
        """A heartbeat of this instance with no known operation was accepted: one given up on
        landed after all (a coordination stall ended). It is credited with the oldest send
        time given up on for its claim, never a later one (the producer delivers in order),
        so the lease is never longer than some heartbeat proves."""
        ctx = self.ctx
        late = ctx.late_heartbeats.get(event.key)
        held = ctx.held.get(event.key)
        if not late:
            return
        sent_at = late.pop(0)
        if held is not None and held.phase is not Phase.LOST and event.token == held.token:
            deadline = ctx.lease_from(sent_at)
            if deadline > held.lease:
                held.lease = deadline
                ctx.out.append(cmd.SetLease(held.key, deadline))

    def lose(self, held: HeldClaim, reason: str) -> None:
        """The claim is no longer this member's: revoke the lease, kill the child, forget."""
        ctx, key = self.ctx, held.key
        ctx.say("warning", "claim_lost", topic=key.topic, partition=key.partition, reason=reason)
        held.phase = Phase.LOST
        held.lease = 0.0
        ctx.out.append(cmd.SetLease(key, 0.0))
        ctx.observe(obs.ClaimLost(key, reason))
        if held.child:
            held.kill_sent = held.term_sent = True
            self.signal_child(held, signal.SIGKILL, reason)
        else:
            self.drop(key)

    def clock_stood_still(self, now: float) -> None:
        """The lease clock stood still while the log's time (or the wall clock) ran on: every
        lease was judged on it and may have ended long ago, a rival may hold the claim. End
        them all now: revoke each child's lease and kill its process group. What follows is
        what follows a lease that ran out: nothing that carries a claim's position is written
        again (decision 19: no heartbeat, release, reservation or failure count), each claim
        is forgotten once its child is gone, its position kept for a claim won back with
        nobody in between (`reclaim`)."""
        for held in self.ctx.held.values():
            if held.phase is Phase.LOST:
                continue
            held.lease = min(held.lease, now)
            if held.revoked_lease is not None:
                held.revoked_lease = min(held.revoked_lease, now)
            held.held_back.clear()  # (their children are killed: nobody to answer)
            self.ctx.out.append(cmd.SetLease(held.key, 0.0))
            if held.child and not held.kill_sent:
                held.kill_sent = held.term_sent = True
                self.signal_child(held, signal.SIGKILL, "lease clock stood still")

    def drop(self, key: ClaimKey) -> None:
        """Forget a claim (its lease's shared memory may go). What it carried for a child that
        never started (`children.carried`) is lost now, and said so."""
        held = self.ctx.held.pop(key, None)
        if held is None:
            return
        self.ctx.out.append(cmd.DropLease(key))
        if held.carry is not None:
            start, end = held.carry
            why = "reserved for a child that stopped at a record boundary; no child took it after"
            self.ctx.held_lost(held, start, end, obs.LossCause.LEASE_EXPIRED, why)

    def finish(self, held: HeldClaim, now: float, *, release: bool) -> None:
        """The child is gone: release the claim if asked and possible, else forget it.

        A release tells every member that nobody of ours processes the partition. After a
        takeover that is true only once the replaced instance's lease has surely ended, so
        until then the claim stays held (and heartbeated) and the release waits. It waits too
        while a failure count of the claim is being written (again, after a failed write): the
        log counts a failure only from the holder, so a release landing first loses the count
        and the record is tried once more than ``poison_park_after`` (marshal-sim); and, in AMO,
        while a reservation of the claim is in flight: if it landed with its child gone, its
        records are lost, and said so while the claim is still known (`reserved_not_granted`
        is the backstop for one nothing told of)."""
        if release and self.release_waits(held, now) and held.phase is not Phase.LOST:
            held.phase = Phase.STOPPING  # `keep` comes back to it
            return
        if release and held.phase is not Phase.LOST and held.position is not None:
            granted = held.lease if held.revoked_lease is None else held.revoked_lease
            # (a fast stop revoked the child's lease, not the claim); a release over what the
            # claim carries for a child that can no longer start would say those records were
            # handled: the claim goes stale instead, a crash the log shows (marshal-sim seed
            # 7300013 of `failures,read-latency,restart,pause,partitions`, 8 faults at 0.3)
            if now >= granted or self.carry_left(held):
                why = LEASE_EXPIRED if now >= granted else "carries records no child will take"
                self.withhold_release(held, why)
                return
            held.phase = Phase.RELEASING
            self.reserved_not_granted(held)
            position = held.position
            state = self.ctx.state_of(held.key)
            if state is not None and state.certain and state.token == held.token:
                position = max(position, state.committed or 0)  # a release lowers nothing
            message = ReleasingPartition(*self.ctx.fields(held.key), position)
            self.ctx.append(Kind.RELEASE, held.key, message, now, end=position)
        else:
            self.drop(held.key)

    def reserved_not_granted(self, held: HeldClaim) -> None:
        """AMO, as a claim is let go with no reservation of it in flight: what the fold shows
        reserved under its token beyond what its children were granted (the position) is lost,
        and said so. Every path that refuses a landed reservation reports it as it goes; this
        is the backstop for one whose landing nothing told, so that no loss goes unreported."""
        if self.ctx.s.mode is not Mode.AMO or held.position is None:
            return
        state = self.ctx.state_of(held.key)
        if state is None or not state.certain or state.token != held.token:
            return
        reserved = state.committed or 0
        if reserved > held.position and not self.ctx.pending.in_flight(Kind.RESERVE, held.key):
            start, held.position = held.position, reserved
            why = "reserved in the log, never granted"
            self.ctx.held_lost(held, start, reserved, obs.LossCause.REFUSED, why)

    def withhold_release(self, held: HeldClaim, why: str = LEASE_EXPIRED) -> None:
        """The lease ran out before the release (or the claim carries records no child will
        take, `carry_left`): write none, forget the claim.

        Past its lease the member cannot know the claim is still its own: a rival may have won
        it 2*HB after its last valid heartbeat, and its fold may not show that yet (a consumer
        behind after a freeze, or a fold the cleaner made uncertain). Its release would then be
        refused, yet go under the key of the claim's position records after the rival's, and
        once the cleaner removes the rival's heartbeats and reservations it is the key's newest
        record: a reader of the compacted log takes its older position for the claim's and an
        AMO claim is granted twice (marshal-sim seeds 29 and 63 of freeze,eager-compaction).
        Without it the claim goes stale 2*HB after the last heartbeat the log accepted, a
        margin after the lease ended, and the next holder resumes at the log's position: ALO
        hands again what the child did after that heartbeat (as after a crash), AMO loses
        nothing more, its reservations being in the log. The position stays known here for a
        claim this member wins back with nobody in between (`reclaim`)."""
        key = held.key
        assert held.position is not None
        self.reserved_not_granted(held)
        self.ctx.say(
            "warning",
            "release_withheld",
            topic=key.topic,
            partition=key.partition,
            position=held.position,
            reason=why,
        )
        self.ctx.expired_positions[key] = held.position
        self.drop(key)

    def release_waits(self, held: HeldClaim, now: float) -> bool:
        """Whether a release of ``held`` must wait (see `finish`): for the old instance's lease,
        a failure count being written, or a reservation's verdict (AMO: if it landed and its
        child is gone, its records are lost, and reported as the claim is still held)."""
        pending = self.ctx.pending
        return (
            now < held.start_after
            or pending.in_flight(Kind.POISON, held.key)
            or pending.in_flight(Kind.RESERVE, held.key)
        )

    def release_decided(self, op: Op, event: ev.Event) -> None:
        """The release's verdict: the claim is forgotten either way."""
        confirmed = isinstance(event, ev.Released)
        key = op.key
        if confirmed:
            self.ctx.observe(obs.ClaimReleased(key))
            self.ctx.expired_positions.pop(key, None)
        else:
            self.release_unconfirmed(key, op.end)
        self.ctx.say(
            "info",
            "claim_released",
            topic=key.topic,
            partition=key.partition,
            position=op.end,
            confirmed=confirmed,
        )
        self.drop(key)

    def release_unconfirmed(self, key: ClaimKey, position: int) -> None:
        """A release refused or not written: remember its position (see `core.reclaim`)."""
        self.ctx.expired_positions[key] = position

    # ---- the child of a claim ---------------------------------------------------------------

    def spawn(self, held: HeldClaim, *, restart: bool, now: float) -> None:
        """Start a child at the claim's position with its token, and the partition's poison
        units of the last minute (`poison_ages`)."""
        key = held.key
        topic, part = split_topic(key.topic)
        carry, held.carry = held.carry, None  # handed to this child (`children.carried`)
        if carry is not None and carry[0] >= carry[1]:
            carry = None  # nothing to hand on
        elif carry is not None:
            self.ctx.say(
                "info", "amo_records_carried", topic=key.topic, partition=key.partition,
                start=carry[0], end=carry[1], records=records_at_most(key.topic, *carry),
                reason="reserved under this tenure and begun by no child before it",
            )  # fmt: skip
        spec = dataclasses.replace(
            self.ctx.s.child,
            topic=topic,
            slice=part,
            partition=key.partition,
            start_offset=held.position if carry is None else carry[0],
            granted_until=None if carry is None else carry[1],
            fencing_token=held.token,
            settle=held.settle,
            poison_ages=self.ctx.poison_ages(key, now),
        )
        held.settle = None
        held.child, held.child_since = True, now
        # a new child, numbered across claims (a claim lost and won again gets a new `HeldClaim`):
        # its batches are asked for afresh, and no verdict for an older child reaches it
        self.ctx.children_started += 1
        held.child_no = self.ctx.children_started
        held.asked_end = held.refused_from = held.left_from = None
        held.covered.clear()
        held.held_back.clear()
        held.term_sent = held.kill_sent = False
        self.ctx.out.append(cmd.Spawn(key, spec, restart))

    def signal_child(self, held: HeldClaim, sig: signal.Signals, reason: str) -> None:
        """Signal the child's process group, and say so (an operator's fast stop at info, a
        fence at warning: the children's own last lines may be lost with them)."""
        self.ctx.out.append(cmd.SignalChild(held.key, sig, reason))
        key = held.key
        level = "info" if reason == "fast stop" else "warning"
        self.ctx.say(level, "child_signalled", topic=key.topic, partition=key.partition,
                     signal=sig.name, reason=reason)  # fmt: skip

    def tell(self, key: ClaimKey, message: ipc.ToChild) -> None:
        """Say something to a claim's child, if it has one."""
        held = self.ctx.held.get(key)
        if held is not None and held.child:
            self.ctx.out.append(cmd.TellChild(key, message))

    def stop_child(
        self, held: HeldClaim, deadline: float, phase: Phase = Phase.STOPPING, reason: str = "stop"
    ) -> None:
        """Ask the child to finish its batch and stop (``phase``: what comes after it exits;
        ``reason``: what its plugin's teardown is told, `ipc.Stop`)."""
        held.phase = phase
        held.stop_deadline = deadline  # the lease still ends it earlier if heartbeats fail
        if held.child:
            self.tell(held.key, ipc.Stop(reason))
