"""The coordination writes a member has in flight, and matching verdicts to them.

A write is a pending operation: appended (the log acknowledged it, so its position is known),
then decided (the fold reached it and said what it did). The acknowledgement and the record
itself can arrive in either order: the runtime's consumer may fold the record before the
producer's delivery report comes in. So a verdict on a record sent by this instance, with no
known operation yet, waits here until its acknowledgement names it.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from enum import Enum

from marshal_workers.protocol import events as ev
from marshal_workers.protocol.recordfailures import PoisonMessage
from marshal_workers.protocol.wire import ClaimKey, Message

WRITE_TRIES = 3  # a reservation or a failure count whose write failed is written this often


class Kind(Enum):
    """What a write was for."""

    CLAIM = "claim"
    TAKEOVER = "takeover"  # restart recovery: a heartbeat from a new instance of this client
    HEARTBEAT = "heartbeat"
    RESERVE = "reserve"  # AMO: ClaimingMessages for a child's grant request
    RELEASE = "release"
    POISON = "poison"  # a failure of a record counted in the log (poison records)


@dataclass(slots=True)
class Op:
    """One write in flight."""

    op: int
    kind: Kind
    key: ClaimKey
    sent_at: float
    request_id: int = 0  # RESERVE: the child's request
    start: int = 0  # RESERVE: the batch's first offset
    end: int = 0  # RESERVE: the first offset after the batch; HEARTBEAT: the offset sent
    child: int = 0  # RESERVE: the child that asked (`HeldClaim.child_no`)
    tries: int = 0  # RESERVE, POISON: writes of the same record before this one (`WRITE_TRIES`)
    # RESERVE, written again: where the record of an earlier try that landed after all began
    # reserving (the log's position at it), if the fold showed one (`Children.earlier_try`)
    landed_from: int | None = None
    # RESERVE, written again: what its earlier tries wrote (other bytes a second later): a
    # landing of one of them is this write's, once it is given up (`Children.reservation_landed`)
    tried: tuple[Message, ...] = field(default=(), init=False)
    # sent before the lease clock was found to have stood still: its send time proves no lease
    before_stall: bool = field(default=False, init=False)
    message: Message | PoisonMessage | None = field(default=None, init=False)  # what it wrote


class Pending:
    """Writes in flight, by operation number and, once acknowledged, by log position."""

    def __init__(self) -> None:
        self._next = 1
        self.ops: dict[int, Op] = {}
        self._at: dict[tuple[int, int], int] = {}
        self._early: dict[tuple[int, int], tuple[ev.Event, float]] = {}
        # writes no longer pending, by what they wrote: the earliest send of those bytes, and
        # whether one of them was sent before the lease clock stood still (`early_verdict`)
        self._sent: dict[Message | PoisonMessage, tuple[float, bool]] = {}
        # when each of them expires: (its earliest send, a tie-breaker, the bytes), a heap, so
        # that `expired` looks at what expires, not at every write of the last op_timeout
        # (a rebuild of the whole dict every tick took a sixth of a simulated fleet's CPU);
        # an entry's earliest send only falls, and each fall pushes it again
        self._sent_expiry: list[tuple[float, int, Message | PoisonMessage]] = []
        self._pushes = itertools.count()

    def add(self, kind: Kind, key: ClaimKey, now: float, **extra: int) -> Op:
        """A new operation, numbered."""
        op = Op(self._next, kind, key, now, **extra)
        self._next += 1
        self.ops[op.op] = op
        return op

    def appended(self, op_number: int, partition: int, offset: int) -> ev.Event | None:
        """The log acknowledged ``op_number`` at ``(partition, offset)``; returns its verdict if
        the fold got there first."""
        if op_number not in self.ops:
            return None
        early = self._early.pop((partition, offset), None)
        if early is not None:
            return early[0]
        self._at[(partition, offset)] = op_number
        return None

    def take(self, op_number: int) -> Op | None:
        """Remove and return an operation (decided, failed or given up)."""
        op = self.ops.pop(op_number, None)
        if op is not None:
            for position, number in list(self._at.items()):
                if number == op_number:
                    del self._at[position]
            self._remember_sent(op)
        return op

    def _remember_sent(self, op: Op) -> None:
        if op.message is None:
            return
        known = self._sent.get(op.message)
        sent_at, before_stall = known if known is not None else (op.sent_at, False)
        earliest = min(sent_at, op.sent_at)
        self._sent[op.message] = (earliest, before_stall or op.before_stall)
        if known is None or earliest < known[0]:
            heapq.heappush(self._sent_expiry, (earliest, next(self._pushes), op.message))

    def decided(self, event: ev.Event, mine: bool, now: float) -> Op | None:
        """The operation that ``event`` is the verdict on, removed; None if it is nobody's or
        (``mine``: sent by this instance) its acknowledgement has not come yet."""
        position = (event.coord_partition, event.coord_offset)
        number = self._at.pop(position, None)
        if number is not None:
            return self.ops.pop(number, None)
        if mine:
            self._early[position] = (event, now)
        return None

    def early_verdict(self, op: Op) -> ev.Event | None:
        """The verdict on ``op``'s record if the fold reached it before its acknowledgement,
        removed: a write given up on (told it failed, or no acknowledgement in time) whose
        record the fold shows landed after all."""
        if op.message is None:
            return None
        for position, (event, _) in self._early.items():
            if getattr(event, "message", None) == op.message:
                del self._early[position]
                self._earliest_of_its_bytes(op)
                return event
        return None

    def _earliest_of_its_bytes(self, op: Op) -> None:
        """A record matched by its bytes may be an earlier write's of the very same bytes (a
        message carries whole wall seconds: a heartbeat of one position written twice in a
        second), given up or still in flight: ``op`` proves no more than the earliest of them,
        sent when it was sent."""
        if op.message is None:
            return
        earlier = self._sent.get(op.message)
        if earlier is not None:
            op.sent_at = min(op.sent_at, earlier[0])
            op.before_stall = op.before_stall or earlier[1]
        for other in self.ops.values():  # still in flight (its acknowledgement to come)
            if other.message == op.message:
                op.sent_at = min(op.sent_at, other.sent_at)
                op.before_stall = op.before_stall or other.before_stall

    def expired(self, now: float, older_than: float) -> list[Op]:
        """Remove and return operations sent before ``now - older_than`` (no verdict came),
        and forget early verdicts no acknowledgement claimed."""
        horizon = now - older_than
        old = [op for op in self.ops.values() if op.sent_at < horizon]
        for op in old:
            self.take(op.op)
        self._early = {p: e for p, e in self._early.items() if e[1] >= horizon}
        expiry = self._sent_expiry
        while expiry and expiry[0][0] < horizon:
            _, _, message = heapq.heappop(expiry)
            known = self._sent.get(message)
            if known is not None and known[0] < horizon:
                del self._sent[message]
        return old

    def in_flight(self, kind: Kind, key: ClaimKey) -> bool:
        """Whether an operation of ``kind`` on ``key`` is in flight."""
        return any(op.kind is kind and op.key == key for op in self.ops.values())
