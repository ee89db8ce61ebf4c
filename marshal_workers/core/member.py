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

Claims. Every ``HB/10`` the member plans (`claims.plan`) toward its fair share and claims all
it is short of in one round. Claimability is judged by each claim's own coordination
partition's log time (`core.logclock`), so brokers whose clocks differ do not make claims look
silent early or late. A refused claim backs the claim off: at least 2*HB where the claim's
history was compacted (every refused attempt counts as activity there, so retrying sooner
would never see the silence it waits for), briefly elsewhere. The member claim (its
announcement) is claimed alongside the data claims, not before them.

Leases. A heartbeat sent at local time s and folded valid extends the claim's lease to
s + 2*HB - margin (`core.leases`); heartbeats go out every HB/2 per claim. The child reads the
lease from shared memory (`SetLease`). When the fold shows a claim lost (a refused heartbeat,
another instance of this client took it over, someone else won it) the lease is revoked and
the child's process group killed; before a lease ends the child gets TERM, then KILL.

Restart recovery. At start, each fresh claim this client holds in its own group and topics is
taken over with a heartbeat from this instance. The rationalizer gives the takeover a new
fencing token and never moves the position back; the position is read from the fold at the
takeover record itself, and the child starts only once the old instance's lease has surely
ended (2*HB after its last accepted heartbeat), since it may still be alive on another host.

AMO grants. A child's request for a batch is refused unless the batch starts at or after the
position (the log's, at the reservation's verdict, and this member's). The reservation is
written; once folded as valid the committing heartbeat is written and the child granted.

Isolation. The member reads, resumes, heartbeats, releases and counts only claims of its own
group (and its own topics, and its group's member claims): a client id is unique within a
group, not across groups.

Children's exits go through `exitpolicy.decide`; a graceful release waits for the child to
exit and then writes ReleasingPartition at the position the child reported.
"""

from __future__ import annotations

import dataclasses
import random
import signal
from collections import ChainMap
from collections.abc import Iterable, Mapping

from marshal_workers import events as ev
from marshal_workers import ipc
from marshal_workers.claims import MEMBER_PREFIX, is_live, is_member_key, member_key, plan
from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core.held import ASKED_TO_STOP, HELD_PHASES, Held, Phase
from marshal_workers.core.leases import lease_deadline
from marshal_workers.core.logclock import LogClock
from marshal_workers.core.pauses import pause_by_other
from marshal_workers.core.pending import Kind, Op, Pending
from marshal_workers.core.settings import MemberSettings
from marshal_workers.errors import EXIT_COORDINATION_CHANGED, EXIT_OK
from marshal_workers.exitpolicy import Next, decide
from marshal_workers.failures import CAUSE_POISON_RATE
from marshal_workers.protocol import (
    ClaimingMessages,
    ClaimingPartition,
    ClaimKey,
    CoordRecord,
    Heartbeat,
    Message,
    ReleasingPartition,
    coordination_partition,
)
from marshal_workers.rationalizer import (
    ClaimState,
    GroupPause,
    Mode,
    World,
    fold,
    freshness,
    resume_offset,
)

_MEMBER_MARK = b"/" + MEMBER_PREFIX.encode()  # in the record key of a member claim


class Member:
    """One member of a group: its claims, children, and what it writes (sans I/O)."""

    def __init__(self, settings: MemberSettings) -> None:
        self.s = settings
        n = settings.coordination_partitions
        self.worlds = {p: World(settings.rationalizer, p) for p in range(n)}
        self.claims_view: ChainMap[ClaimKey, ClaimState] = ChainMap(
            *(w.claims for w in self.worlds.values())
        )
        self.clock = LogClock()
        self.pending = Pending()
        self.held: dict[ClaimKey, Held] = {}
        self.partitions: list[ClaimKey] = []
        self.avoid_until: dict[ClaimKey, float] = {}
        self.member = member_key(settings.group, settings.client_id)
        self.stopping = False
        self.done = False
        self.exit_code: int | None = None
        self.paused_until_ms: int | None = None
        self.reload_pending = False
        self.malformed = 0
        self.started = False
        self.wall = 0.0
        self._old_seen: dict[ClaimKey, int] = {}  # takeovers: the old instance's last heartbeat
        self._next_claim = self._next_release = self._next_discovery = 0.0
        self._idle_since: float | None = None
        self._rng = random.Random(f"{settings.client_id}/{settings.instance_id}")
        self._home: dict[ClaimKey, int] = {}
        self._member_keys: set[ClaimKey] = set()  # the group's member claims seen in the log
        self._resume_lookup: set[ClaimKey] = set()  # to take over once their start is found
        self._out: list[cmd.Command] = []

    # ---- the one entry point ----------------------------------------------------------------

    def feed(self, event: inp.Input) -> list[cmd.Command]:
        """Apply one input; return the commands it calls for, in order."""
        self._out = []
        if isinstance(event, inp.RecordsRead):
            self._fold(event.records, event.now)
        elif isinstance(event, inp.Tick):
            self._tick(event)
        elif isinstance(event, inp.AppendDone):
            self._appended(event)
        elif isinstance(event, inp.AppendFailed):
            self._append_failed(event)
        elif isinstance(event, inp.ChildSaid):
            self._child_said(event)
        elif isinstance(event, inp.ChildExited):
            self._child_exited(event)
        elif isinstance(event, inp.SignalReceived):
            self._signal(event.signal, event.now)
        elif isinstance(event, inp.PartitionsFound):
            self._partitions_found(event)
        elif isinstance(event, inp.DiscoveryFailed):
            self._say("warning", "partition_discovery_failed", error=event.error)
        elif isinstance(event, inp.StartFound):
            self._start_found(event.key, event.offset, event.now)
        elif isinstance(event, inp.StartFailed):
            self._start_failed(event)
        return self._out

    def begin(self, now: float, wall: float, partitions: Iterable[ClaimKey]) -> list[cmd.Command]:
        """After catching up with the log: resume this client's fresh claims, start claiming."""
        self._out = []
        self.wall = wall
        self.started = True
        self.partitions = list(partitions)
        self._next_discovery = now + self.s.discovery_interval
        for key, state in list(self.claims_view.items()):
            if self._mine_to_resume(key, state, now):
                self._resume(key, state, now)
        self._rebalance(now)
        return self._out

    # ---- queries ----------------------------------------------------------------------------

    def healthy(self, now: float) -> bool:
        """No lease closer to its end than a heartbeat round allows, and not starving: holding
        nothing for a few HB while the group has claimable partitions."""
        grace = self.s.kill_grace
        leases_ok = all(
            h.is_member or h.lease - now > grace
            for h in self.held.values()
            if h.phase in HELD_PHASES
        )
        starving = (
            self._idle_since is not None
            and now - self._idle_since > self.s.starving_after_hb * self.s.heartbeat_interval
        )
        return leases_ok and not starving

    def log_now_ms(self, key: ClaimKey, now: float) -> int:
        """The log time now on ``key``'s coordination partition (0 before anything was read)."""
        return self.clock.now_ms(self.home(key), now) or 0

    def home(self, key: ClaimKey) -> int:
        """The coordination partition of a claim."""
        home = self._home.get(key)
        if home is None:
            home = coordination_partition(
                key.topic, key.partition, self.s.coordination_partitions, self.s.partitioner
            )
            self._home[key] = home
        return home

    def state_of(self, key: ClaimKey) -> ClaimState | None:
        """What the fold says about a claim (None: nothing)."""
        return self.worlds[self.home(key)].claims.get(key)

    def is_mine(self, key: ClaimKey) -> bool:
        """A claim of this member's group: its topics' partitions or its group's members."""
        if key.group != self.s.group:
            return False
        return key.topic in self.s.topics or is_member_key(key)

    # ---- the log ----------------------------------------------------------------------------

    def _fold(self, records: Iterable[CoordRecord], now: float) -> None:
        worlds, group, started = self.worlds, self.s.group, self.started
        newest: dict[int, int] = {}
        for record in records:
            world = worlds[record.partition]
            event = fold(world, record)
            newest[record.partition] = world.log_time
            if not isinstance(event, ev.ClaimVerdict):
                if isinstance(event, ev.Malformed):
                    self.malformed += 1
                continue
            if event.message.group_id != group:
                continue  # another group's claim, whatever its client id
            if started:
                self._on_event(event, now)
            elif record.key and _MEMBER_MARK in record.key:
                self._member_keys.add(event.key)
        for partition, log_time in newest.items():
            self.clock.saw(partition, log_time, now)

    def _on_event(self, event: ev.ClaimVerdict, now: float) -> None:
        """A verdict on a claim of this member's group."""
        me = self.s
        mine = event.client_id == me.client_id and event.instance_id == me.instance_id
        op = self.pending.decided(event, mine, now)
        if op is not None:
            self._resolve(op, event, now)
        key = event.key
        if is_member_key(key):
            self._member_keys.add(key)
        if (
            isinstance(event, ev.HeartbeatAccepted)
            and event.client_id == me.client_id
            and event.instance_id != me.instance_id
            and self.pending.in_flight(Kind.TAKEOVER, key)
        ):
            self._old_seen[key] = event.log_time  # the old instance, still alive
        held = self.held.get(key)
        if held is not None and held.phase is not Phase.LOST:
            self._watch(held, event, mine)

    def _watch(self, held: Held, event: ev.ClaimVerdict, mine: bool) -> None:
        """What others' records (and refusals of ours) mean for a claim this member holds."""
        me = self.s
        if isinstance(event, ev.HeartbeatAccepted):
            if event.client_id == me.client_id and event.instance_id != me.instance_id:
                self._lose(held, f"taken over by instance {event.instance_id}")
        elif isinstance(event, ev.HeartbeatRejected) and mine:
            self._lose(held, f"heartbeat refused: {event.reason}")
        elif isinstance(event, ev.ClaimGranted) and event.token != held.token:
            self._lose(held, f"claimed by {event.client_id}")

    def _resolve(self, op: Op, event: ev.Event, now: float) -> None:
        """The fold reached one of this member's writes: act on its verdict."""
        self._observe("coordination_write", op.kind.value, now - op.sent_at, True)
        if op.kind is Kind.CLAIM:
            self._claim_decided(op, event, now)
        elif op.kind is Kind.TAKEOVER:
            self._takeover_decided(op, event, now)
        elif op.kind is Kind.HEARTBEAT:
            held = self.held.get(op.key)
            if (
                held is not None
                and held.phase is not Phase.LOST
                and isinstance(event, ev.HeartbeatAccepted)
                and event.token == held.token
            ):
                self._extend(
                    held, lease_deadline(op.sent_at, self.s.heartbeat_interval, self.s.margin)
                )
        elif op.kind is Kind.RESERVE:
            self._reservation_decided(op, event, now)
        elif op.kind is Kind.RELEASE:
            self._release_decided(op, event)

    def _appended(self, done: inp.AppendDone) -> None:
        early = self.pending.appended(done.op, done.appended.partition, done.appended.offset)
        if early is not None:
            op = self.pending.take(done.op)
            if op is not None:
                self._resolve(op, early, done.now)

    def _append_failed(self, failed: inp.AppendFailed) -> None:
        op = self.pending.take(failed.op)
        if op is None:
            return
        self._gave_up(op, failed.error, failed.now)

    def _gave_up(self, op: Op, error: str, now: float) -> None:
        """A write failed or its verdict never came: undo what waited for it."""
        self._observe("coordination_write", op.kind.value, now - op.sent_at, False)
        self._say(
            "warning",
            "coordination_write_failed",
            message=op.kind.value,
            topic=op.key.topic,
            partition=op.key.partition,
            error=error,
        )
        if op.kind in (Kind.CLAIM, Kind.TAKEOVER):
            self.avoid_until[op.key] = now + self._jitter(0.1, 0.5)
        elif op.kind is Kind.RESERVE:
            self._tell(op.key, ipc.Grant(op.request_id, False, f"reservation not written: {error}"))
        elif op.kind is Kind.RELEASE:
            self._drop(op.key)

    def _append(self, kind: Kind, key: ClaimKey, message: Message, now: float, **extra: int) -> Op:
        op = self.pending.add(kind, key, now, **extra)
        self._out.append(cmd.Append(op.op, self.home(key), message))
        return op

    def _fields(self, key: ClaimKey) -> tuple[int, str, str, str, str, int]:
        s = self.s
        return (int(self.wall), s.instance_id, s.client_id, key.group, key.topic, key.partition)

    # ---- claiming ---------------------------------------------------------------------------

    def _mine_to_resume(self, key: ClaimKey, state: ClaimState, now: float) -> bool:
        """A fresh, certain claim of this client in this member's group and topics."""
        if not (self.is_mine(key) and state.certain and state.holder_client == self.s.client_id):
            return False
        if state.last_heartbeat is None:
            return False
        label = freshness(state.last_heartbeat, self.log_now_ms(key, now), self.s.hb_ms)
        return label.value != "stale"

    def _resume(self, key: ClaimKey, state: ClaimState, now: float) -> None:
        """Take a claim of this client over (restart recovery); a claim with no position yet
        (its holder died before its first heartbeat) is taken over once its start is found."""
        assert state.last_heartbeat is not None
        self._old_seen[key] = state.last_heartbeat
        if is_member_key(key):
            self._take_over(key, 0, now)
        elif state.committed is not None:
            self._take_over(key, state.committed, now)
        else:
            self._resume_lookup.add(key)
            self._out.append(cmd.LookupStart(key))

    def _take_over(self, key: ClaimKey, offset: int, now: float) -> None:
        self._append(Kind.TAKEOVER, key, Heartbeat(*self._fields(key), offset), now)

    def _takeover_decided(self, op: Op, event: ev.Event, now: float) -> None:
        key = op.key
        old_seen = self._old_seen.pop(key, 0)
        if not isinstance(event, ev.HeartbeatAccepted):
            self._say("info", "claim_not_resumed", topic=key.topic, partition=key.partition)
            return
        lease = self._lease_from(op.sent_at)
        held = self._hold(key, event.token, lease, now)
        if not held.is_member:
            # The old instance may still run (another host with this client id): its lease
            # ends at most 2*HB after its last accepted heartbeat, in log time.
            held.start_after = now + self._takeover_wait(old_seen, event.log_time)
            self._set_position(held, self._resume_position(key))
        self._say(
            "info",
            "claim_resumed",
            topic=key.topic,
            partition=key.partition,
            token=event.token,
            replaced=event.replaced_instance,
            position=held.position,
            starts_in_s=round(max(0.0, held.start_after - now), 3),
        )
        if self.stopping:
            self._finish(held, now, release=True)

    def _takeover_wait(self, old_seen_ms: int, takeover_ms: int) -> float:
        """Seconds a resumed claim waits before its child starts: the replaced instance's lease
        ends at most 2*HB after its last accepted heartbeat (log time), then a margin."""
        wait_ms = max(0, old_seen_ms + 2 * self.s.hb_ms - takeover_ms)
        return wait_ms / 1000 + self.s.margin

    def _claim(self, key: ClaimKey, now: float) -> None:
        self._append(Kind.CLAIM, key, ClaimingPartition(*self._fields(key)), now)

    def _claim_decided(self, op: Op, event: ev.Event, now: float) -> None:
        key = op.key
        if not isinstance(event, ev.ClaimGranted):
            uncertain = not (state := self.state_of(key)) or not state.certain
            backoff = self._refusal_backoff(uncertain)
            self.avoid_until[key] = max(self.avoid_until.get(key, 0.0), now + backoff)
            return
        lease = self._lease_from(op.sent_at)
        held = self._hold(key, event.token, lease, now)
        if not held.is_member:
            self._set_position(held, self._resume_position(key))
        self._say(
            "info",
            "claim_won",
            topic=key.topic,
            partition=key.partition,
            token=event.token,
            position=held.position,
        )
        if self.stopping:
            self._finish(held, now, release=True)

    def _refusal_backoff(self, uncertain: bool) -> float:
        """How long to leave a claim alone after the log refused this member's claim on it.

        An uncertain claim (its history compacted) counts every refused attempt as activity,
        so only a retry after more than 2*HB of silence on it can win there."""
        extra = 2 * self.s.heartbeat_interval + self.s.margin if uncertain else 0.0
        return self._jitter(0.1, 0.5) + extra

    def _hold(self, key: ClaimKey, token: int, lease: float, now: float) -> Held:
        member = is_member_key(key)
        held = Held(key, token, lease, position=0 if member else None, is_member=member)
        held.phase = Phase.RUNNING if member else Phase.STARTING
        held.next_heartbeat = now  # the first heartbeat commits the position at once
        self.held[key] = held
        self.avoid_until.pop(key, None)
        self._out.append(cmd.SetLease(key, lease))
        self._observe("claim_won", key, token)
        return held

    def _resume_position(self, key: ClaimKey) -> int | None:
        return resume_offset(self.state_of(key), self.s.mode)

    def _set_position(self, held: Held, position: int | None) -> None:
        if position is not None:
            held.position = position
        elif not held.lookup_pending:
            held.lookup_pending = True
            self._out.append(cmd.LookupStart(held.key))

    def _start_found(self, key: ClaimKey, offset: int, now: float) -> None:
        if key in self._resume_lookup:
            self._resume_lookup.discard(key)
            self._take_over(key, offset, now)
            return
        held = self.held.get(key)
        if held is not None and held.lookup_pending:
            held.lookup_pending = False
            if held.position is None:
                held.position = offset

    def _start_failed(self, failed: inp.StartFailed) -> None:
        """Starting one claim failed: let it go (it goes stale) and back off; others go on."""
        self._resume_lookup.discard(failed.key)
        held = self.held.get(failed.key)
        if held is None:
            return
        held.lookup_pending = False
        self._say(
            "warning",
            "claim_start_failed",
            topic=failed.key.topic,
            partition=failed.key.partition,
            error=failed.error,
        )
        self._lose(held, f"start position unknown: {failed.error}")
        self.avoid_until[failed.key] = failed.now + 2 * self.s.heartbeat_interval

    def _rebalance(self, now: float) -> None:
        s = self.s
        self._next_claim = now + max(0.05, s.heartbeat_interval / 10)
        self.avoid_until = {k: t for k, t in self.avoid_until.items() if t > now}
        claiming = {
            op.key for op in self.pending.ops.values() if op.kind in (Kind.CLAIM, Kind.TAKEOVER)
        } | self._resume_lookup
        if (
            self.member not in self.held
            and self.member not in claiming
            and self.member not in self.avoid_until
        ):
            self._claim(self.member, now)
        mine = [k for k, h in self.held.items() if not h.is_member and h.phase in HELD_PHASES]
        step = plan(
            client_id=s.client_id,
            group=s.group,
            partitions=self.partitions,
            claims=self._group_view(),
            mine=[*mine, *(k for k in claiming if k != self.member)],
            now_ms=lambda key: self.log_now_ms(key, now),
            hb_ms=s.hb_ms,
            avoid=self.avoid_until,
            limit=len(self.partitions),
        )
        for key in step.claims:
            self._claim(key, now)
        busy = any(self.held[k].position is not None for k in mine)  # working, or about to
        if busy or not self._work_unclaimed(now):
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = now
        held_release = step.release is not None and step.release in self.held
        if held_release and step.release is not None and now >= self._next_release:
            self._next_release = now + s.heartbeat_interval
            self.avoid_until[step.release] = now + 2 * s.heartbeat_interval
            self._say(
                "info",
                "over_fair_share_releasing",
                topic=step.release.topic,
                partition=step.release.partition,
                share=step.share,
                members=step.members,
            )
            self._stop_child(self.held[step.release], now + s.stop_timeout)

    def _group_view(self) -> dict[ClaimKey, ClaimState]:
        """The claims planning looks at: the group's member claims and data partitions."""
        state_of = self.state_of
        return {
            k: state
            for k in (*self._member_keys, *self.partitions)
            if (state := state_of(k)) is not None
        }

    def _work_unclaimed(self, now: float) -> bool:
        """Whether some partition of the group is not being worked on by another live member
        (the starving check: this member holds nothing that runs)."""
        hb_ms, me = self.s.hb_ms, self.s.client_id
        for k in self.partitions:
            state = self.state_of(k)
            if not is_live(state, self.log_now_ms(k, now), hb_ms):
                return True
            if state is not None and state.holder_client == me:
                return True
        return False

    def _partitions_found(self, found: inp.PartitionsFound) -> None:
        if found.coordination_partitions != self.s.coordination_partitions:
            reason = (
                f"the coordination topic now has {found.coordination_partitions} partitions, "
                f"not {self.s.coordination_partitions}: claims would move; refusing to go on"
            )
            self._say("error", "refusing_to_run", reason=reason)
            self._exit(EXIT_COORDINATION_CHANGED, reason)
            return
        mine = [k for k in found.partitions if self.is_mine(k)]
        if len(mine) != len(self.partitions):
            self._say("info", "partitions_changed", before=len(self.partitions), now=len(mine))
        self.partitions = mine

    # ---- holding ----------------------------------------------------------------------------

    def _tick(self, tick: inp.Tick) -> None:
        now = tick.now
        self.wall = tick.wall
        for op in self.pending.expired(now, self.s.op_timeout):
            self._gave_up(op, "no verdict in time", now)
        self._take_positions(tick.positions)
        for held in list(self.held.values()):
            self._keep(held, now)
        if self.reload_pending:
            self._check_reload()
        if not self.started:
            return
        if self.stopping:
            self._advance_stop(now)
            return
        if now >= self._next_discovery:
            self._next_discovery = now + self.s.discovery_interval
            self._out.append(cmd.Discover())
        if not self._react_to_pause(now) and now >= self._next_claim:
            self._rebalance(now)

    def _take_positions(self, positions: Mapping[ClaimKey, int]) -> None:
        """ALO: the positions children published in shared memory go into the next
        heartbeats, so a heartbeat is at most HB/2 behind the handling, whatever the batch."""
        if self.s.mode is not Mode.ALO:
            return
        for key, position in positions.items():
            held = self.held.get(key)
            if held is not None and held.position is not None and position > held.position:
                held.position = position

    def _keep(self, held: Held, now: float) -> None:
        """One claim's timers: heartbeat, start the child, lease ending, restart."""
        if held.phase not in (Phase.LOST, Phase.RELEASING):
            if held.position is not None and now >= held.next_heartbeat:
                self._heartbeat(held, now)
            if now >= held.lease and not held.child and not held.is_member:
                self._lose(held, "lease expired before the child started")
                return
            if held.is_member and now >= held.lease:
                self._lose(held, "member claim's lease expired")
                return
        if held.child:
            remaining = held.lease - now
            if held.phase in ASKED_TO_STOP and now >= held.stop_deadline:
                remaining = min(remaining, 0.0)
            if held.phase is Phase.LOST:
                remaining = min(remaining, 0.0)
            if remaining <= self.s.kill_grace and not held.term_sent:
                held.term_sent = True
                self._signal_child(held, signal.SIGTERM, "lease ending")
            if remaining <= self.s.kill_grace / 3 and not held.kill_sent:
                held.kill_sent = held.term_sent = True
                self._signal_child(held, signal.SIGKILL, "lease ending")
            return
        if held.phase is Phase.STOPPING:
            self._finish(held, now, release=True)  # no child to wait for
            return
        if held.phase is Phase.RELOADING:
            held.phase = Phase.RUNNING  # no child to replace: the next one starts fresh
        if held.is_member or held.position is None:
            return
        if held.phase is Phase.STARTING and now >= held.start_after and now < held.lease:
            held.phase = Phase.RUNNING
            self._spawn(held, restart=False)
        elif held.phase is Phase.RUNNING and now >= held.restart_at and now < held.lease:
            self._spawn(held, restart=held.failures > 0)

    def _heartbeat(self, held: Held, now: float) -> None:
        assert held.position is not None
        held.next_heartbeat = now + self.s.heartbeat_interval / 2
        position = held.position
        self._append(
            Kind.HEARTBEAT,
            held.key,
            Heartbeat(*self._fields(held.key), position),
            now,
            end=position,
        )

    def _extend(self, held: Held, deadline: float) -> None:
        if deadline > held.lease:
            held.lease = deadline
            self._out.append(cmd.SetLease(held.key, deadline))

    def _lose(self, held: Held, reason: str) -> None:
        """The claim is no longer this member's: revoke the lease, kill the child, forget."""
        key = held.key
        self._say("warning", "claim_lost", topic=key.topic, partition=key.partition, reason=reason)
        held.phase = Phase.LOST
        held.lease = 0.0
        self._out.append(cmd.SetLease(key, 0.0))
        self._observe("claim_lost", key, reason)
        if held.child:
            held.kill_sent = held.term_sent = True
            self._signal_child(held, signal.SIGKILL, reason)
        else:
            self._drop(key)

    def _drop(self, key: ClaimKey) -> None:
        if self.held.pop(key, None) is not None:
            self._out.append(cmd.DropLease(key))

    def _finish(self, held: Held, now: float, *, release: bool) -> None:
        """The child is gone: release the claim if asked and possible, else forget it.

        A release tells every member that nobody of ours processes the partition. After a
        takeover that is true only once the replaced instance's lease has surely ended, so
        until then the claim stays held (and heartbeated) and the release waits."""
        if release and now < held.start_after and held.phase is not Phase.LOST:
            held.phase = Phase.STOPPING  # `_keep` comes back to it
            return
        if release and held.phase is not Phase.LOST and held.position is not None:
            held.phase = Phase.RELEASING
            message = ReleasingPartition(*self._fields(held.key), held.position)
            self._append(Kind.RELEASE, held.key, message, now, end=held.position)
        else:
            self._drop(held.key)

    def _release_decided(self, op: Op, event: ev.Event) -> None:
        confirmed = isinstance(event, ev.Released)
        if confirmed:
            self._observe("claim_released", op.key)
        self._say(
            "info",
            "claim_released",
            topic=op.key.topic,
            partition=op.key.partition,
            position=op.end,
            confirmed=confirmed,
        )
        self._drop(op.key)

    # ---- children ---------------------------------------------------------------------------

    def _spawn(self, held: Held, *, restart: bool) -> None:
        key = held.key
        spec = dataclasses.replace(
            self.s.child,
            topic=key.topic,
            partition=key.partition,
            start_offset=held.position,
            fencing_token=held.token,
        )
        held.child = True
        held.term_sent = held.kill_sent = False
        self._out.append(cmd.Spawn(key, spec, restart))

    def _signal_child(self, held: Held, sig: signal.Signals, reason: str) -> None:
        self._out.append(cmd.SignalChild(held.key, sig, reason))

    def _tell(self, key: ClaimKey, message: ipc.ToChild) -> None:
        held = self.held.get(key)
        if held is not None and held.child:
            self._out.append(cmd.TellChild(key, message))

    def _child_said(self, said: inp.ChildSaid) -> None:
        held = self.held.get(said.key)
        if held is None:
            return
        msg = said.message
        if isinstance(msg, ipc.Started):
            held.child_pid = msg.pid
        elif isinstance(msg, ipc.Progress | ipc.Stopped) and msg.next_offset is not None:
            if self.s.mode is Mode.ALO or held.position is None:
                held.position = msg.next_offset
        elif isinstance(msg, ipc.GrantRequest):
            self._grant_request(held, msg, said.now)
        elif isinstance(msg, ipc.Stats):
            if msg.handled > 0:  # the child gets work done: earlier failures are not a streak
                held.failures = 0
            self._observe("child_stats", held.key, msg)
        elif isinstance(msg, ipc.HandlerFailed):
            self._handler_failed(held, msg)

    def _handler_failed(self, held: Held, msg: ipc.HandlerFailed) -> None:
        # A failure repeats the last one if nothing succeeded in between: the same offset (ALO
        # restarts there), a child that handled nothing before failing (AMO restarts after the
        # lost batch), or the poison-rate limit again (it restarts the count).
        repeated = held.failures > 0 and (
            msg.offset == held.failed_offset or msg.handled == 0 or msg.cause == CAUSE_POISON_RATE
        )
        held.failures = held.failures + 1 if repeated else 1
        held.failed_offset = msg.offset
        self._observe("handler_failed", held.key, msg.offset, msg.error)
        self._say(
            "error",
            "handler_failed",
            topic=held.key.topic,
            partition=held.key.partition,
            offset=msg.offset,
            error=msg.error,
            cause=msg.cause,
            attempts=msg.attempts,
            failures=held.failures,
            max_handler_failures=self.s.max_handler_failures,
        )

    def _grant_request(self, held: Held, req: ipc.GrantRequest, now: float) -> None:
        """AMO: reserve the batch in the log; the child is answered once the fold decides."""
        refusal = None
        if held.phase is not Phase.RUNNING or now >= held.lease:
            refusal = "claim not held"
        elif held.position is None or req.start < held.position:
            refusal = f"batch starts at {req.start}, before the position {held.position}"
        if refusal is not None:
            self._tell(held.key, ipc.Grant(req.request_id, False, refusal))
            return
        message = ClaimingMessages(*self._fields(held.key), req.end)
        self._append(
            Kind.RESERVE,
            held.key,
            message,
            now,
            request_id=req.request_id,
            start=req.start,
            end=req.end,
        )

    def _reservation_decided(self, op: Op, event: ev.Event, now: float) -> None:
        held = self.held.get(op.key)
        refusal = None
        if not isinstance(event, ev.MessagesClaimed):
            refusal = getattr(event, "reason", "reservation not confirmed")
        elif held is None or held.phase is not Phase.RUNNING or event.token != held.token:
            refusal = "claim not held"
        elif now >= held.lease:
            refusal = "lease expired"
        elif event.start is not None and op.start < event.start:
            refusal = f"batch starts at {op.start}, before the log's position {event.start}"
        if refusal is not None or held is None:
            self._tell(op.key, ipc.Grant(op.request_id, False, refusal or "claim not held"))
            return
        held.position = op.end
        self._heartbeat(held, now)  # the committing heartbeat
        self._tell(op.key, ipc.Grant(op.request_id, True, ""))

    def _child_exited(self, exited: inp.ChildExited) -> None:
        held = self.held.get(exited.key)
        if held is None:
            return
        now, code, key = exited.now, exited.code, exited.key
        held.child = False
        held.child_pid = None
        if held.phase is Phase.LOST:
            self._drop(key)
            return
        decision = decide(
            code=code,
            running=held.phase in (Phase.RUNNING, Phase.STARTING),
            reloading=held.phase is Phase.RELOADING,
            lease_valid=now < held.lease,
            failures=held.failures,
            max_failures=self.s.max_handler_failures,
            heartbeat_interval_s=self.s.heartbeat_interval,
        )
        held.failures = max(held.failures, decision.failures)
        fields = {"topic": key.topic, "partition": key.partition, "reason": decision.reason}
        if decision.next is Next.RESPAWN:
            held.phase = Phase.RUNNING
            self._spawn(held, restart=False)
        elif decision.next is Next.RESTART_LATER:
            held.phase = Phase.RUNNING
            held.restart_at = now + decision.delay_s
            self._say(
                "warning" if code else "info",
                "child_restarting",
                **fields,
                offset=held.failed_offset,
                failures=held.failures,
                backoff_s=decision.delay_s,
            )
        elif decision.next is Next.RELEASE:
            self._say(
                "error",
                "claim_releasing",
                **fields,
                offset=held.failed_offset,
                failures=held.failures,
                not_reclaimed_for_s=decision.avoid_s,
            )
            self.avoid_until[key] = now + decision.avoid_s
            self._finish(held, now, release=True)  # the log refuses it if taken meanwhile
        else:
            self._finish(held, now, release=held.phase is Phase.STOPPING)

    def _stop_child(self, held: Held, deadline: float, phase: Phase = Phase.STOPPING) -> None:
        """Ask the child to finish its batch and stop (``phase``: what comes after it exits)."""
        held.phase = phase
        held.stop_deadline = deadline  # the lease still ends it earlier if heartbeats fail
        if held.child:
            self._tell(held.key, ipc.Stop())

    # ---- signals and operator requests ------------------------------------------------------

    def _signal(self, sig: signal.Signals, now: float) -> None:
        if sig is signal.SIGTERM and not self.stopping:
            self.request_stop(now, fast=False)
        elif sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            self.request_stop(now, fast=True)
        elif sig is signal.SIGHUP:
            self._reload(now)

    def request_stop(self, now: float, fast: bool) -> list[cmd.Command]:
        """TERM: children finish their batch, then release. INT/QUIT (or a second TERM): now."""
        self._say("info", "stopping", fast=fast, claims=len(self.held))
        if not self.stopping:
            self._observe("stopping")
        self.stopping = True
        deadline = now + (0.0 if fast else self.s.stop_timeout)
        for held in list(self.held.values()):
            if held.is_member or held.phase in (Phase.LOST, Phase.RELEASING):
                continue
            self._stop_child(held, deadline)
            if fast and held.child:
                held.lease = 0.0
                self._out.append(cmd.SetLease(held.key, 0.0))
                held.kill_sent = held.term_sent = True
                self._signal_child(held, signal.SIGKILL, "fast stop")
        return self._out

    def _advance_stop(self, now: float) -> None:
        for held in list(self.held.values()):
            if held.phase is Phase.STARTING:
                held.phase = Phase.STOPPING
                self._finish(held, now, release=True)
        if any(not h.is_member for h in self.held.values()):
            return
        claiming = any(op.kind in (Kind.CLAIM, Kind.TAKEOVER) for op in self.pending.ops.values())
        if claiming:
            return  # a claim in flight may still win: release it first
        member = self.held.get(self.member)
        if member is not None:
            if member.phase is not Phase.RELEASING:
                self._finish(member, now, release=True)
            return
        self._exit(EXIT_OK, "stopped")

    def _exit(self, code: int, reason: str) -> None:
        if self.done:
            return
        self.done = True
        self.exit_code = code
        self._out.append(cmd.Exit(code, reason))

    def _reload(self, now: float) -> None:
        """SIGHUP: replace every child by a fresh one (the handler imported anew), claims kept."""
        if self.stopping:
            self._say("info", "reload_ignored", reason="stopping")
            return
        deadline = now + self.s.stop_timeout
        asked = 0
        for held in self.held.values():
            if held.is_member or held.phase is not Phase.RUNNING:
                continue
            if not held.child:
                held.restart_at = 0.0
                continue
            self._stop_child(held, deadline, Phase.RELOADING)
            asked += 1
        self.reload_pending = True
        self._observe("reloading")
        self._say("info", "reloading", children=asked)

    def _check_reload(self) -> None:
        if any(h.phase is Phase.RELOADING for h in self.held.values()):
            return
        self.reload_pending = False
        if self.stopping:
            self._say("info", "reload_cut_short", reason="stopping")
            return
        self._observe("reloaded")
        children = sum(1 for h in self.held.values() if h.child)
        self._say("info", "reloaded", children=children)

    def pause(self, now: float) -> GroupPause | None:
        """The pause of this group by another client in force now (each coordination
        partition judged by its own log time), the longest; or None."""
        return pause_by_other(
            self.worlds.values(),
            self.s.group,
            self.s.client_id,
            lambda p: self.clock.now_ms(p, now) or 0,
        )

    def _react_to_pause(self, now: float) -> bool:
        pause = self.pause(now)
        if pause is None:
            if self.paused_until_ms is not None:
                self.paused_until_ms = None
                self._say("info", "group_pause_over")
            return False
        if pause.until_ms != self.paused_until_ms:
            self.paused_until_ms = pause.until_ms
            self._say(
                "warning",
                "group_paused",
                paused_by=pause.client_id,
                until_ms=pause.until_ms,
                claims=sum(1 for h in self.held.values() if not h.is_member),
            )
        deadline = now + self.s.stop_timeout
        for held in self.held.values():
            if not held.is_member and held.phase in HELD_PHASES:
                self._stop_child(held, deadline)
        self._idle_since = None
        return True

    # ---- output helpers ---------------------------------------------------------------------

    def _say(self, level: str, event: str, **fields: object) -> None:
        self._out.append(cmd.Log(level, event, fields))

    def _observe(self, method: str, *args: object) -> None:
        self._out.append(cmd.Observe(method, args))

    def _lease_from(self, sent_at: float) -> float:
        return lease_deadline(sent_at, self.s.heartbeat_interval, self.s.margin)

    def _jitter(self, low: float, high: float) -> float:
        return self._rng.uniform(low, high) * self.s.heartbeat_interval
