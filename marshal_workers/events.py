"""What the rationalizer decided about each record: one event per folded record.

The supervisor, the admin commands and the audit pipeline all consume these. Every event
carries where the record stands (coordination partition and offset) and its log time, so a
writer can find the verdict on its own record.
"""

from __future__ import annotations

from dataclasses import dataclass

from marshal_workers.protocol import ClaimKey, Message


@dataclass(frozen=True, slots=True)
class Event:
    """Where the record that produced this event stands, and its (clamped) log time in ms."""

    coord_partition: int
    coord_offset: int
    log_time: int


@dataclass(frozen=True, slots=True)
class Malformed(Event):
    """The record is not a valid message, or not where it belongs: counted and skipped."""

    reason: str


@dataclass(frozen=True, slots=True)
class Verdict(Event):
    """A decoded message and who sent it."""

    message: Message
    client_id: str
    instance_id: str


@dataclass(frozen=True, slots=True)
class ClaimGranted(Verdict):
    """The sender holds ``key`` from now; ``token`` (this record's offset) fences older owners."""

    key: ClaimKey
    token: int
    previous_client: str | None
    previous_last_heartbeat: int | None


@dataclass(frozen=True, slots=True)
class ClaimRejected(Verdict):
    """The claim lost: the partition is held, the group is paused, or its history is unsure."""

    key: ClaimKey
    reason: str
    holder_client: str | None


@dataclass(frozen=True, slots=True)
class HeartbeatAccepted(Verdict):
    """The holder is alive with ``offset``; ``replaced_instance`` is set if it took over."""

    key: ClaimKey
    offset: int
    token: int
    replaced_instance: str | None


@dataclass(frozen=True, slots=True)
class HeartbeatRejected(Verdict):
    """A heartbeat that changes nothing: not the holder, a replaced instance, or a stale claim."""

    key: ClaimKey
    reason: str


@dataclass(frozen=True, slots=True)
class Released(Verdict):
    """The holder released ``key``; the next owner starts at ``offset``."""

    key: ClaimKey
    offset: int
    token: int


@dataclass(frozen=True, slots=True)
class ReleaseRejected(Verdict):
    """A release that changes nothing (not from the current holder instance)."""

    key: ClaimKey
    reason: str


@dataclass(frozen=True, slots=True)
class MessagesClaimed(Verdict):
    """At-most-once: the holder reserved offsets ``start`` (inclusive) to ``end`` (exclusive)."""

    key: ClaimKey
    start: int | None
    end: int
    token: int


@dataclass(frozen=True, slots=True)
class MessagesRejected(Verdict):
    """A reservation that changes nothing (not the holder, stale, or behind the position)."""

    key: ClaimKey
    reason: str


@dataclass(frozen=True, slots=True)
class GroupPaused(Verdict):
    """The group is paused until ``until_ms`` (log time); a past time lifts the pause."""

    group: str
    until_ms: int


@dataclass(frozen=True, slots=True)
class GroupPauseRejected(Verdict):
    """A ReleaseGroup from a client that is not an admin."""

    group: str
    reason: str


@dataclass(frozen=True, slots=True)
class Unverified(Verdict):
    """A record about a claim whose earlier history was compacted away: counted as activity only."""

    key: ClaimKey
