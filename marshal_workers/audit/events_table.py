"""One row of the ``events`` table per folded record: what the rationalizer decided about it.

The row is a tuple in the column order of ``schema.TABLES["events"]``. It is built on the
audit's hot path (once per coordination record), so it dispatches on the event's exact type
through a table rather than a chain of isinstance checks. Every concrete event class the
fold can emit has its builder named in `ROW_BUILDERS` (a test holds it to the event classes),
so a new kind of event is a missing key, not a row built for another shape of event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from marshal_workers.protocol import events as ev
from marshal_workers.protocol import recordfailures as rf
from marshal_workers.protocol.wire import ClaimingPartition, ReleaseGroup, message_type

Row = tuple[Any, ...]


def _token(e: ev.Event) -> int | None:
    token = getattr(e, "token", None)
    return token if isinstance(token, int) else None


def _reason(e: ev.Event) -> str | None:
    reason = getattr(e, "reason", None)
    return reason if isinstance(reason, str) else None


def _malformed(e: ev.Event) -> Row:
    assert isinstance(e, ev.Malformed)
    return (e.coord_partition, e.coord_offset, e.log_time, "Malformed", e.reason,
            None, None, None, None, None, None, None, None, None)  # fmt: skip


def _verdict(e: ev.Event) -> Row:
    assert isinstance(e, ev.Verdict)
    m = e.message
    if isinstance(m, ReleaseGroup):
        until = e.until_ms if isinstance(e, ev.GroupPaused) else m.expire_time * 1000
        return (e.coord_partition, e.coord_offset, e.log_time, type(e).__name__, _reason(e),
                "ReleaseGroup", m.group_id, None, None, m.client_id, m.instance_id, None, None,
                until)  # fmt: skip
    offset = None if isinstance(m, ClaimingPartition) else m.offset
    return (e.coord_partition, e.coord_offset, e.log_time, type(e).__name__, _reason(e),
            message_type(m).value, m.group_id, m.topic, m.partition, m.client_id, m.instance_id,
            offset, _token(e), None)  # fmt: skip


def _heartbeat_accepted(e: ev.Event) -> Row:
    """The most common event, built without the generic lookups."""
    assert type(e) is ev.HeartbeatAccepted
    m = e.message
    return (e.coord_partition, e.coord_offset, e.log_time, "HeartbeatAccepted", None,
            "Heartbeat", m.group_id, m.topic, m.partition, m.client_id, m.instance_id,
            m.offset, e.token, None)  # fmt: skip


def _messages_claimed(e: ev.Event) -> Row:
    assert type(e) is ev.MessagesClaimed
    m = e.message
    return (e.coord_partition, e.coord_offset, e.log_time, "MessagesClaimed", None,
            "ClaimingMessages", m.group_id, m.topic, m.partition, m.client_id, m.instance_id,
            m.offset, e.token, None)  # fmt: skip


def _metadata(e: ev.Event) -> Row:
    """A metadata record (the topic's partition count, a group's settings): no claim."""
    if isinstance(e, ev.GroupSettingsRecorded):
        s = e.settings
        return (e.coord_partition, e.coord_offset, e.log_time, "GroupSettingsRecorded", None,
                "GroupSettings", s.group_id, None, None, s.client_id, s.instance_id, None, None,
                None)  # fmt: skip
    assert isinstance(e, ev.TopicRecorded)
    r = e.record
    return (e.coord_partition, e.coord_offset, e.log_time, "TopicRecorded", None,
            "CoordinationTopic", None, None, None, r.client_id, r.instance_id, None, None,
            None)  # fmt: skip


def _poison(e: ev.Event) -> Row:
    """A poison record (`recordfailures`): its data offset is the failing record's."""
    assert isinstance(e, rf.PoisonVerdict)
    m = e.message
    kind = "RecordFailed" if isinstance(m, rf.RecordFailed) else "PoisonResolved"
    return (e.coord_partition, e.coord_offset, e.log_time, type(e).__name__, _reason(e),
            kind, m.group_id, m.topic, m.partition, m.client_id, m.instance_id, m.offset,
            None, None)  # fmt: skip


ROW_BUILDERS: Final[dict[type, Callable[[ev.Event], Row]]] = {
    ev.Malformed: _malformed,
    ev.TopicRecorded: _metadata,
    ev.GroupSettingsRecorded: _metadata,
    ev.HeartbeatAccepted: _heartbeat_accepted,
    ev.MessagesClaimed: _messages_claimed,
    ev.ClaimGranted: _verdict,
    ev.ClaimRejected: _verdict,
    ev.HeartbeatRejected: _verdict,
    ev.Released: _verdict,
    ev.ReleaseRejected: _verdict,
    ev.MessagesRejected: _verdict,
    ev.GroupPaused: _verdict,
    ev.GroupPauseRejected: _verdict,
    ev.Unverified: _verdict,
    rf.PoisonNoted: _poison,
    rf.PoisonCleared: _poison,
    rf.PoisonRejected: _poison,
}


def event_row(event: ev.Event) -> Row:
    """The ``events`` row of one event (KeyError: an event class the audit does not know)."""
    return ROW_BUILDERS[type(event)](event)
