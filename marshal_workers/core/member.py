"""The member's core: every decision of one supervisor, with no I/O and no clock.

Theory of operation
-------------------
A `Member` is fed inputs (`core.inputs`: records read from the coordination log, the log's
acknowledgements of its own appends, children's messages and exits, signals, ticks with the
time) and answers each with commands (`core.commands`: append this message, spawn, signal or
tell a child, set a lease, look something up, log, exit). The runtime carries them out and
feeds back what happened. The same core runs in `marshal-run` and, by the hundred, in
`marshal-sim`'s virtual time.

The member folds the log itself (`rationalizer.fold`, one world per coordination partition),
so every verdict is seen in log order, including the verdicts on its own writes. A write is a
pending operation (`core.pending`): appended, then decided when the fold reaches it. Claims,
heartbeats, reservations and releases of many partitions are in flight at once, and nothing
waits for anything unrelated: a slow coordination partition delays only its own claims.

Claims. Every ``HB/10`` the member plans (`planning.plan`) toward its fair share and claims all
it is short of in one round (a starting member of a group of more than 16 claims claims one,
and the rest once it has seen the members starting with it: `Claiming.claims_open_at`).
Claimability is judged by each claim's own coordination partition's log time (`core.logclock`),
so brokers whose clocks differ do not make claims look silent early or late. A refused claim
backs the claim off: at least 2*HB where the claim's history was compacted (every refused
attempt counts as activity there, so retrying sooner would never see the silence it waits for),
briefly elsewhere. The member claim (its announcement) is claimed alongside the first data
claim; in such a group the rest wait for it, at most HB/2.

Leases. A heartbeat sent at local time s and folded valid extends the claim's lease to
s + 2*HB - margin (`protocol.leases`); heartbeats go out every HB/2 per claim. The child reads the
lease from shared memory (`SetLease`). When the fold shows a claim lost (a refused heartbeat,
another instance of this client took it over, someone else won it) the lease is revoked and
the child's process group killed; before a lease ends the child gets TERM, then KILL. Local
time is the lease clock; when the log's time or the wall clock shows it stood still
(`core.clockcheck`), every lease ends at once (children killed, nothing carrying a position
written again on them) and the member reads the log to its end before it claims again.

Restart recovery. At start, each fresh claim this client holds in its own group and topics is
taken over with a heartbeat from this instance, if the log has a position for it (a claim with
none is claimed once stale: `Claiming.mine_to_resume`). The rationalizer gives the takeover a new
fencing token and keeps the position the claim has (never back, never forward); the
position is read from the fold at the takeover record itself, and the child starts only
once the old instance's lease has surely ended (2*HB after its last accepted heartbeat),
since it may still be alive on another host.

AMO grants. A child's request for a batch is refused unless the batch starts at or after the
position (the log's, at the reservation's verdict, and this member's). The reservation is
written; once folded as valid the child is granted (an accepted reservation commits its
records: no heartbeat per batch, rationalizer rule 4). A heartbeat due while a reservation of
the claim is in flight waits for its verdict (at most HB/4), and a reservation asked for
while a heartbeat is owed waits for the heartbeat, so the newest record on the claim's
position key never carries a position behind an accepted reservation (decision 18).

Isolation. The member reads, resumes, heartbeats, releases and counts only claims of its own
group (and its own topics, and its group's member claims): a client id is unique within a
group, not across groups.

Children's exits go through `childexits.decide`; a graceful release waits for the child to
exit and then writes ReleasingPartition at the position the child reported.

Where each part lives: `Member` (this file) takes the inputs, folds the log and routes every
verdict; `claiming.Claiming` resumes, claims and plans; `keeping.Keeping` keeps held claims
on their timers (heartbeats, leases, children's starts and kills, releases);
`children.Children` handles what children say and how they end; `operator.Operator` stops,
reloads and pauses. They share only `memberstate.MemberState`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from marshal_workers.common.errors import EXIT_COORDINATION_CHANGED, EXIT_GO_FLEET
from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core import observations as obs
from marshal_workers.core.children import Children
from marshal_workers.core.claiming import Claiming
from marshal_workers.core.gofleet import refusal
from marshal_workers.core.heldclaim import HELD_PHASES, HeldClaim, Phase
from marshal_workers.core.keeping import Keeping
from marshal_workers.core.memberstate import MemberState
from marshal_workers.core.operator import Operator
from marshal_workers.core.pending import Kind, Op
from marshal_workers.core.recordparking import RecordParking
from marshal_workers.core.settings import MemberSettings
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.leases import clock_tolerance
from marshal_workers.protocol.members import MEMBER_PREFIX, is_member_key
from marshal_workers.protocol.rationalizer import GroupPause, World, fold
from marshal_workers.protocol.recordfailures import PoisonCleared, PoisonVerdict
from marshal_workers.protocol.wire import ClaimKey, CoordRecord, Heartbeat

_MEMBER_MARK = b"/" + MEMBER_PREFIX.encode()  # in the record key of a member claim
LATE_HEARTBEATS_KEPT = 64  # per claim; beyond that a late heartbeat is simply not credited


class Member:
    """One member of a group: its claims, children, and what it writes (sans I/O)."""

    def __init__(self, settings: MemberSettings) -> None:
        self.s = settings
        self.ctx = MemberState(settings)
        self.parking = RecordParking(self.ctx)
        self.keeping = Keeping(self.ctx, self.parking)
        self.claiming = Claiming(self.ctx, self.keeping)
        self.children = Children(self.ctx, self.keeping, self.parking)
        self.operator = Operator(self.ctx, self.keeping, self.claiming)
        self.member = self.claiming.member
        self.malformed = 0
        self.started = False
        self._next_discovery = 0.0
        self._older: frozenset[str] = frozenset()  # instances of this client id before this one
        self._heard: set[str] = set()  # other instances of it heard alive (told once each)

    # ---- the one entry point ----------------------------------------------------------------

    def feed(self, event: inp.Input) -> list[cmd.Command]:
        """Apply one input; return the commands it calls for, in order."""
        self.ctx.out = []
        if isinstance(event, inp.RecordsRead):
            self._fold(event.records, event.now)
        elif isinstance(event, inp.Tick):
            self._tick(event)
        elif isinstance(event, inp.ClocksRead):
            self._clocks_read(event.now, event.wall)
        elif isinstance(event, inp.AppendDone):
            self._appended(event)
        elif isinstance(event, inp.AppendFailed):
            op = self.ctx.pending.take(event.op)
            if op is not None:
                self._gave_up(op, event.error, event.now)
        elif isinstance(event, inp.ChildSaid):
            self.children.said(event)
        elif isinstance(event, inp.ChildExited):
            self.children.exited(event)
        elif isinstance(event, inp.SignalReceived):
            self.operator.signal(event.signal, event.now)
        elif isinstance(event, inp.PartitionsFound):
            self._partitions_found(event)
        elif isinstance(event, inp.DiscoveryFailed):
            self.ctx.say("warning", "partition_discovery_failed", error=event.error)
        elif isinstance(event, inp.StartFound):
            self.claiming.start_found(event)
        elif isinstance(event, inp.StartFailed):
            self.claiming.start_failed(event)
        elif isinstance(event, inp.LogEndFound):
            self._log_end_found(event)
        return self.ctx.out

    def begin(self, now: float, wall: float, partitions: Iterable[ClaimKey]) -> list[cmd.Command]:
        """After catching up with the log: resume this client's fresh claims, start claiming."""
        self.ctx.out = []
        self.ctx.wall = wall
        self.started = True
        self.claiming.partitions = list(partitions)
        self._next_discovery = now + self.s.discovery_interval
        self._older = self._earlier_instances()
        self.claiming.begin(now)
        if not self.operator.dormant:  # (replaced while catching up: it resumes nothing)
            self.claiming.resume_all(now)
        self._claim_or_wait(now)  # another client's pause holds from round one
        return self.ctx.out

    def _claim_or_wait(self, now: float) -> None:
        """Claim toward the fair share, unless the group is paused by another client or this
        instance is dormant (replaced by another of its client id)."""
        if self.operator.dormant:
            self.operator.stay_dormant(now)
            if self.operator.dormant:
                return
        if not self.operator.react_to_pause(now):
            self.claiming.rebalance(now)

    def _earlier_instances(self) -> frozenset[str]:
        """The instances of this client id the log shows holding its member claim as this one
        begins (a stale or frozen one, one this one takes over): their takeovers do not make this
        one dormant (`_replaced_by`). One that wakes after this one won the claim by its silence
        can still land a heartbeat the fold takes as a takeover (its producer held it through a
        suspend): that one goes dormant, on this one's grant, and this one claims again."""
        state = self.ctx.state_of(self.member)
        if state is None:
            return frozenset()
        found = {state.holder_instance} if state.holder_client == self.s.client_id else set()
        if state.seen_holder is not None and state.seen_holder[0] == self.s.client_id:
            found.add(state.seen_holder[1])
        return frozenset(i for i in found if i is not None and i != self.s.instance_id)

    def request_stop(self, now: float, fast: bool) -> list[cmd.Command]:
        """As if TERM (``fast``: INT) had come."""
        self.ctx.out = []
        self.operator.request_stop(now, fast)
        return self.ctx.out

    # ---- queries ----------------------------------------------------------------------------

    @property
    def held(self) -> dict[ClaimKey, HeldClaim]:
        """The claims this member holds (the member claim among them)."""
        return self.ctx.held

    @property
    def worlds(self) -> dict[int, World]:
        """The folded log, one world per coordination partition it follows (all, spread)."""
        return self.ctx.worlds

    @property
    def done(self) -> bool:
        """The member has finished (stopped, or refused to go on)."""
        return self.operator.done

    @property
    def exit_code(self) -> int | None:
        """The exit code it finished with."""
        return self.operator.exit_code

    @property
    def exit_reason(self) -> str:
        """Why it finished with a code other than 0 (one line), or ""."""
        return self.operator.exit_reason

    @property
    def paused_until_ms(self) -> int | None:
        """The end (log time) of the pause of the group in force, if any."""
        return self.operator.paused_until_ms

    def pause(self, now: float) -> GroupPause | None:
        """The pause of this group by another client in force now, or None."""
        return self.operator.pause(now)

    def healthy(self, now: float) -> bool:
        """No lease closer to its end than a heartbeat round allows, and not starving: holding
        nothing at work for a few HB while the group has work nobody else does."""
        grace = self.s.kill_grace
        leases_ok = all(
            h.is_member or h.lease - now > grace
            for h in self.ctx.held.values()
            if h.phase in HELD_PHASES
        )
        return leases_ok and not self.claiming.starving(now)

    # ---- the log ----------------------------------------------------------------------------

    def _fold(self, records: Sequence[CoordRecord], now: float) -> None:
        worlds, group, started = self.ctx.worlds, self.s.group, self.started
        seen = self.ctx.clock_check.seen
        lost = max((seen(r.partition, r.timestamp_ms, now) for r in records), default=0.0)
        self._check_clock(lost, now, "log time")  # before any verdict is acted on
        newest: dict[int, int] = {}
        for record in records:
            world = worlds[record.partition]
            event = fold(world, record)
            newest[record.partition] = world.log_time
            if not isinstance(event, ev.ClaimVerdict):
                if isinstance(event, ev.Malformed):
                    self.malformed += 1
                    if event.keyless_group == group:
                        self._refuse_go_fleet(event)
                elif isinstance(event, ev.GroupSettingsRecorded) and started:
                    self.operator.settings_recorded(event, now)
                elif isinstance(event, PoisonVerdict) and started:
                    self._poison_verdict(event, now)
                continue
            if event.message.group_id != group:
                continue  # another group's claim, whatever its client id
            if started:
                self._on_event(event, now)
            elif record.key and _MEMBER_MARK in record.key:
                self.claiming.member_keys.add(event.key)
        for partition, log_time in newest.items():
            self.ctx.clock.saw(partition, log_time, now)
        if self.ctx.resync:
            self._resynced(now)

    def _on_event(self, event: ev.ClaimVerdict, now: float) -> None:
        """A verdict on a claim of this member's group."""
        me = self.s
        mine = event.client_id == me.client_id and event.instance_id == me.instance_id
        if mine and isinstance(event, ev.ClaimGranted):  # which of its claims landed, if adopted
            self.claiming.own_grants[event.key] = (event.token, event.coord_offset, event.message)
        op = self.ctx.pending.decided(event, mine, now)
        if op is not None:
            self._resolve(op, event, now)
        elif mine and isinstance(event, ev.HeartbeatAccepted):
            self.keeping.late_heartbeat_landed(event)
        elif mine and isinstance(event, ev.MessagesClaimed):
            self.children.reservation_landed(event, now)
        elif mine and isinstance(event, ev.ClaimGranted):
            self.claiming.late_grant(event, now)
        key = event.key
        if isinstance(event, ev.Released) and not mine:
            self.ctx.observe(obs.ReleaseSeen(key))
            self.claiming.released_by_another(key, now)
        if is_member_key(key):
            self.claiming.member_keys.add(key)
            if isinstance(event, ev.ClaimGranted) and key != self.member:
                self.claiming.member_joined(now)  # a starting member's settle starts again
        other_instance = event.client_id == me.client_id and event.instance_id != me.instance_id
        if isinstance(event, ev.HeartbeatAccepted) and other_instance:
            self.claiming.old_instance_heard(key, event.log_time)
        held = self.ctx.held.get(key)
        holding = held is not None and held.phase is not Phase.LOST
        if held is not None and holding:
            self._watch(held, event, mine)
        if key == self.member and other_instance and self._replaced_by(event, holding):
            self.operator.replaced(event.instance_id, now)

    def _poison_verdict(self, event: PoisonVerdict, now: float) -> None:
        """A poison record folded: the verdict on one this member wrote, if it is one, and an
        operator's decision heeded."""
        me, message = self.s, event.message
        mine = message.client_id == me.client_id and message.instance_id == me.instance_id
        op = self.ctx.pending.decided(event, mine, now)
        if op is not None:
            self._resolve(op, event, now)
        if isinstance(event, PoisonCleared) and message.group_id == me.group:
            self._heed_decision(event)

    def _heed_decision(self, event: PoisonCleared) -> None:
        """An operator's retry or skip of one of this group's records ends this member's wait
        to claim it again (`claim_releasing` after repeated failures): the decision is a new
        start, and a wait of every member that released it would leave it unclaimed."""
        ctx, message = self.ctx, event.message
        key = event.key
        until = ctx.failure_avoid.pop(key, None)
        if until is not None and ctx.avoid_until.get(key) == until:
            del ctx.avoid_until[key]  # only the wait the failures set, none other
        held = ctx.held.get(key)
        if held is not None and held.failed_offset == message.offset:
            held.failures = 0  # the count starts again, here as in the log

    def _replaced_by(self, event: ev.ClaimVerdict, holding: bool) -> bool:
        """Whether another instance's verdict on this member's announcement makes this one the
        duplicate, which goes dormant (`Operator.replaced`): another instance won it (two
        started at once, this one frozen past its lease, or one dormant for this one claimed
        again after this one fell silent), or took it over from this one (its takeover names
        this one, or a heartbeat of it comes while this one holds it: unverified where the
        cleaner erased the takeover). A takeover by an instance the log showed holding it as
        this one began is not obeyed (`_earlier_instances`: its late records). An instance
        heard while this one neither holds the announcement nor is acquiring it replaces this
        one if this one had announced itself before (it lost the announcement, and the other
        holds it now); else it is told once (`another_instance_alive`), not obeyed: this one
        may have taken it over with a write whose verdict is late."""
        if isinstance(event, ev.ClaimGranted):
            return True  # the log's own decision, whoever won it
        beat = isinstance(event, ev.HeartbeatAccepted) or (
            isinstance(event, ev.Unverified) and isinstance(event.message, Heartbeat)
        )  # (an uncertain claim's heartbeats are unverified: the instance is alive all the same)
        ops = self.ctx.pending.ops.values()
        acquiring = any(o.key == self.member and o.kind in (Kind.CLAIM, Kind.TAKEOVER) for o in ops)
        if beat and not holding and self._lost_announcement(acquiring):
            return True  # (an earlier instance too: it heartbeats the announcement again)
        if event.instance_id in self._older:
            return False  # an instance this one replaces (its late records)
        me = self.s.instance_id
        if isinstance(event, ev.HeartbeatAccepted) and event.replaced_instance == me:
            return True  # a takeover from this one, whatever this one holds now
        if holding:
            return beat
        if beat and not acquiring and event.instance_id not in self._heard:
            self._heard.add(event.instance_id)
            self.ctx.say(
                "warning", "another_instance_alive", instance=event.instance_id,
                reason="another instance of this client id heartbeats its member claim: two "
                "hosts share --client-id, or a restarted one's claim is uncertain (compacted)",
            )  # fmt: skip
        return False

    def _lost_announcement(self, acquiring: bool) -> bool:
        """Whether this instance held its announcement once and holds it no more, claiming it
        again through no write (frozen past its lease, say): then another instance that
        heartbeats it replaced this one. Its own fold may never show that one's grant: made
        uncertain by the cleaner, it refuses every claim until 2*HB of silence, which the
        other's heartbeats never leave (marshal-sim seed 3870085: the two ran on side by
        side, each claiming partitions as the one client id)."""
        return self.claiming.announced_at is not None and not acquiring

    def _watch(self, held: HeldClaim, event: ev.ClaimVerdict, mine: bool) -> None:
        """What others' records (and refusals of ours) mean for a claim this member holds."""
        me = self.s
        if isinstance(event, ev.HeartbeatAccepted):
            if event.client_id == me.client_id and event.instance_id != me.instance_id:
                self.keeping.lose(held, f"taken over by instance {event.instance_id}")
        elif isinstance(event, ev.HeartbeatRejected) and mine:
            self.keeping.lose(held, f"heartbeat refused: {event.reason}")
        elif isinstance(event, ev.ClaimGranted) and event.token != held.token:
            if held.phase is Phase.RELEASING:
                return  # given up: its release was folded before its acknowledgement came
            self.keeping.lose(held, f"claimed by {event.client_id}")

    def _resolve(self, op: Op, event: ev.Event, now: float) -> None:
        """The fold reached one of this member's writes: act on its verdict."""
        self.ctx.observe(obs.CoordinationWrite(op.kind.value, now - op.sent_at, True))
        if op.kind is Kind.CLAIM:
            self.claiming.claim_decided(op, event, now)
        elif op.kind is Kind.TAKEOVER:
            self.claiming.takeover_decided(op, event, now)
        elif op.kind is Kind.HEARTBEAT:
            self.keeping.heartbeat_decided(op, event, now)
        elif op.kind is Kind.RESERVE:
            self.children.reservation_decided(op, event, now)
            held = self.ctx.held.get(op.key)
            if held is not None:  # a heartbeat that waited for this verdict goes now
                self.keeping.after_reservation(held, now)
        elif op.kind is Kind.RELEASE:
            self.keeping.release_decided(op, event)
        elif op.kind is Kind.POISON and isinstance(event, PoisonVerdict):
            self.parking.decided(op, event)

    def _appended(self, done: inp.AppendDone) -> None:
        pending, landed = self.ctx.pending, done.appended
        op = pending.ops.get(done.op)
        sent_at = None if op is None or op.before_stall else op.sent_at
        lost = self.ctx.clock_check.landed(landed.partition, landed.log_time, sent_at, done.now)
        self._check_clock(lost, done.now, "log time")
        early = pending.appended(done.op, done.appended.partition, done.appended.offset)
        if early is not None:
            op = pending.take(done.op)
            if op is not None:
                self._resolve(op, early, done.now)

    def _gave_up(self, op: Op, error: str, now: float) -> None:
        """A write failed or its verdict never came: undo what waited for it. Unless the fold
        already showed its record landed (a timeout after which the record still appears,
        folded before the acknowledgement said so): then it is decided on that verdict."""
        landed = self.ctx.pending.early_verdict(op)
        if landed is not None:
            self._resolve(op, landed, now)
            return
        ctx, key = self.ctx, op.key
        ctx.observe(obs.CoordinationWrite(op.kind.value, now - op.sent_at, False))
        ctx.say(
            "warning",
            "coordination_write_failed",
            message=op.kind.value,
            topic=key.topic,
            partition=key.partition,
            error=error,
        )
        if op.kind in (Kind.CLAIM, Kind.TAKEOVER):
            self.claiming.gave_up(op, now)
        elif op.kind is Kind.HEARTBEAT and not op.before_stall:
            late = ctx.late_heartbeats.setdefault(key, [])
            if len(late) < LATE_HEARTBEATS_KEPT:
                late.append(op.sent_at)
        elif op.kind is Kind.RESERVE:
            self.children.reservation_given_up(op, error, now)
        elif op.kind is Kind.POISON:
            self.parking.gave_up(op, now)
        elif op.kind is Kind.RELEASE:
            self.keeping.release_unconfirmed(key, op.end)
            self.keeping.drop(key)

    # ---- time -------------------------------------------------------------------------------

    def _clocks_read(self, now: float, wall: float) -> None:
        """Both clocks, compared: the wall clock moved further than the lease clock since the
        last reading (a suspend the lease clock did not count) ends every lease. The runtime
        reads them first in every turn, and again in its tick."""
        self.ctx.wall = wall
        self._check_clock(self.ctx.clock_check.ticked(now, wall), now, "wall clock")

    def _tick(self, tick: inp.Tick) -> None:
        ctx, now = self.ctx, tick.now
        self._clocks_read(now, tick.wall)
        for op in ctx.pending.expired(now, self.s.op_timeout):
            self._gave_up(op, "no verdict in time", now)
        self.keeping.take_positions(tick.positions)
        for held in list(ctx.held.values()):
            self.keeping.keep(held, now)
        self.operator.check_reload()
        if not self.started:
            return
        if ctx.stopping:
            self.operator.advance_stop(now)
            return
        if now >= self._next_discovery:
            self._next_discovery = now + self.s.discovery_interval
            ctx.out.append(cmd.Discover())
        if ctx.resync is not None:
            self._resync_wait(now)
            return  # nothing claimed before the log is read to its end
        self._claim_or_wait(now)

    # ---- a lease clock that stood still -----------------------------------------------------

    def _check_clock(self, lost: float, now: float, seen_by: str) -> None:
        """``lost``: seconds the lease clock failed to count, as ``seen_by`` shows. Above the
        tolerance every lease judged on it ends now (`Keeping.clock_stood_still`): none of
        them can be trusted (a rival may have won the claim by the broker's clock), so no
        heartbeat, reservation, release or count is written on them again, and writes in
        flight that were sent on that clock prove no lease (`MemberState.lease_of`). The
        member then reads the log to the end it has now before it claims anything."""
        ctx = self.ctx
        if lost <= clock_tolerance(self.s.heartbeat_interval):
            return
        ctx.say("error", "lease_clock_stood_still", lost_s=round(lost, 3), seen_by=seen_by,
                claims=len(ctx.held))  # fmt: skip
        ctx.clock_check.forget_anchors()
        for op in ctx.pending.ops.values():
            op.before_stall = True
        ctx.late_heartbeats.clear()
        self.claiming.forget_sent()
        self.keeping.clock_stood_still(now)
        ctx.resync = {}
        ctx.resync_asked_at = now
        ctx.out.append(cmd.FindLogEnd())

    def _resync_wait(self, now: float) -> None:
        """Reading the log to its end after the lease clock stood still: ask again where it
        ends while no answer came."""
        ctx = self.ctx
        if not ctx.resync and now - ctx.resync_asked_at >= self.s.heartbeat_interval / 2:
            ctx.resync_asked_at = now
            ctx.out.append(cmd.FindLogEnd())

    def _log_end_found(self, found: inp.LogEndFound) -> None:
        ctx = self.ctx
        if ctx.resync is not None and not ctx.resync:  # the ends of the partitions it folds
            ctx.resync = {p: end for p, end in found.ends.items() if p in ctx.worlds}
            self._resynced(found.now)

    def _resynced(self, now: float) -> None:
        """The member may write again once its fold has reached the ends it was given."""
        ctx = self.ctx
        ends = ctx.resync
        if not ends or any(ctx.worlds[p].next_offset < end for p, end in ends.items()):
            return
        ctx.resync = None
        ctx.say("info", "coordination_log_reread", partitions=len(ends))

    def _refuse_go_fleet(self, event: ev.Malformed) -> None:
        """A keyless Marshal record of this group: a Marshal Go fleet writes to it, and both
        would claim the same partitions. Refuse to run (exit 5, not restarted)."""
        if self.operator.done:
            return
        reason = str(refusal(event, self.s.coordination_topic))
        if self.started:  # at start the runtime says it: nothing but that one line
            self.ctx.say("error", "refusing_to_run", reason=reason)
        self.operator.exit(EXIT_GO_FLEET, reason)

    def _partitions_found(self, found: inp.PartitionsFound) -> None:
        expected = self.s.coordination_partitions
        if found.coordination_partitions != expected:
            reason = (
                f"the coordination topic now has {found.coordination_partitions} partitions, "
                f"not {expected}: claims would move; refusing to go on"
            )
            self.ctx.say("error", "refusing_to_run", reason=reason)
            self.operator.exit(EXIT_COORDINATION_CHANGED, reason)
            return
        self.claiming.partitions_found(found)
