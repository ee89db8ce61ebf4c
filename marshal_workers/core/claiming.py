"""How a member comes to hold claims: restart recovery, claiming its fair share, discovery.

`Claiming` resumes this client's fresh claims at start (a takeover heartbeat; the child waits
for the replaced instance's lease), plans every HB/10 toward the fair share and claims all it
is short of in one round, backs off after refusals (more than 2*HB where the claim's history was
compacted), finds start positions for claims the log has none for, follows partition changes,
and tracks whether the member is starving (holding nothing at work while work is unclaimed).

A starting member of a group with more than SETTLE_ABOVE_CLAIMS claims (slices of a hot
partition, a fleet's many partitions) claims one data claim at once and the rest of its share
only once it has seen the others that start with it (`claims_open_at`): when the fold has
reached its own announcement and a settle of HB/10 (50 ms to 1 s) has passed with no other
member announcing itself, and at most HB/2 after its start whatever happens. Members started
together then each claim their fair share of all of them, instead of the first one claiming
everything and releasing most of it again (each handover a child killed and another started).
A lone member starts its first child as before and the others a settle later. With few claims
a handover costs a few children at most, less than the settle would cost every start (a lone
member's launch to every partition, the 0.7 s goal at HB 5 s): such a member claims
its share at once, as before.
"""

from __future__ import annotations

from collections.abc import Iterable

from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core import observations as obs
from marshal_workers.core.heldclaim import HELD_PHASES, HeldClaim
from marshal_workers.core.keeping import Keeping
from marshal_workers.core.memberstate import MemberState
from marshal_workers.core.pending import Kind, Op
from marshal_workers.core.planning import Plan, plan
from marshal_workers.core.reclaim import reclaimed_position
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.members import is_claimable, is_live, is_member_key, member_key
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import ClaimState, freshness, resume_offset
from marshal_workers.protocol.wire import ClaimingPartition, ClaimKey, Heartbeat

START_SETTLE_HB = 0.1  # after its announcement is folded, a starting member waits HB/10 ...
START_SETTLE_S = (0.05, 1.0)  # ... within these bounds (seconds)
START_WAIT_HB = 0.5  # and claims its share at most HB/2 after its start, announced or not
START_CLAIMS = 1  # what a starting member holds or claims before that (no member's share is less)
SETTLE_ABOVE_CLAIMS = 16  # a group with at most this many claims does not settle at the start


def start_settle(heartbeat_interval: float) -> float:
    """The settle after a starting member's own announcement is folded (seconds)."""
    low, high = START_SETTLE_S
    return min(high, max(low, START_SETTLE_HB * heartbeat_interval))


class Claiming:
    """The member's claims in the making."""

    def __init__(self, ctx: MemberState, keeping: Keeping) -> None:
        self.ctx = ctx
        self.keeping = keeping
        self.member = member_key(ctx.s.group, ctx.s.client_id)
        self.partitions: list[ClaimKey] = []
        self.member_keys: set[ClaimKey] = set()  # the group's member claims seen in the log
        self.idle_since: float | None = None
        self._old_seen: dict[ClaimKey, int] = {}  # takeovers: the old instance's last heartbeat
        # the first claim sent since a verdict: its send time, and the fold's next offset then
        self.first_sent: dict[ClaimKey, tuple[float, int]] = {}
        # the claims sent since a verdict (each message's first send, those older than a lease
        # let go), and the newest grant of this instance's claims the fold showed (token, the
        # record's offset, message): which claim landed (`_landed_at`)
        self.sent_since: dict[ClaimKey, dict[ClaimingPartition, float]] = {}
        self._newest_second: dict[ClaimKey, int] = {}  # of the claims sent since a verdict
        self.own_grants: dict[ClaimKey, tuple[int, int, ClaimingPartition]] = {}
        self._next_claim = self._next_release = 0.0
        # claims sent again at once after a failed write on a partition the fold shows released
        # (`gave_up`): once, then a failure backs off (a write that fails at once each time)
        self._claimed_again: set[ClaimKey] = set()
        self.begun_at: float | None = None  # when the member began (after its catch-up)
        self.announced_at: float | None = None  # when the fold first showed its member claim
        self.joined_at: float | None = None  # when the fold last showed another member announce
        self._group_view_told: obs.GroupView | None = None

    # ---- restart recovery ------------------------------------------------------------------

    def resume_all(self, now: float) -> None:
        """At start: take over this client's fresh claims of its own group and topics."""
        for world in self.ctx.worlds.values():
            for key, state in list(world.claims.items()):
                if self.mine_to_resume(key, state, now):
                    self.resume(key, state, now)

    def mine_to_resume(self, key: ClaimKey, state: ClaimState, now: float) -> bool:
        """A fresh, certain claim of this client in this member's group and topics, with a
        position in the log (a member claim needs none). A data claim with none yet (its
        holder won it and had no start in the log) is left to go stale and is claimed then:
        a takeover at a start this instance looked up could lie above the old instance's
        first heartbeat, landed meanwhile with a lower start that it may have handed to a
        child, and a reader of the compacted log, which cannot tell a takeover from a
        heartbeat, would start there and pass the records between over (`marshal-sim` seed
        403004, a review). A takeover then always carries a position read from the log, so
        the position it lands on is never below it. It costs 2*HB when a holder died between
        its claim and its first heartbeat."""
        ctx = self.ctx
        if not (ctx.is_mine(key) and state.certain and state.holder_client == ctx.s.client_id):
            return False
        if state.last_heartbeat is None:
            return False
        if state.committed is None and not is_member_key(key):
            return False
        label = freshness(state.last_heartbeat, ctx.log_now_ms(key, now), ctx.s.hb_ms)
        return label.value != "stale"

    def resume(self, key: ClaimKey, state: ClaimState, now: float) -> None:
        """Take a claim of this client over (restart recovery) at the log's position."""
        assert state.last_heartbeat is not None
        self._old_seen[key] = state.last_heartbeat
        if is_member_key(key):
            self.take_over(key, 0, now)
        else:
            assert state.committed is not None  # (`mine_to_resume`)
            self.take_over(key, state.committed, now)

    def take_over(self, key: ClaimKey, offset: int, now: float) -> None:
        """Write the takeover heartbeat."""
        message = Heartbeat(*self.ctx.fields(key), offset)
        self.ctx.append(Kind.TAKEOVER, key, message, now)

    def old_instance_heard(self, key: ClaimKey, log_time: int) -> None:
        """The instance being replaced had a heartbeat accepted (it may still be alive)."""
        if self.ctx.pending.in_flight(Kind.TAKEOVER, key):
            self._old_seen[key] = log_time

    def takeover_decided(self, op: Op, event: ev.Event, now: float) -> None:
        """The takeover's verdict: hold the claim; its child waits for the old lease."""
        ctx, key = self.ctx, op.key
        old_seen = self._old_seen.pop(key, 0)
        if not isinstance(event, ev.HeartbeatAccepted) or self.grant_passed(event):
            ctx.say("info", "claim_not_resumed", topic=key.topic, partition=key.partition)
            if self.free_again(key):  # released by the time this turn heard: claim it now
                self._next_claim = min(self._next_claim, now)
            return
        held = self.keeping.hold(key, event.token, ctx.lease_of(op), now)
        self._announced(key, now)
        if not held.is_member:
            # The old instance may still run (another host with this client id): its lease
            # ends at most 2*HB after its last accepted heartbeat, in log time.
            held.start_after = now + self.takeover_wait(old_seen, event.log_time)
            self.set_position(held, self.resume_position(key))
            self.passed_over(held)
        ctx.say(
            "info",
            "claim_resumed",
            topic=key.topic,
            partition=key.partition,
            token=event.token,
            replaced=event.replaced_instance,
            position=held.position,
            starts_in_s=round(max(0.0, held.start_after - now), 3),
        )
        if ctx.stopping:
            self.keeping.finish(held, now, release=True)

    def takeover_wait(self, old_seen_ms: int, takeover_ms: int) -> float:
        """Seconds a resumed claim waits before its child starts: the replaced instance's lease
        ends at most 2*HB after its last accepted heartbeat (log time), then a margin."""
        s = self.ctx.s
        wait_ms = max(0, old_seen_ms + 2 * s.hb_ms - takeover_ms)
        return wait_ms / 1000 + s.margin

    # ---- claiming ---------------------------------------------------------------------------

    def claim(self, key: ClaimKey, now: float) -> None:
        """Write a claim."""
        ctx = self.ctx
        if key not in self.first_sent:  # the first claim since a verdict: when, and where the
            # fold stood (any grant at or past that offset is of a claim sent since)
            self.first_sent[key] = (now, ctx.worlds[ctx.home(key)].next_offset)
        message = ClaimingPartition(*ctx.fields(key))
        sent = self.sent_since.setdefault(key, {})
        newest = self._newest_second.get(key)
        if message not in sent:  # (the same bytes again: their first send counts)
            # bytes of a second not past every claim's since may be those of a claim let go
            # below (the wall clock went back): the first claim's send stands for it, as safe
            fresh = newest is None or message.unix_sec > newest
            sent[message] = now if fresh else self.first_sent[key][0]
        self._newest_second[key] = max(message.unix_sec, newest or message.unix_sec)
        too_old = now - (ctx.lease_from(now) - now)  # a claim sent before: adopted, over at once
        for old in [m for m, at in sent.items() if at < too_old]:
            del sent[old]  # (the fallback, the first claim's send, is no later: as safe)
        ctx.append(Kind.CLAIM, key, message, now)

    def forget_sent(self, key: ClaimKey | None = None) -> None:
        """A verdict on a claim of ``key`` (None: every key's, the lease clock stood still):
        the claims sent before it are no longer the ones a grant may be of."""
        if key is None:
            self.first_sent.clear()
            self.sent_since.clear()
            self._newest_second.clear()
        else:
            self.first_sent.pop(key, None)
            self.sent_since.pop(key, None)
            self._newest_second.pop(key, None)

    def claim_decided(self, op: Op, event: ev.Event, now: float) -> None:
        """The claim's verdict: hold it, or back off."""
        ctx, key = self.ctx, op.key
        self._claimed_again.discard(key)
        if not isinstance(event, ev.ClaimGranted) or self.grant_passed(event):
            if self.adopt_landed(key, now):  # refused as this instance's own: an earlier won
                return
            self.forget_sent(key)
            if self.free_again(key):
                self._next_claim = min(self._next_claim, now)
                return
            uncertain = not (state := ctx.state_of(key)) or not state.certain
            backoff = self.refusal_backoff(uncertain)
            ctx.avoid_until[key] = max(ctx.avoid_until.get(key, 0.0), now + backoff)
            # a rival won it: plan again at once, so that a free partition the two did not both
            # want is claimed now, not a round later (the refused one is left alone meanwhile)
            self._next_claim = min(self._next_claim, now)
            return
        self.forget_sent(key)
        self._won(key, event.token, ctx.lease_of(op), event.previous_client, now)

    def grant_passed(self, grant: ev.ClaimGranted | ev.HeartbeatAccepted) -> bool:
        """Whether the fold had gone past this grant (or accepted takeover) before its verdict
        was acted on: its acknowledgement came after the turn folded the lapse of the claim and
        a later holder's grant, or release (a member that stalled while its claim landed).
        Such a grant is treated as a refusal: holding it, with its lease over, released the
        claim again and kept this member off a partition the fold shows free for a heartbeat
        interval (marshal-sim, seed 3882007 of twins,freeze,stall,restart,forged-takeover)."""
        state = self.ctx.state_of(grant.key)
        if state is None or is_member_key(grant.key):
            return False  # nothing to judge it by; an announcement's own rules (`Operator`)
        if state.released or (state.token is not None and state.token != grant.token):
            return True
        if not state.certain:
            # after a gap the holder shown is whoever wrote next, a refused zombie's heartbeat
            # too: only a new grant (a new token, 2*HB of silence first) passes this one
            return False
        me = self.ctx.s
        holder = (state.holder_client, state.holder_instance)
        return state.holder_instance is not None and holder != (me.client_id, me.instance_id)

    def adopt_landed(self, key: ClaimKey, now: float) -> bool:
        """Hold ``key`` if the fold shows this instance holding it though no verdict on its
        claims came as such: a claim whose write was given up (timed out) but landed, or whose
        grant was folded while no claim of it was in flight. Without this the member held
        nothing while the log said it held the claim, and could claim again only once the
        log's claim went stale, 2*HB later (marshal-sim, seed 11 of poison,failures at a 0.2
        fail rate). Only a grant (or takeover) at or past the offset the fold stood at when
        the first claim since the last verdict was sent: an earlier token is of an earlier
        tenure of this instance, which the fold still shows until a release or a rival's grant
        lands (a review: adopting it held a stale claim while a rival won it). The offset of
        the grant's record is compared, not its token: a moved group's tokens start above its
        offsets (a review), so only a grant of one of this instance's claims that the fold
        showed as such (`own_grants`) is adopted. So the grant is of a claim sent since, and
        the lease counts from the first send of the granted record's bytes (`_landed_at`), or
        of the first claim since if they were not sent since. Only on a certain claim (after
        the cleaner the fold's holder is a guess)."""
        ctx, s = self.ctx, self.ctx.s
        state = ctx.state_of(key)
        if key in ctx.held or state is None or not state.certain or state.token is None:
            return False
        if state.holder_client != s.client_id or state.holder_instance != s.instance_id:
            return False
        first = self.first_sent.get(key)
        grant = self.own_grants.get(key)
        if first is None or grant is None or grant[0] != state.token or grant[1] < first[1]:
            return False  # (offsets compared: a moved group's tokens start above its offsets)
        sent = self._landed_at(key, grant[2], first[0])
        self.forget_sent(key)
        ctx.say("info", "claim_adopted", topic=key.topic, partition=key.partition,
                token=state.token)  # fmt: skip
        self._won(key, state.token, ctx.lease_from(sent), None, now)
        return True

    def _landed_at(self, key: ClaimKey, granted: ClaimingPartition, first: float) -> float:
        """When the claim whose grant (of the record ``granted``) is adopted was sent: the
        first send, since the last verdict, of the granted record's bytes (a message carries
        whole wall seconds, so claims sent in other seconds are told apart), else ``first``
        (the first claim since).

        Every claim since the last verdict may be the one that landed (a write told it failed
        may land all the same), so counting from the first is safe, but a claim that failed
        long before made the next one useless: adopted with its lease over, given up at once,
        and the partition held by nobody until that record went stale, 2*HB more (marshal-sim
        seed 1608056 at a 0.3 fail rate: a failed claim 20 s before). The bytes name the
        claim: claims are written in order by one producer, so none sent before the last
        verdict lands after it, and of the claims since, only those with these bytes can be
        the record, none sent before the first of them."""
        return self.sent_since.get(key, {}).get(granted, first)

    def late_grant(self, event: ev.ClaimGranted, now: float) -> None:
        """A grant of this instance's claim that no claim in flight was told: adopt it."""
        if event.key not in self.in_flight():
            self.adopt_landed(event.key, now)

    def _won(
        self, key: ClaimKey, token: int, lease: float, previous: str | None, now: float
    ) -> None:
        ctx = self.ctx
        held = self.keeping.hold(key, token, lease, now)
        self._announced(key, now)
        if previous is not None and not held.is_member:  # its holder went stale, unreleased
            ctx.observe(obs.Failover(key, previous))
        if not held.is_member:
            position = self.resume_position(key)
            own = ctx.expired_positions.pop(key, None)
            if position is not None:  # won back with nobody in between: its own newest
                position = reclaimed_position(position, own, previous, ctx.s.client_id)
            self.set_position(held, position)
            self.passed_over(held)
        ctx.say(
            "info",
            "claim_won",
            topic=key.topic,
            partition=key.partition,
            token=token,
            position=held.position,
        )
        if ctx.stopping:
            self.keeping.finish(held, now, release=True)

    def free_again(self, key: ClaimKey) -> bool:
        """Whether a claim the log refused to this member, or whose write failed, is released
        by now: the rival that won it released it before this member learnt of the refusal or
        the failure (its acknowledgement came after the fold had passed the release,
        `Member._appended`). No back-off then: the release was folded already, and
        `released_by_another` would have lifted it."""
        state = self.ctx.state_of(key)
        return state is not None and state.certain and state.released

    def refusal_backoff(self, uncertain: bool) -> float:
        """How long to leave a claim alone after the log refused this member's claim on it.

        An uncertain claim (its history compacted) counts every refused attempt as activity,
        so only a retry after more than 2*HB of silence on it can win there."""
        s = self.ctx.s
        if uncertain:
            return 2 * s.heartbeat_interval + s.margin + self.ctx.jitter(0.1, 0.5)
        # planning will not try a claim the fold shows held; this only spreads the retries
        return self.ctx.jitter(0.02, 0.1)

    def gave_up(self, op: Op, now: float) -> None:
        """A claim or takeover whose verdict never came: held if it landed and won (its grant
        already folded: `adopt_landed`); claimed again at once if the fold shows it released
        (`free_again`: the failure, told after the fold passed the release, must not bring
        back the wait the release lifted; if the write landed after all, the claim sent again
        is refused as this instance's own and the first is adopted); else try again later."""
        if op.kind is Kind.CLAIM and op.key not in self.in_flight():
            if self.adopt_landed(op.key, now):
                return
            if self.free_again(op.key) and op.key not in self._claimed_again:
                self._claimed_again.add(op.key)
                self._next_claim = min(self._next_claim, now)
                return
            self._claimed_again.discard(op.key)  # (a failure again: back off, as below)
        self.ctx.avoid_until[op.key] = now + self.ctx.jitter(0.1, 0.5)

    def in_flight(self) -> set[ClaimKey]:
        """Claims being written or taken over."""
        ops = self.ctx.pending.ops.values()
        return {op.key for op in ops if op.kind in (Kind.CLAIM, Kind.TAKEOVER)}

    # ---- positions --------------------------------------------------------------------------

    def resume_position(self, key: ClaimKey) -> int | None:
        """Where the log says a new owner starts (None: nowhere yet)."""
        return resume_offset(self.ctx.state_of(key), self.ctx.s.mode)

    def passed_over(self, held: HeldClaim) -> None:
        """AMO: report what a start at the fold's position passes over that nobody was granted:
        the records between the position without a replaced instance's refused records and the
        estimate they raised, on a fold that read the claim after a gap
        (`rationalizer._estimate_floor`; docs/design.md, residual risks)."""
        state = self.ctx.state_of(held.key)
        if self.ctx.s.mode is not Mode.AMO or state is None or state.estimate_floor is None:
            return
        position = self.resume_position(held.key)
        if position is not None:
            why = "position estimated after compaction past a replaced instance's refused record"
            self.ctx.amo_lost(
                held.key, state.estimate_floor, position, obs.LossCause.ESTIMATE, why,
                token=held.token,
            )  # fmt: skip

    def set_position(self, held: HeldClaim, position: int | None) -> None:
        """The claim's position, or a lookup of where it starts."""
        if position is not None:
            held.position = position
        elif not held.lookup_pending:
            held.lookup_pending = True
            self.ctx.out.append(cmd.LookupStart(held.key))

    def start_found(self, found: inp.StartFound) -> None:
        """A start position for a claim won with none in the log."""
        held = self.ctx.held.get(found.key)
        if held is not None and held.lookup_pending:
            held.lookup_pending = False
            if held.position is None:
                held.position = found.offset
                held.durable = False  # the log has no position yet: heartbeat it first

    def start_failed(self, failed: inp.StartFailed) -> None:
        """Starting one claim failed: let it go (it goes stale) and back off; others go on."""
        ctx, key = self.ctx, failed.key
        held = ctx.held.get(key)
        if held is None:
            return
        held.lookup_pending = False
        ctx.say(
            "warning",
            "claim_start_failed",
            topic=key.topic,
            partition=key.partition,
            error=failed.error,
        )
        self.keeping.lose(held, f"start position unknown: {failed.error}")
        ctx.avoid_until[key] = failed.now + 2 * ctx.s.heartbeat_interval

    # ---- the start: see the others first -----------------------------------------------------

    def begin(self, now: float) -> None:
        """The member begins (it has caught up with the log)."""
        self.begun_at = now

    def _announced(self, key: ClaimKey, now: float) -> None:
        """The fold reached this member's announcement (its member claim won or taken over):
        every member that announced before it is in the fold by now, and so is one that
        announces within the settle that follows."""
        if key == self.member and self.announced_at is None:
            self.announced_at = now

    def member_joined(self, now: float) -> None:
        """Another member announced itself: one starting with this one, perhaps, and more may
        follow (a deploy starts hosts a little apart), so the settle starts again."""
        self.joined_at = now

    def claims_open_at(self) -> float:
        """When this member may claim beyond its first claim: a settle after the fold showed its
        own announcement, or another member's if later, and at most HB/2 after its start (an
        announcement that is slow to land, or that must wait for silence on a compacted member
        claim, or members that keep joining, delay nothing further). Restart recovery (taking
        this client's own claims over) never waits. A group of few claims does not wait at
        all (see the module's doc)."""
        hb = self.ctx.s.heartbeat_interval
        begun = self.begun_at if self.begun_at is not None else 0.0
        if len(self.partitions) <= SETTLE_ABOVE_CLAIMS:
            return begun
        bound = begun + START_WAIT_HB * hb
        if self.announced_at is None:
            return bound
        last = max(self.announced_at, self.joined_at or 0.0)
        return min(bound, last + start_settle(hb))

    # ---- the fair share ---------------------------------------------------------------------

    def rebalance(self, now: float) -> None:
        """Claim all this member is short of its fair share; release one claim over it."""
        ctx, s = self.ctx, self.ctx.s
        if now < self._next_claim:
            return
        self._next_claim = now + max(0.05, s.heartbeat_interval / 10)
        ctx.avoid_until = {k: t for k, t in ctx.avoid_until.items() if t > now}
        claiming = self.in_flight()
        member = self.member
        if (
            member not in ctx.held
            and member not in claiming
            and member not in ctx.avoid_until
            and self.member_claimable(now)
        ):
            self.claim(member, now)
        mine = self.held_data()
        claiming_data = [k for k in claiming if k != member]
        limit = len(self.partitions)
        opens = self.claims_open_at()
        if now < opens:  # starting: the others that start with it may not be in the fold yet
            self._next_claim = min(self._next_claim, opens)
            limit = max(0, START_CLAIMS - len(mine) - len(claiming_data))
        step = self.share_plan(now, ctx.avoid_until, limit)
        for key in step.claims:
            self.claim(key, now)
        self._tell_group_view(now, step.members)
        busy = any(ctx.held[k].position is not None for k in mine)  # working, or about to
        if busy or not self._work_unclaimed(now):
            self.idle_since = None
        elif self.idle_since is None:
            self.idle_since = now
        releases = [k for k in step.releases if k in ctx.held]
        if releases and now >= self._next_release:
            # judge again once the others had time to claim what was released
            self._next_release = now + max(s.heartbeat_interval / 5, min(s.heartbeat_interval, 1.0))
            for release in releases:
                ctx.avoid_until[release] = now + 2 * s.heartbeat_interval
                self.keeping.stop_child(ctx.held[release], now + s.stop_timeout, reason="revoke")
            ctx.say(
                "info",
                "over_fair_share_releasing",
                partitions=[f"{k.topic}/{k.partition}" for k in releases],
                share=step.share,
                members=step.members,
            )

    def released_by_another(self, key: ClaimKey, now: float) -> None:
        """The fold shows another member's release of a claim of this group: a partition free
        now, or a member leaving (every share grows). Plan in this very turn, not at the next
        round, and forget this member's own wait on the partition (its cooldown after handing
        it over, a back-off after a refusal): that wait was for the other holder, whose tenure
        is over. A wait after this member's repeated handler failures stands (`failure_avoid`),
        and the plan still keeps the member within its fair share: the log decides the claim."""
        ctx = self.ctx
        self._next_claim = min(self._next_claim, now)
        until = ctx.avoid_until.get(key)
        if until is not None and ctx.failure_avoid.get(key) != until:
            del ctx.avoid_until[key]

    def held_data(self) -> list[ClaimKey]:
        """The data claims this member holds and keeps (not those it is letting go)."""
        return [k for k, h in self.ctx.held.items() if not h.is_member and h.phase in HELD_PHASES]

    def share_plan(self, now: float, avoid: Iterable[ClaimKey], limit: int) -> Plan:
        """The next step toward the fair share (`planning.plan`) from the group's claims in the
        fold, what this member holds and what it is claiming, leaving ``avoid`` alone."""
        ctx, s = self.ctx, self.ctx.s
        claiming = [k for k in self.in_flight() if k != self.member]
        return plan(
            client_id=s.client_id,
            group=s.group,
            partitions=self.partitions,
            claims=self._group_view(),
            mine=[*self.held_data(), *claiming],
            now_ms=lambda key: ctx.log_now_ms(key, now),
            hb_ms=s.hb_ms,
            avoid=avoid,
            limit=limit,
        )

    def _tell_group_view(self, now: float, members: int) -> None:
        """The group's claims, those no live member holds, its live members: told to the
        observers (metrics) when they change."""
        ctx, hb_ms = self.ctx, self.ctx.s.hb_ms
        live = [is_live(ctx.state_of(k), ctx.log_now_ms(k, now), hb_ms) for k in self.partitions]
        unheld = live.count(False)
        view = obs.GroupView(len(self.partitions), unheld, members)
        if view != self._group_view_told:
            self._group_view_told = view
            ctx.observe(view)

    def member_claimable(self, now: float) -> bool:
        """Whether the member claim could win now. As for data claims, a claim the log would
        refuse is not written: on a compacted claim a refusal counts as activity and costs a
        back-off of more than 2*HB."""
        ctx, key = self.ctx, self.member
        return is_claimable(ctx.state_of(key), ctx.log_now_ms(key, now), ctx.s.hb_ms)

    def starving(self, now: float) -> bool:
        """Holding nothing at work for a few HB while the group has work nobody else does."""
        s = self.ctx.s
        idle = self.idle_since
        return idle is not None and now - idle > s.starving_after_hb * s.heartbeat_interval

    def _group_view(self) -> dict[ClaimKey, ClaimState]:
        """The claims planning looks at: the group's member claims and data partitions."""
        state_of = self.ctx.state_of
        return {
            k: state
            for k in (*self.member_keys, *self.partitions)
            if (state := state_of(k)) is not None
        }

    def _work_unclaimed(self, now: float) -> bool:
        """Whether some partition of the group is not being worked on by another live member
        (the starving check: this member holds nothing that runs)."""
        ctx = self.ctx
        hb_ms, me = ctx.s.hb_ms, ctx.s.client_id
        for k in self.partitions:
            state = ctx.state_of(k)
            if not is_live(state, ctx.log_now_ms(k, now), hb_ms):
                return True
            if state is not None and state.holder_client == me:
                return True
        return False

    def partitions_found(self, found: inp.PartitionsFound) -> None:
        """Discovery's answer about the data partitions (the coordination count is the
        member's to judge)."""
        mine = [k for k in found.partitions if self.ctx.is_mine(k)]
        if len(mine) != len(self.partitions):
            before = len(self.partitions)
            self.ctx.say("info", "partitions_changed", before=before, now=len(mine))
        self.partitions = mine
