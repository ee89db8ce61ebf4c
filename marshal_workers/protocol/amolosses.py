"""At-most-once losses as the coordination log shows them (pure: no I/O, no clock).

Theory of operation
-------------------
At most once, a holder reserves each run of records in the log (ClaimingMessages) before its
child handles it; whoever holds the partition next resumes at the end of the last reservation.
A reserved record that was not handled is therefore lost, and the log shows where that can
have happened, though not how far a child got: `AmoLosses` is fed every event of the fold, in
offset order per coordination partition (`add`), and keeps per data partition one *claim
interval* (from the winning claim, or the heartbeat by which a new instance of the holder took
over, to what ended it) and the newest loss. An interval that reserved ends:

- ``taken_over``: a later claim won it (the holder's lease expired: it crashed or froze); its
  right ended at its last valid heartbeat + 2*HB. ``refused`` instead if the log refused a
  commit (heartbeat or release) of the holder's: it came back after its lease.
- ``replaced``: a new instance of the holder's client took it over (a restart).
- ``lease_expired`` (``refused`` as above) once its last heartbeat is more than 2*HB before
  ``at_ms`` and nobody claimed: decided when asked (`last_loss`), never stored.
- ``released`` / ``released_under_pause`` (the group's pause was in force): the release
  carries the end of what was handled.

What is at risk is the same rule the audit uses without a ledger (`audit.amo.log_losses`): on
a crash (the first four), the last `AT_RISK_RESERVATIONS` reservations of the interval, since
the child asks for the next run while it handles one, so neither is known handled; on a
release, the reserved records above the released offset. So a loss is "up to N records": the
ledger (`marshal-audit`) says how many of them were handled after all. Intervals of a client
that paused the group (an operator's ``set-position``) and member announcements lose nothing.

Each coordination partition is its own history, in its own offset order: intervals, losses
and pauses are kept per coordination partition and data partition. A reader gets the
partitions' records interleaved as they arrive, so a tracker keyed by the data partition alone
joined two histories in an order of chance: after a group moved, its claims' records before the
move stay on their old coordination partitions (until the cleaner) beside the live ones on the
new homes, and a reader that got the new home's records first saw the old grant "take over" the
live claim (a loss of the live holder, lost in the future, taken by itself). The questions take
the coordination partition a view counts a claim on (`groupstatus`: its home now, where the
group's members take it from); without one, every partition's.
The state is a few fields per data partition: `marshal-admin status` folds the whole log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Final

from marshal_workers.protocol import events as ev
from marshal_workers.protocol.members import is_member_key
from marshal_workers.protocol.slicing import records_at_most
from marshal_workers.protocol.wire import ClaimingMessages, ClaimKey

AT_RISK_RESERVATIONS: Final = 2  # the run a child handles and the one it asked for ahead
CRASH_CAUSES: Final = frozenset({"taken_over", "lease_expired", "refused", "replaced"})
RELEASE_CAUSES: Final = frozenset({"released", "released_under_pause"})


@dataclass(frozen=True, slots=True)
class AmoLoss:
    """Reserved records [start, end) of one holder that may never have been handled, and why.

    ``start`` is None when the log does not say where the range began (a reservation made
    before the history now in the log); ``lost_ms`` is when the holder's right ended."""

    key: ClaimKey
    client_id: str
    instance_id: str
    token: int
    start: int | None
    end: int
    cause: str
    reserved_ms: int | None
    lost_ms: int
    successor: str | None

    @property
    def holder(self) -> tuple[str, str]:
        """Client and instance id of the holder that reserved the range."""
        return self.client_id, self.instance_id

    @property
    def records(self) -> int | None:
        """At most how many records were lost (None: the start is unknown); a slice's own
        records of the range (`slicing.records_at_most`)."""
        return None if self.start is None else records_at_most(self.key.topic, self.start, self.end)


@dataclass(slots=True)
class _Interval:
    client_id: str
    instance_id: str
    token: int
    last_heartbeat_ms: int
    by_admin: bool
    committed: int | None = None
    reserved: int | None = None
    reserved_ms: int | None = None
    at_risk: tuple[int | None, ...] = ()  # starts of the newest reservations, oldest first
    refused: bool = False

    def loss(self, key: ClaimKey, cause: str, lost_ms: int, by: str | None) -> AmoLoss | None:
        """What ending this way lost, if anything."""
        end = self.reserved
        if self.by_admin or end is None:
            return None
        if cause in CRASH_CAUSES:
            start = self.at_risk[0] if self.at_risk else None
        elif self.committed is not None and self.committed < end:
            start = self.committed
        else:
            return None
        return AmoLoss(
            key, self.client_id, self.instance_id, self.token, start, end, cause,
            self.reserved_ms, lost_ms, by,
        )  # fmt: skip


@dataclass(slots=True)
class _Partition:
    """One data partition: its open interval, its newest loss, and the loss totals."""

    open: _Interval | None = None
    last: AmoLoss | None = None
    ranges: int = 0
    records: int = 0
    every: list[AmoLoss] | None = None  # each loss, when asked for (`AmoLosses(keep=True)`)

    def lost(self, loss: AmoLoss | None) -> None:
        if loss is not None:
            self.last = loss
            self.ranges += 1
            self.records += loss.records or 0
            if self.every is not None:
                self.every.append(loss)


class AmoLosses:
    """The AMO losses the log shows, per data partition (see the module docstring)."""

    def __init__(self, heartbeat_interval_ms: int, *, keep: bool = False) -> None:
        self.hb = heartbeat_interval_ms
        self.keep = keep  # keep every loss, not only each partition's newest (`every`)
        # claim -> coordination partition -> its history there (each partition its own)
        self._partitions: dict[ClaimKey, dict[int, _Partition]] = {}
        self._pausers: dict[tuple[int, str], set[str]] = {}  # (coord partition, group)
        self._pause_until: dict[tuple[int, str], int] = {}
        self._amo_groups: set[str] = set()  # groups that ever reserved: at-most-once

    def add_all(self, events: Iterable[ev.Event]) -> None:
        """Take events in fold order."""
        handlers = _HANDLERS
        for event in events:
            handle = handlers.get(type(event))
            if handle is not None:
                handle(self, event)

    def add(self, event: ev.Event) -> None:
        """Take the next event of its coordination partition."""
        handle = _HANDLERS.get(type(event))
        if handle is not None:
            handle(self, event)

    # ---- questions --------------------------------------------------------------------------

    def last_loss(self, key: ClaimKey, at_ms: int, where: int | None = None) -> AmoLoss | None:
        """The newest loss of ``key`` as of log or wall time ``at_ms`` (an open interval whose
        holder has been silent over 2*HB by then counts as ended: ``lease_expired``), on
        coordination partition ``where`` (None: on any, the one lost last)."""
        found = [
            loss
            for q, part in self._partitions.get(key, {}).items()
            if where is None or q == where
            if (loss := self._settled(key, part, at_ms) or part.last) is not None
        ]
        return max(found, key=lambda loss: loss.lost_ms, default=None)

    def totals(
        self, group: str, at_ms: int, counted: Callable[[int, ClaimKey], bool] | None = None
    ) -> tuple[int, int]:
        """How many ranges ``group`` lost and at most how many records (unknown starts count
        none), as of ``at_ms``; with ``counted``, only of the claims on the coordination
        partitions it takes (``counted(partition, key)``: a view's, each claim on its home)."""
        ranges = records = 0
        for key, q, part in self._each():
            if key.group != group or (counted is not None and not counted(q, key)):
                continue
            ranges, records = ranges + part.ranges, records + part.records
            settled = self._settled(key, part, at_ms)
            if settled is not None:
                ranges, records = ranges + 1, records + (settled.records or 0)
        return ranges, records

    def is_amo(self, group: str) -> bool:
        """Whether ``group`` ever reserved records (it runs at most once)."""
        return group in self._amo_groups

    def keys(self, group: str) -> list[ClaimKey]:
        """The data partitions of ``group`` that ever reserved or were claimed."""
        return [key for key in self._partitions if key.group == group]

    def every(self, at_ms: int) -> list[AmoLoss]:
        """Every loss the log shows as of ``at_ms`` (needs ``keep``): each partition's ranges
        in log order, then those of holders silent over 2*HB by then."""
        out = [loss for _, _, part in self._each() for loss in part.every or ()]
        for key, _, part in self._each():
            settled = self._settled(key, part, at_ms)
            if settled is not None:
                out.append(settled)
        return out

    def _each(self) -> Iterable[tuple[ClaimKey, int, _Partition]]:
        """Every claim's history on each coordination partition it has one on."""
        return (
            (key, q, part) for key, parts in self._partitions.items() for q, part in parts.items()
        )

    def _settled(self, key: ClaimKey, part: _Partition, at_ms: int) -> AmoLoss | None:
        iv = part.open
        if iv is None or at_ms - iv.last_heartbeat_ms <= 2 * self.hb:
            return None  # nobody holds it, or its holder may still be at work
        cause = "refused" if iv.refused else "lease_expired"
        return iv.loss(key, cause, iv.last_heartbeat_ms + 2 * self.hb, None)

    # ---- events -----------------------------------------------------------------------------

    def _part(self, where: int, key: ClaimKey) -> _Partition | None:
        if is_member_key(key):
            return None
        parts = self._partitions.setdefault(key, {})
        part = parts.get(where)
        if part is None:
            part = parts[where] = _Partition(every=[] if self.keep else None)
        return part

    def _history(self, e: ev.ClaimVerdict) -> _Partition | None:
        """The claim's history on the event's coordination partition (None: none yet)."""
        parts = self._partitions.get(e.key)
        return None if parts is None else parts.get(e.coord_partition)

    def _granted(self, e: ev.ClaimGranted) -> None:
        key = e.key
        part = self._part(e.coord_partition, key)
        if part is None:
            return
        old = part.open
        if old is not None:
            cause = "refused" if old.refused else "taken_over"
            part.lost(old.loss(key, cause, old.last_heartbeat_ms + 2 * self.hb, e.client_id))
        pausers = self._pausers.get((e.coord_partition, key.group), ())
        part.open = _Interval(
            e.client_id, e.instance_id, e.token, e.log_time, e.client_id in pausers
        )

    def _heartbeat(self, e: ev.HeartbeatAccepted) -> None:
        part = self._history(e)
        if part is None or part.open is None:
            return
        iv = part.open
        if e.replaced_instance is not None:
            part.lost(iv.loss(e.key, "replaced", e.log_time, e.client_id))
            # what the old instance reserved is its loss; the new one loses only its own
            iv = part.open = _Interval(
                e.client_id, e.instance_id, e.token, e.log_time, iv.by_admin, iv.committed
            )
        iv.last_heartbeat_ms = e.log_time
        iv.committed = e.message.offset

    def _released(self, e: ev.Released) -> None:
        part = self._history(e)
        if part is None or part.open is None:
            return
        iv, part.open = part.open, None
        iv.committed = e.message.offset
        until = self._pause_until.get((e.coord_partition, e.key.group))
        cause = "released_under_pause" if until is not None and e.log_time < until else "released"
        part.lost(iv.loss(e.key, cause, e.log_time, None))

    def _reserved(self, e: ev.MessagesClaimed) -> None:
        self._amo_groups.add(e.key.group)
        part = self._history(e)
        if part is None or part.open is None:
            return
        iv = part.open
        if e.start is None or e.start < e.end:  # (a write made again that landed twice: none)
            iv.at_risk = (*iv.at_risk, e.start)[-AT_RISK_RESERVATIONS:]
        iv.reserved, iv.reserved_ms = e.message.offset, e.log_time

    def _refused(self, e: ev.HeartbeatRejected | ev.ReleaseRejected) -> None:
        """A commit the log refused: the (former) holder came back after its lease."""
        part = self._history(e)
        if part is None:
            return
        who = (e.client_id, e.instance_id)
        iv = part.open
        if iv is not None and (iv.client_id, iv.instance_id) == who:
            iv.refused = True
            return
        last = part.last
        if last is not None and last.cause == "taken_over" and last.holder == who:
            part.last = replace(last, cause="refused")

    def _reservation(self, e: ev.MessagesRejected | ev.Unverified) -> None:
        """A refused or unverifiable record about a claim: a reservation makes an AMO group."""
        if isinstance(e.message, ClaimingMessages):
            self._amo_groups.add(e.message.group_id)

    def _paused(self, e: ev.GroupPaused) -> None:
        where = (e.coord_partition, e.group)
        self._pausers.setdefault(where, set()).add(e.client_id)
        self._pause_until[where] = e.until_ms


_HANDLERS: dict[type, Callable[[AmoLosses, Any], None]] = {
    ev.ClaimGranted: AmoLosses._granted,
    ev.HeartbeatAccepted: AmoLosses._heartbeat,
    ev.Released: AmoLosses._released,
    ev.MessagesClaimed: AmoLosses._reserved,
    ev.HeartbeatRejected: AmoLosses._refused,
    ev.ReleaseRejected: AmoLosses._refused,
    ev.GroupPaused: AmoLosses._paused,
    ev.MessagesRejected: AmoLosses._reservation,
    ev.Unverified: AmoLosses._reservation,
}
