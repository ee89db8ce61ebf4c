"""What every part of one member shares: its settings, the folded log, the writes in flight,
the claims it holds, and the commands being gathered in answer to the current input.

The parts (`claiming.Claiming`, `keeping.Keeping`, `children.Children`,
`operator.Operator`) each own their own state and reach the shared state only through this
object, so what a part may touch is written down here, not spread over one `self`.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import replace

from marshal_workers.core import commands as cmd
from marshal_workers.core import observations as obs
from marshal_workers.core.clockcheck import ClockCheck
from marshal_workers.core.heldclaim import HeldClaim
from marshal_workers.core.logclock import LogClock
from marshal_workers.core.pending import Kind, Op, Pending
from marshal_workers.core.settings import MemberSettings
from marshal_workers.ipc.messages import POISON_WINDOW_S
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.leases import lease_deadline
from marshal_workers.protocol.members import is_member_key
from marshal_workers.protocol.placement import PlacementBook, reads
from marshal_workers.protocol.rationalizer import ClaimState, World
from marshal_workers.protocol.recordfailures import (
    PoisonMessage,
    PoisonResolved,
    RecordFailed,
    encode_poison,
    poison_record_key,
)
from marshal_workers.protocol.slicing import data_topic, records_at_most
from marshal_workers.protocol.wire import (
    ClaimKey,
    Message,
    encode,
    record_key,
)


class MemberState:
    """The shared state of one member, and the commands answering the current input."""

    def __init__(self, settings: MemberSettings) -> None:
        self.s = settings
        # its own group's view: other groups' records are counted, never kept (a flood of them
        # costs a count, not memory; `rationalizer`, "One group's view"); a placed group's
        # member folds its home and window only, and knows its group's placement
        mine = replace(settings.rationalizer, only_group=settings.group)
        placement = settings.placement
        if placement is not None:
            mine = replace(mine, placements=PlacementBook.of({settings.group: placement}))
        followed = sorted(reads(settings.group, settings.layout))
        self.worlds = {p: World(mine, p) for p in followed}
        self._layout = settings.layout
        self.clock = LogClock()
        self.clock_check = ClockCheck()
        # After the lease clock stood still: the end of each coordination partition to read
        # before the member writes again (None: not waiting; empty: asked, no answer yet), and
        # when to ask again.
        self.resync: dict[int, int] | None = None
        self.resync_asked_at = 0.0
        self.pending = Pending()
        self.held: dict[ClaimKey, HeldClaim] = {}
        self.avoid_until: dict[ClaimKey, float] = {}
        # the waits set by a release after repeated handler failures (an operator's decision
        # on the claim's record ends them: `Member._heed_decision`)
        self.failure_avoid: dict[ClaimKey, float] = {}
        # Send times of heartbeats given up on (no acknowledgement or verdict in time), oldest
        # first, per claim: the producer may still deliver them when a stall ends.
        self.late_heartbeats: dict[ClaimKey, list[float]] = {}
        # AMO: reservations given up on (not written again) whose child was not granted their
        # records, per claim: if the fold shows one landed after all, it is adopted (granted, if
        # its child still waits) or its records are reported lost (`Children.reservation_landed`)
        self.unconfirmed: dict[ClaimKey, list[Op]] = {}
        # AMO: landings of such reservations left to a reservation in flight that covers them
        # (`Children.reservation_landed`), per claim, until its verdict: granted or reported
        # with it, else decided as any landing
        self.deferred_landings: dict[ClaimKey, list[ev.MessagesClaimed]] = {}
        # Positions of claims whose release after an expired lease was not confirmed.
        self.expired_positions: dict[ClaimKey, int] = {}
        self.children_started = 0  # numbers children across claims (`HeldClaim.child_no`)
        # Per partition, when its children dead-lettered or skipped a unit (`ipc.Poisoned`),
        # within the last POISON_WINDOW_S: kept across child restarts and across the claim
        # being released and won again by this member, so max_poison_rate is the partition's.
        self._poisoned: dict[ClaimKey, deque[float]] = {}
        self.stopping = False
        self.wall = 0.0
        self.out: list[cmd.Command] = []
        self._rng = random.Random(f"{settings.client_id}/{settings.instance_id}")
        self._home: dict[ClaimKey, int] = {}

    # ---- the poison rate of each partition ---------------------------------------------------

    def poisoned(self, key: ClaimKey, now: float) -> None:
        """A child of ``key`` dead-lettered or skipped one more unit at ``now``."""
        self._poisoned.setdefault(key, deque()).append(now)
        self._prune_poisoned(key, now)

    def poison_ages(self, key: ClaimKey, now: float) -> tuple[float, ...]:
        """The partition's poison units of the last minute, as seconds before ``now``."""
        self._prune_poisoned(key, now)
        return tuple(now - t for t in self._poisoned.get(key, ()))

    def _prune_poisoned(self, key: ClaimKey, now: float) -> None:
        times = self._poisoned.get(key)
        if times is None:
            return
        while times and times[0] <= now - POISON_WINDOW_S:
            times.popleft()
        if not times:
            del self._poisoned[key]

    # ---- the folded log --------------------------------------------------------------------

    def home(self, key: ClaimKey) -> int:
        """The coordination partition of a claim."""
        home = self._home.get(key)
        if home is None:
            home = self._layout.partition_of(key.topic, key.partition)
            self._home[key] = home
        return home

    def state_of(self, key: ClaimKey) -> ClaimState | None:
        """What the fold says about a claim (None: nothing)."""
        return self.worlds[self.home(key)].claims.get(key)

    def log_now_ms(self, key: ClaimKey, now: float) -> int:
        """The log time now on ``key``'s coordination partition (0 before anything was read)."""
        return self.clock.now_ms(self.home(key), now) or 0

    def is_mine(self, key: ClaimKey) -> bool:
        """A claim of this member's group: its topics' partitions (or slices of them: the
        topic field of a slice's claim names its data topic, `slicing.split_topic`) or its
        group's members."""
        if key.group != self.s.group:
            return False
        return data_topic(key.topic) in self.s.topics or is_member_key(key)

    # ---- output -----------------------------------------------------------------------------

    def append(
        self, kind: Kind, key: ClaimKey, message: Message | PoisonMessage, now: float, **extra: int
    ) -> Op:
        """Write ``message`` to its coordination partition: a pending operation."""
        op = self.pending.add(kind, key, now, **extra)
        op.message = message
        if isinstance(message, RecordFailed | PoisonResolved):
            record, value = poison_record_key(message), encode_poison(message)
        else:
            record, value = record_key(message), encode(message)
        self.out.append(cmd.Append(op.op, self.home(key), message, record, value))
        return op

    def fields(self, key: ClaimKey) -> tuple[int, str, str, str, str, int]:
        """The fields every message of this member about ``key`` starts with."""
        s = self.s
        return (int(self.wall), s.instance_id, s.client_id, key.group, key.topic, key.partition)

    def say(self, level: str, event: str, **fields: object) -> None:
        """A log line."""
        self.out.append(cmd.Log(level, event, fields))

    def observe(self, what: obs.Observation) -> None:
        """Tell the observers (metrics, systemd, offsets)."""
        self.out.append(cmd.Observe(what))

    def held_lost(
        self,
        held: HeldClaim,
        start: int,
        end: int,
        cause: obs.LossCause,
        why: str,
        *,
        given_up: bool = False,
    ) -> None:
        """AMO: ``start``..``end`` of a held claim is reserved in the log and nobody will handle
        it: reported for each part not reported before (a refused reservation, then the child's
        end)."""
        pieces = [(start, end)] if start < end else []
        for a, b in held.lost:  # take out what was reported already
            pieces = [p for s, e in pieces for p in ((s, min(e, a)), (max(s, b), e)) if p[0] < p[1]]
        for s, e in pieces:
            held.lost.append((s, e))
            self.amo_lost(held.key, s, e, cause, why, token=held.token, given_up=given_up)

    def amo_lost(
        self,
        key: ClaimKey,
        start: int,
        end: int,
        cause: obs.LossCause,
        why: str,
        token: int | None = None,
        *,
        given_up: bool = False,
    ) -> None:
        """AMO: ``start``..``end`` of ``key`` is lost: the warning `amo_records_lost` and the
        observation the loss metric (`marshal_amo_lost_records_total`) counts (``token``: the
        claim's, when its holder reports it; ``given_up``: a write given up on landed, see
        `obs.AmoLost`; nothing for an empty range)."""
        if start >= end:
            return
        self.observe(obs.AmoLost(key, start, end, cause, token, given_up))
        self.say(
            "warning",
            "amo_records_lost",
            topic=key.topic,
            partition=key.partition,
            start=start,
            end=end,
            records=records_at_most(key.topic, start, end),
            cause=cause.value,
            reason=why,
        )

    # ---- arithmetic -------------------------------------------------------------------------

    def lease_from(self, sent_at: float) -> float:
        """The lease a heartbeat (or claim) sent at ``sent_at`` proves, once folded valid."""
        return lease_deadline(sent_at, self.s.heartbeat_interval, self.s.margin)

    def lease_of(self, op: Op) -> float:
        """The lease ``op``'s heartbeat or claim proves, once folded valid: none (0) if it was
        sent before the lease clock was found to have stood still (its send time is on that
        clock, and may be any time before the broker's)."""
        return 0.0 if op.before_stall else self.lease_from(op.sent_at)

    def jitter(self, low: float, high: float) -> float:
        """A random fraction of HB in [low, high) (seeded per instance: runs replay)."""
        return self._rng.uniform(low, high) * self.s.heartbeat_interval
