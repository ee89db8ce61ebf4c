"""From the fold's events of one coordination partition to the audit's tables (pure).

Theory of operation
-------------------
`Tables` is fed every event of one coordination partition in offset order (`add`) and ends
with `finish`. It keeps one *open interval* per claim: from the winning ClaimingPartition (or
the heartbeat by which a new instance of the holder took over) to what ended it:

- ``released``: the holder released it; it ends at the release's log time.
- ``taken_over``: a later claim won it, which the fold allows only once it was stale; it ends
  where the old holder's right ended, its last valid heartbeat + 2*HB.
- ``replaced``: a new instance of the same client took it over (restart recovery); it ends at
  that heartbeat and a new interval with the same token starts there.
- ``stale`` / ``still_held``: open at the end of the log; decided by `settle`, which needs the
  log's end over *all* coordination partitions (so it runs once every partition is folded):
  stale if the last heartbeat is more than 2*HB before that end (ends at last heartbeat +
  2*HB), else still held (no end).

Every interval's end is therefore the last moment its holder was entitled to work, which is
what the ledger checks compare handling times against. A claim whose earlier history was
compacted away (the fold's Unverified events) proves nothing and opens no interval.

Member claims (`members.is_member_key`) go to ``membership``; data claims to ``claims``, and
only they produce failovers, heartbeat gaps, reservations and lag rows. Accepted poison
records (`recordfailures`: a handler's counted failures, parkings, an operator's retry or skip)
are ``poison`` rows. Each group's ``groups`` row counts this partition's part of it, and its
``group_keys`` rows (`schema.PARTS`) name the claim keys behind the counts of partitions and
members, which `finalize.merge_groups` counts once over all partitions. Rows are tuples in the
column order of `schema.TABLES`; rows outside the ``--group``/``--since``/``--until`` window
are left out here, so that every caller filters alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from marshal_workers.audit.events_table import event_row
from marshal_workers.protocol import events as ev
from marshal_workers.protocol import recordfailures as rf
from marshal_workers.protocol.amolosses import AT_RISK_RESERVATIONS
from marshal_workers.protocol.members import is_member_key
from marshal_workers.protocol.wire import ClaimingMessages, ClaimKey

Row = tuple[Any, ...]

OPEN = None  # `ended` of an interval still open when its coordination partition was folded


@dataclass(frozen=True, slots=True)
class Window:
    """What to report: one group or all, and log times in [since_ms, until_ms]."""

    group: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    def wants_group(self, group: str | None) -> bool:
        """Whether rows of ``group`` are reported."""
        return self.group is None or group == self.group

    def wants_time(self, t: int) -> bool:
        """Whether something that happened at log time ``t`` is reported."""
        return (self.since_ms is None or t >= self.since_ms) and (
            self.until_ms is None or t <= self.until_ms
        )

    def wants_span(self, start: int, end: int | None) -> bool:
        """Whether an interval [start, end] (end None: open) overlaps the window."""
        return (self.until_ms is None or start <= self.until_ms) and (
            self.since_ms is None or end is None or end >= self.since_ms
        )


@dataclass(slots=True)
class _Interval:
    key: ClaimKey
    client_id: str
    instance_id: str
    token: int
    coord_partition: int
    start_ms: int
    last_heartbeat_ms: int
    by_admin: bool
    member: bool
    heartbeats: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    reserved_offset: int | None = None
    reserve_start: int | None = None  # where the interval's first reservation started
    last_batch_start: int | None = None  # where its last reservation started
    at_risk: tuple[int | None, ...] = ()  # where its newest reservations started (`amolosses`)
    reserved_ms: int | None = None  # log time of its last reservation
    refused: tuple[int, str] | None = None  # the holder's last refused commit: offset, why
    max_gap_ms: int = 0
    max_gap_at_ms: int | None = None
    gap_sum_ms: int = 0
    gaps_over: int = 0


@dataclass(slots=True)
class _Reserved:
    """A claim interval that reserved (AMO), once it ended: an ``amo_reserved`` row."""

    iv: _Interval
    ended: str | None  # None: open at the end of its partition (`finalize.settle_reserved`)
    end_ms: int | None
    successor: str | None

    def row(self) -> Row:
        iv, key = self.iv, self.iv.key
        refused = None if iv.refused is None else iv.refused[0]
        return (key.group, key.topic, key.partition, iv.client_id, iv.instance_id, iv.token,
                iv.reserve_start, iv.last_batch_start, iv.reserved_offset, iv.last_offset,
                iv.reserved_ms, self.end_ms, self.ended, self.successor, refused,
                iv.at_risk[0] if iv.at_risk else None)  # fmt: skip


@dataclass(slots=True)
class _GroupPart:
    amo: bool = False
    partitions: set[ClaimKey] = field(default_factory=set)
    members: set[ClaimKey] = field(default_factory=set)
    claims: int = 0
    failovers: int = 0
    handovers: int = 0
    pauses: int = 0
    pausers: set[str] = field(default_factory=set)


class Tables:
    """Builds every table from the events of one coordination partition (see module doc)."""

    def __init__(self, coord_partition: int, heartbeat_interval_ms: int, window: Window) -> None:
        self.coord_partition = coord_partition
        self.hb = heartbeat_interval_ms
        self.window = window
        self.rows: dict[str, list[Row]] = {
            name: []
            for name in (
                "events", "claims", "membership", "failovers", "heartbeat_gaps",
                "reservations", "lag", "poison", "amo_reserved", "groups", "group_keys",
                "coordination",
            )
        }  # fmt: skip
        self._open: dict[tuple[str, str, int], _Interval] = {}
        self._released_at: dict[ClaimKey, tuple[_Interval, int]] = {}
        self._groups: dict[str, _GroupPart] = {}
        self._amo: list[_Reserved] = []
        self._taken_over: dict[tuple[ClaimKey, str, str], _Reserved] = {}
        self._pauses: dict[str, tuple[str, int]] = {}  # group -> pausing client, until (ms)
        self._records = self._malformed = self._unverified = 0
        self._verdicts: dict[type, int] = {}
        self._first: ev.Event | None = None
        self._last: ev.Event | None = None
        self._gap_seen = False
        # Set by a fold of some of a partition's records (`claimfold`): whether the partition
        # had a gap at or before one of them (their own offsets say nothing of that).
        self.log_gap: bool | None = None
        self._filtered = window.group is not None
        self._all_times = window.since_ms is None and window.until_ms is None

    # ---- feeding ----------------------------------------------------------------------------

    def add(self, event: ev.Event) -> None:
        """Take the next event of the partition, in offset order."""
        self._records += 1
        last = self._last
        if last is None:
            self._first = event
            self._gap_seen = event.coord_offset > 0
        elif event.coord_offset > last.coord_offset + 1:
            self._gap_seen = True
        self._last = event
        kind = type(event)
        if kind is ev.Malformed:
            self._malformed += 1
        if (self._all_times or self.window.wants_time(event.log_time)) and (
            not self._filtered or self._wanted(event)
        ):
            self.rows["events"].append(event_row(event))
            self._verdicts[kind] = self._verdicts.get(kind, 0) + 1
        handle = _HANDLERS.get(kind)
        if handle is not None:
            handle(self, event)

    def context(self, event: ev.Event) -> None:
        """Take an event of a record folded only for the state it sets (`claimfold`: a group's
        pause inside the fold of one of its claims): what it changes here, never a count or a
        row (the group's own fold reports it)."""
        if type(event) is ev.GroupPaused:
            self._pause_noted(event)

    def _wanted(self, event: ev.Event) -> bool:
        """Whether ``--group`` reports the event (malformed records belong to no group)."""
        if isinstance(event, ev.Verdict | rf.PoisonVerdict):
            return self.window.wants_group(event.message.group_id)
        if isinstance(event, ev.GroupSettingsRecorded):
            return self.window.wants_group(event.group)
        return False

    def _reported(self, group: str, t: int) -> bool:
        """Whether a per-record row (lag, reservation) of ``group`` at ``t`` is reported."""
        return (self._all_times or self.window.wants_time(t)) and (
            not self._filtered or group == self.window.group
        )

    def _rejected_reservation(self, e: ev.MessagesRejected) -> None:
        self._group(e.message.group_id).amo = True

    def _paused(self, e: ev.GroupPaused) -> None:
        self._group(e.message.group_id).pauses += 1
        self._pause_noted(e)

    def _pause_noted(self, e: ev.GroupPaused) -> None:
        self._group(e.message.group_id).pausers.add(e.message.client_id)
        self._pauses[e.message.group_id] = (e.message.client_id, e.until_ms)

    def _refused(self, e: ev.HeartbeatRejected | ev.ReleaseRejected) -> None:
        """A commit the log refused: if it is the (former) holder's, its last batch was lost
        to a refusal rather than a silent crash (`amo`)."""
        m = e.message
        key = (m.group_id, m.topic, m.partition)
        iv = self._open.get(key)
        if iv is not None and (iv.client_id, iv.instance_id) == (m.client_id, m.instance_id):
            iv.refused = (m.offset, e.reason)
            return
        gone = self._taken_over.get((e.key, m.client_id, m.instance_id))
        if gone is not None and gone.ended == "taken_over":
            gone.iv.refused = (m.offset, e.reason)
            gone.ended = "refused"

    def _unverified_record(self, e: ev.Unverified) -> None:
        self._unverified += 1
        if isinstance(e.message, ClaimingMessages):
            self._group(e.message.group_id).amo = True

    def _group(self, group: str) -> _GroupPart:
        part = self._groups.get(group)
        if part is None:
            part = self._groups[group] = _GroupPart()
        return part

    def _granted(self, e: ev.ClaimGranted) -> None:
        key, now = e.key, e.log_time
        member = is_member_key(key)
        part = self._group(key.group)
        (part.members if member else part.partitions).add(key)
        old = self._open.pop(key, None)
        if old is not None:
            self._close(old, "taken_over", old.last_heartbeat_ms + 2 * self.hb, e.client_id)
        if not member:
            released = self._released_at.pop(key, None)
            if old is not None:
                part.failovers += 1
                self._failover("failover", old, old.last_heartbeat_ms, e)
            elif released is not None:
                part.handovers += 1
                self._failover("handover", released[0], released[1], e)
            elif e.previous_client is not None and e.previous_last_heartbeat is not None:
                part.failovers += 1  # the old claim's history was compacted away
                self._failover_unverified(e)
        self._open[key] = _Interval(
            key, e.client_id, e.instance_id, e.token, e.coord_partition, now, now,
            by_admin=e.client_id in part.pausers, member=member,
        )  # fmt: skip

    def _heartbeat(self, e: ev.HeartbeatAccepted) -> None:
        m, now = e.message, e.log_time
        iv = self._open.get((m.group_id, m.topic, m.partition))
        if iv is None:
            return
        if e.replaced_instance is not None:
            self._close(iv, "replaced", now, e.client_id)
            iv = self._open[iv.key] = _Interval(
                iv.key, e.client_id, e.instance_id, e.token, e.coord_partition, now, now,
                by_admin=iv.by_admin, member=iv.member, first_offset=iv.last_offset,
                last_offset=iv.last_offset, reserved_offset=iv.reserved_offset,
            )  # fmt: skip
        else:
            gap = now - iv.last_heartbeat_ms
            iv.gap_sum_ms += gap
            if gap >= iv.max_gap_ms:
                iv.max_gap_ms, iv.max_gap_at_ms = gap, now
            if gap >= self.hb:
                iv.gaps_over += 1
        iv.heartbeats += 1
        iv.last_heartbeat_ms = now
        offset = m.offset
        if iv.first_offset is None:
            iv.first_offset = offset
        iv.last_offset = offset
        if not iv.member and self._reported(m.group_id, now):
            self.rows["lag"].append(
                (m.group_id, m.topic, m.partition, m.client_id, e.token, now, offset, None, None)
            )

    def _released(self, e: ev.Released) -> None:
        iv = self._open.pop(e.key, None)
        if iv is None:
            return
        iv.last_offset = e.message.offset
        if iv.first_offset is None:
            iv.first_offset = e.message.offset
        self._close(iv, "released", e.log_time, None)
        self._released_at[e.key] = (iv, e.log_time)  # a handover's "last seen" is the release

    def _reserved(self, e: ev.MessagesClaimed) -> None:
        m = e.message
        iv = self._open.get((m.group_id, m.topic, m.partition))
        end = m.offset
        if iv is None:
            self._group(m.group_id).amo = True
            return
        if iv.reserved_offset is None:
            self._group(m.group_id).amo = True
        if iv.reserve_start is None:
            iv.reserve_start = e.start
        iv.last_batch_start = e.start
        if e.start is None or e.start < end:  # (a write made again that landed twice: none)
            iv.at_risk = (*iv.at_risk, e.start)[-AT_RISK_RESERVATIONS:]
        iv.reserved_offset, iv.reserved_ms = end, e.log_time
        if not iv.member and self._reported(m.group_id, e.log_time):
            count = None if e.start is None else end - e.start
            self.rows["reservations"].append(
                (m.group_id, m.topic, m.partition, m.client_id, m.instance_id, e.token,
                 e.log_time, e.start, end, count)
            )  # fmt: skip

    def _poison(self, e: rf.PoisonNoted | rf.PoisonCleared) -> None:
        """A counted failure, a parking, or an operator's retry or skip: a ``poison`` row."""
        m, state = e.message, e.state
        if not self._reported(m.group_id, e.log_time):
            return
        if isinstance(e, rf.PoisonNoted):
            action = "parked" if state.parked else "failed"
        else:
            action = "skipped" if state.skipped else "retried"
        self.rows["poison"].append(
            (m.group_id, m.topic, m.partition, state.offset, e.log_time, e.coord_partition,
             e.coord_offset, m.client_id, m.instance_id, action, state.failures, state.error)
        )  # fmt: skip

    # ---- rows -------------------------------------------------------------------------------

    def _close(self, iv: _Interval, ended: str | None, end_ms: int | None, by: str | None) -> None:
        key = iv.key
        if not self.window.wants_span(iv.start_ms, end_ms):
            return
        row = (
            key.group, key.topic, key.partition, iv.client_id, iv.instance_id, iv.token,
            iv.coord_partition, iv.start_ms, end_ms, ended, by, iv.last_heartbeat_ms,
            iv.heartbeats, iv.first_offset, iv.last_offset, iv.reserved_offset, iv.by_admin,
        )  # fmt: skip
        if is_member_key(key):
            self.rows["membership"].append(row)
            return
        self._lost(iv, ended, end_ms, by)
        self._group(key.group).claims += 1
        self.rows["claims"].append(row)
        mean = iv.gap_sum_ms / iv.heartbeats if iv.heartbeats else None
        self.rows["heartbeat_gaps"].append(
            (key.group, key.topic, key.partition, iv.client_id, iv.instance_id, iv.token,
             iv.start_ms, iv.heartbeats, iv.max_gap_ms if iv.heartbeats else None,
             iv.max_gap_at_ms, mean, iv.gaps_over)
        )  # fmt: skip

    def _lost(self, iv: _Interval, ended: str | None, end_ms: int | None, by: str | None) -> None:
        """An interval that reserved (AMO): an ``amo_reserved`` row, for `amo`'s losses."""
        if iv.by_admin or iv.reserved_offset is None:
            return
        if ended == "released":
            pause = self._pauses.get(iv.key.group)
            if pause is not None and end_ms is not None and end_ms < pause[1]:
                ended = "released_under_pause"
        elif ended == "taken_over" and iv.refused is not None:
            ended = "refused"
        reserved = _Reserved(iv, ended, end_ms, by)
        self._amo.append(reserved)
        if ended == "taken_over":
            self._taken_over[(iv.key, iv.client_id, iv.instance_id)] = reserved

    def _failover(self, kind: str, old: _Interval, last_seen: int, e: ev.ClaimGranted) -> None:
        if not self.window.wants_time(e.log_time):
            return
        key = e.key
        self.rows["failovers"].append(
            (key.group, key.topic, key.partition, kind, old.client_id, old.instance_id,
             old.token, last_seen, e.client_id, e.instance_id, e.token, e.log_time,
             e.log_time - last_seen)
        )  # fmt: skip

    def _failover_unverified(self, e: ev.ClaimGranted) -> None:
        assert e.previous_last_heartbeat is not None
        if not self.window.wants_time(e.log_time):
            return
        key, last_seen = e.key, e.previous_last_heartbeat
        self.rows["failovers"].append(
            (key.group, key.topic, key.partition, "failover", e.previous_client, None, None,
             last_seen, e.client_id, e.instance_id, e.token, e.log_time, e.log_time - last_seen)
        )  # fmt: skip

    def finish(self) -> None:
        """End of the partition: emit open intervals (``ended`` null) and the summaries."""
        for iv in self._open.values():
            self._close(iv, OPEN, None, None)
        self._open.clear()
        self.rows["amo_reserved"].extend(r.row() for r in self._amo)
        self._amo.clear()
        self._taken_over.clear()
        for group, part in sorted(self._groups.items()):
            self.rows["groups"].append(
                (group, "amo" if part.amo else "alo", len(part.partitions), len(part.members),
                 part.claims, part.failovers, part.handovers, part.pauses)
            )  # fmt: skip
            keys = sorted(part.partitions | part.members)
            self.rows["group_keys"].extend((group, k.topic, k.partition) for k in keys)
        first, last = self._first, self._last
        verdicts = {kind.__name__: n for kind, n in self._verdicts.items()}
        gap = self._gap_seen if self.log_gap is None else self.log_gap
        if first is not None and last is not None:
            self.rows["coordination"].append(
                (self.coord_partition, self._records, first.coord_offset, last.coord_offset,
                 first.log_time, last.log_time, self._malformed, self._unverified,
                 gap, json.dumps(verdicts, sort_keys=True))
            )  # fmt: skip

    def take(self) -> dict[str, list[Row]]:
        """The rows built so far, handed over and forgotten (to stream them out in batches)."""
        out = {name: rows for name, rows in self.rows.items() if rows}
        for name in out:
            self.rows[name] = []
        return out

    def pending(self) -> int:
        """How many rows wait to be taken."""
        return sum(len(rows) for rows in self.rows.values())


_HANDLERS: dict[type, Callable[[Tables, Any], None]] = {
    ev.HeartbeatAccepted: Tables._heartbeat,
    ev.MessagesClaimed: Tables._reserved,
    ev.ClaimGranted: Tables._granted,
    ev.Released: Tables._released,
    ev.MessagesRejected: Tables._rejected_reservation,
    ev.GroupPaused: Tables._paused,
    ev.Unverified: Tables._unverified_record,
    ev.HeartbeatRejected: Tables._refused,
    ev.ReleaseRejected: Tables._refused,
    rf.PoisonNoted: Tables._poison,
    rf.PoisonCleared: Tables._poison,
}
