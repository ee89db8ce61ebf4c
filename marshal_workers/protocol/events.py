"""What the rationalizer decided about each record: one event per folded record.

The supervisor, the admin commands and the audit pipeline all consume these. Every event
carries where the record stands (coordination partition and offset) and its log time, so a
writer can find the verdict on its own record. A verdict holds the decoded message; who sent
it and which claim it is about are read from the message (`client_id`, `instance_id`, `key`).
"""

from __future__ import annotations

from dataclasses import dataclass

from marshal_workers.protocol.fastinit import fast_init
from marshal_workers.protocol.metadata import GroupSettings, TopicRecord
from marshal_workers.protocol.wire import (
    ClaimingMessages,
    ClaimingPartition,
    ClaimKey,
    Heartbeat,
    Message,
    PartitionMessage,
    ReleaseGroup,
    ReleasingPartition,
    claim_key,
)


@fast_init
@dataclass(frozen=True, slots=True)
class Event:
    """Where the record that produced this event stands, and its (clamped) log time in ms."""

    coord_partition: int
    coord_offset: int
    log_time: int


@fast_init
@dataclass(frozen=True, slots=True)
class Malformed(Event):
    """The record is not a valid message, or not where it belongs: counted and skipped.

    ``keyless_group`` is the group a valid Marshal message *without a record key* names: what
    a Marshal Go writer produces (Go writes no key), else None (see `gofleet`)."""

    reason: str
    keyless_group: str | None


@fast_init
@dataclass(frozen=True, slots=True)
class OtherGroup(Event):
    """A record whose key names another group than the one a reader folds (a member,
    `status --group`: `RationalizerConfig.only_group`): counted, neither decoded nor kept."""


@fast_init
@dataclass(frozen=True, slots=True)
class Verdict(Event):
    """A decoded message and who sent it."""

    message: Message

    @property
    def client_id(self) -> str:
        """The sender's client id."""
        return self.message.client_id

    @property
    def instance_id(self) -> str:
        """The sender's instance id."""
        return self.message.instance_id


@fast_init
@dataclass(frozen=True, slots=True)
class ClaimVerdict(Verdict):
    """A verdict on a message about one claim."""

    message: PartitionMessage

    @property
    def key(self) -> ClaimKey:
        """The claim the message is about."""
        return claim_key(self.message)


@fast_init
@dataclass(frozen=True, slots=True)
class ClaimGranted(ClaimVerdict):
    """The sender holds the claim from now; ``token`` (this record's offset) fences older owners."""

    message: ClaimingPartition
    token: int
    previous_client: str | None
    previous_last_heartbeat: int | None


@fast_init
@dataclass(frozen=True, slots=True)
class ClaimRejected(ClaimVerdict):
    """The claim lost: the partition is held, the group is paused, or its history is unsure."""

    message: ClaimingPartition
    reason: str
    holder_client: str | None


@fast_init
@dataclass(frozen=True, slots=True)
class HeartbeatAccepted(ClaimVerdict):
    """The holder is alive with ``offset``; ``replaced_instance`` is set if it took over."""

    message: Heartbeat
    token: int
    replaced_instance: str | None

    @property
    def offset(self) -> int:
        """The committed position the heartbeat carries."""
        return self.message.offset


@fast_init
@dataclass(frozen=True, slots=True)
class HeartbeatRejected(ClaimVerdict):
    """A heartbeat that changes nothing: not the holder, a replaced instance, or a stale claim."""

    message: Heartbeat
    reason: str


@fast_init
@dataclass(frozen=True, slots=True)
class Released(ClaimVerdict):
    """The holder released the claim; the next owner starts at ``offset``."""

    message: ReleasingPartition
    token: int

    @property
    def offset(self) -> int:
        """Where the next owner starts."""
        return self.message.offset


@fast_init
@dataclass(frozen=True, slots=True)
class ReleaseRejected(ClaimVerdict):
    """A release that changes nothing (not from the current holder instance)."""

    message: ReleasingPartition
    reason: str


@fast_init
@dataclass(frozen=True, slots=True)
class MessagesClaimed(ClaimVerdict):
    """At-most-once: the holder reserved offsets ``start`` (inclusive) to ``end`` (exclusive)."""

    message: ClaimingMessages
    start: int | None
    token: int

    @property
    def end(self) -> int:
        """The first offset not reserved."""
        return self.message.offset


@fast_init
@dataclass(frozen=True, slots=True)
class MessagesRejected(ClaimVerdict):
    """A reservation that changes nothing (not the holder, stale, or behind the position)."""

    message: ClaimingMessages
    reason: str


@fast_init
@dataclass(frozen=True, slots=True)
class GroupVerdict(Verdict):
    """A verdict on a ReleaseGroup."""

    message: ReleaseGroup

    @property
    def group(self) -> str:
        """The group the message is about."""
        return self.message.group_id


@fast_init
@dataclass(frozen=True, slots=True)
class GroupPaused(GroupVerdict):
    """The group is paused until ``until_ms`` (log time); a past time lifts the pause."""

    until_ms: int


@fast_init
@dataclass(frozen=True, slots=True)
class GroupPauseRejected(GroupVerdict):
    """A ReleaseGroup from a client that is not an admin."""

    reason: str


@fast_init
@dataclass(frozen=True, slots=True)
class Unverified(ClaimVerdict):
    """A record about a claim whose earlier history was compacted away: counted as activity only."""


@fast_init
@dataclass(frozen=True, slots=True)
class TopicRecorded(Event):
    """The coordination topic's partition count, as `marshal-admin init` recorded it."""

    record: TopicRecord


@fast_init
@dataclass(frozen=True, slots=True)
class GroupSettingsRecorded(Event):
    """The settings every member and admin of a group must share (the newest record wins)."""

    settings: GroupSettings

    @property
    def group(self) -> str:
        """The group the settings are for."""
        return self.settings.group_id
