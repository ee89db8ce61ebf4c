"""The Marshal coordination messages and their version-1 text wire format.

Pure: no I/O, no clock. The text is byte for byte the Go implementation's (dropbox/marshal,
marshal/message.go), but the two can NOT share a coordination topic: Go writes its records
without a Kafka key (a compacted topic refuses them, and our fold counts them malformed),
decides on the senders' clocks, and accepts any heartbeat, so a mixed fleet claims partitions
twice. Go fleets are migrated from (`gofold`, ``marshal-admin import-go``), and a member that
sees keyless records of its own group refuses to run (`gofleet`)::

    Heartbeat/1/UnixSec/InstanceID/ClientID/GroupID/Topic/Partition/Offset
    ClaimingPartition/1/UnixSec/InstanceID/ClientID/GroupID/Topic/Partition
    ReleasingPartition/1/UnixSec/InstanceID/ClientID/GroupID/Topic/Partition/Offset
    ClaimingMessages/1/UnixSec/InstanceID/ClientID/GroupID/Topic/Partition/Offset
    ReleaseGroup/1/UnixSec/InstanceID/ClientID/GroupID/Topic/Partition/MsgExpireTime

There is no escaping, so no field may contain ``/``; names are refused at configuration time
(`validate_name`) and on decode. ``UnixSec`` is the sender's clock: it is carried for humans and
never used for a decision (the rationalizer uses the record's log time). Offsets are Kafka's
"next offset to read" (Go's too). ``MsgExpireTime`` is in Unix seconds; Go has no ReleaseGroup.

Anyone with Write on the coordination topic can append anything, so every field is bounded on
decode, and a record outside the bounds is malformed (counted and skipped by every reader, never
an exception): an ID or group at most `MAX_NAME_CHARS` characters, a topic field at most
`MAX_TOPIC_CHARS` (a Kafka topic, a slice's or a member's pseudo-topic), a partition within
Kafka's 32 bits, an offset within its 64, and times (``UnixSec``, ``MsgExpireTime``) no later
than `MAX_UNIX_SEC`, the last second a date can show, so that every reader can show them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, NamedTuple

from marshal_workers.protocol.fastinit import fast_init

VERSION: Final = 1
MAX_UNIX_SEC: Final = 253_402_300_799  # 9999-12-31T23:59:59Z: the last second a date can show
MAX_LOG_TIME_MS: Final = MAX_UNIX_SEC * 1000 + 999
MAX_PARTITION: Final = 2**31 - 1  # Kafka's partitions are 32-bit
MAX_OFFSET: Final = 2**63 - 1  # Kafka's offsets are 64-bit
MAX_NAME_CHARS: Final = 255  # an instance id, a client id, a group
MAX_TOPIC_CHARS: Final = 300  # a Kafka topic (249), or a slice's or a member's pseudo-topic
_INT_DIGITS: Final = 19  # MAX_OFFSET's: a longer field is out of range before int() reads it


class DecodeError(ValueError):
    """A coordination record that is not a valid version-1 Marshal message."""


class ClaimKey(NamedTuple):
    """What a claim is on: a consumer group's topic-partition."""

    group: str
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.group}/{self.topic}/{self.partition}"


@fast_init
@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The holder is alive and has consumed up to ``offset`` (next offset to read)."""

    unix_sec: int
    instance_id: str
    client_id: str
    group_id: str
    topic: str
    partition: int
    offset: int


@fast_init
@dataclass(frozen=True, slots=True)
class ClaimingPartition:
    """A client wants the partition; the first valid claim in log order wins."""

    unix_sec: int
    instance_id: str
    client_id: str
    group_id: str
    topic: str
    partition: int


@fast_init
@dataclass(frozen=True, slots=True)
class ReleasingPartition:
    """The holder gives the partition up; ``offset`` is where the next owner starts."""

    unix_sec: int
    instance_id: str
    client_id: str
    group_id: str
    topic: str
    partition: int
    offset: int


@fast_init
@dataclass(frozen=True, slots=True)
class ClaimingMessages:
    """At-most-once: the holder reserves the messages below ``offset`` before handling them."""

    unix_sec: int
    instance_id: str
    client_id: str
    group_id: str
    topic: str
    partition: int
    offset: int


@fast_init
@dataclass(frozen=True, slots=True)
class ReleaseGroup:
    """An admin pauses the whole group until ``expire_time`` (Unix seconds, log time)."""

    unix_sec: int
    instance_id: str
    client_id: str
    group_id: str
    topic: str
    partition: int
    expire_time: int


PartitionMessage = Heartbeat | ClaimingPartition | ReleasingPartition | ClaimingMessages
Message = PartitionMessage | ReleaseGroup


class MessageType(StrEnum):
    """The type names as they stand first on the wire."""

    HEARTBEAT = "Heartbeat"
    CLAIMING_PARTITION = "ClaimingPartition"
    RELEASING_PARTITION = "ReleasingPartition"
    CLAIMING_MESSAGES = "ClaimingMessages"
    RELEASE_GROUP = "ReleaseGroup"


_TYPE_OF: Final[dict[type, MessageType]] = {
    Heartbeat: MessageType.HEARTBEAT,
    ClaimingPartition: MessageType.CLAIMING_PARTITION,
    ReleasingPartition: MessageType.RELEASING_PARTITION,
    ClaimingMessages: MessageType.CLAIMING_MESSAGES,
    ReleaseGroup: MessageType.RELEASE_GROUP,
}
_WithLast = Heartbeat | ReleasingPartition | ClaimingMessages | ReleaseGroup
_CLASS_OF: Final[dict[MessageType, type[_WithLast]]] = {
    MessageType.HEARTBEAT: Heartbeat,
    MessageType.RELEASING_PARTITION: ReleasingPartition,
    MessageType.CLAIMING_MESSAGES: ClaimingMessages,
    MessageType.RELEASE_GROUP: ReleaseGroup,
}
_BASE_FIELDS: Final = 8  # Type/Version/UnixSec/InstanceID/ClientID/GroupID/Topic/Partition


def message_type(msg: Message) -> MessageType:
    """The wire type name of a message."""
    return _TYPE_OF[type(msg)]


def claim_key(msg: Message) -> ClaimKey:
    """The claim a partition message is about.

    A ReleaseGroup is about no claim: its key is built from its (unused) topic and partition
    fields, which is only good for choosing a coordination partition.
    """
    return ClaimKey(msg.group_id, msg.topic, msg.partition)


CLAIM_KEY_SUFFIX: Final = b"/claim"


def record_key(msg: Message) -> bytes:
    """The Kafka record key: ``group/topic/partition`` for the records that carry a claim's
    position (heartbeats, releases, reservations), the same plus ``/claim`` for a claim, and
    ``group/pause/expire_time/instance/unix_sec`` for a ReleaseGroup (`pause_key`).

    Compaction keeps the newest record per key. Claims are keyed apart so that the newest
    record carrying a position always survives the cleaner, whatever claim (refused, or never
    followed by a heartbeat) was written after it (docs/design.md, "positions survive the
    cleaner"). The text value is Go's format byte for byte; only the key is ours. Before the
    split, claims shared the claim's key (`legacy_claim_key`): the fold still reads them.
    """
    if isinstance(msg, ReleaseGroup):
        return pause_key(msg)
    key = f"{msg.group_id}/{msg.topic}/{msg.partition}".encode()
    return key + CLAIM_KEY_SUFFIX if type(msg) is ClaimingPartition else key


def pause_key(msg: ReleaseGroup) -> bytes:
    """A pause's key: the group, its end and its writer (instance and wall second), so that
    neither its lift (a pause ending now) nor another pause with the same end (a second
    `release-group` run with one `--until`) supersedes it, and every reader sees the pause in
    force at the log time of each record written under it. Before, pauses were keyed by the
    group alone, then by group and end (`legacy_pause_keys`): the fold still reads those."""
    return f"{msg.group_id}/pause/{msg.expire_time}/{msg.instance_id}/{msg.unix_sec}".encode()


def legacy_pause_keys(msg: ReleaseGroup) -> tuple[bytes, bytes]:
    """The keys a pause had before `pause_key` named its writer: the group, and group/end."""
    return msg.group_id.encode(), f"{msg.group_id}/pause/{msg.expire_time}".encode()


def legacy_claim_key(msg: ClaimingPartition) -> bytes:
    """The key a claim had before claims were keyed apart (`record_key`)."""
    return f"{msg.group_id}/{msg.topic}/{msg.partition}".encode()


def validate_name(what: str, value: str, limit: int = MAX_NAME_CHARS) -> str:
    """Check an ID, group or topic for the wire format (at most ``limit`` characters); return
    it or raise ValueError."""
    if not value:
        raise ValueError(f"{what} must not be empty")
    if len(value) > limit:
        raise ValueError(f"{what} {value[:24]!r}... is longer than {limit} characters")
    if "/" in value:
        raise ValueError(f"{what} {value[:40]!r} contains '/', which the wire format cannot carry")
    if not value.isprintable() or any(c.isspace() for c in value):
        raise ValueError(f"{what} {value[:40]!r} contains whitespace or unprintable characters")
    return value


def encode(msg: Message) -> bytes:
    """The version-1 text form of a message."""
    base = (
        f"{message_type(msg)}/{VERSION}/{msg.unix_sec}/{msg.instance_id}/{msg.client_id}/"
        f"{msg.group_id}/{msg.topic}/{msg.partition}"
    )
    if isinstance(msg, ClaimingPartition):
        return base.encode()
    if isinstance(msg, ReleaseGroup):
        return f"{base}/{msg.expire_time}".encode()
    return f"{base}/{msg.offset}".encode()


def _int(field: str, text: str, maximum: int) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > _INT_DIGITS:
        raise DecodeError(f"{field} {text[:24]!r} is not a non-negative integer of 64 bits")
    value = int(text)
    if value > maximum:
        raise DecodeError(f"{field} {text!r} is out of range (at most {maximum})")
    return value


def _name(field: str, text: str, *, may_be_empty: bool = False, limit: int = MAX_NAME_CHARS) -> str:
    if not text:
        if may_be_empty:
            return text
        raise DecodeError(f"{field} is empty")
    try:
        return validate_name(field, text, limit)
    except ValueError as exc:
        raise DecodeError(str(exc)) from None


_VISIBLE_ASCII = bytes(range(0x21, 0x7F))  # printable ASCII but space
_FAST_CLASS: Final[dict[bytes, type[Message]]] = {t.value.encode(): c for c, t in _TYPE_OF.items()}


def decode(value: bytes | None) -> Message:
    """Parse a version-1 message, strictly. Raises DecodeError saying what is wrong."""
    if value is None:
        raise DecodeError("record has no value")
    # The fast path takes well-formed ASCII records; anything else gets the slow path's checks
    # (which find the same records valid, and say exactly what is wrong with the others).
    if not value.translate(None, _VISIBLE_ASCII):
        parts = value.split(b"/")
        cls = _FAST_CLASS.get(parts[0])
        n = len(parts)
        if cls is not None and n == (8 if cls is ClaimingPartition else 9) and parts[1] == b"1":
            sec, inst, client, group, topic, part = parts[2:8]
            last = parts[8] if n == 9 else b"0"
            if (
                0 < len(sec) <= _INT_DIGITS
                and 0 < len(part) <= _INT_DIGITS
                and 0 < len(last) <= _INT_DIGITS
                and sec.isdigit()
                and part.isdigit()
                and last.isdigit()
                and 0 < len(inst) <= MAX_NAME_CHARS
                and 0 < len(client) <= MAX_NAME_CHARS
                and 0 < len(group) <= MAX_NAME_CHARS
                and (topic or cls is ReleaseGroup)
                and len(topic) <= MAX_TOPIC_CHARS
            ):
                s_, p_, l_ = int(sec), int(part), int(last)
                last_max = MAX_UNIX_SEC if cls is ReleaseGroup else MAX_OFFSET
                if s_ <= MAX_UNIX_SEC and p_ <= MAX_PARTITION and l_ <= last_max:
                    if n == 8:
                        return ClaimingPartition(
                            s_, inst.decode(), client.decode(), group.decode(), topic.decode(), p_
                        )
                    return cls(  # type: ignore[call-arg]
                        s_, inst.decode(), client.decode(), group.decode(), topic.decode(), p_, l_
                    )
    return _decode_strictly(value)


def _decode_strictly(value: bytes) -> Message:
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"value is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    parts = text.split("/")
    try:
        kind = MessageType(parts[0])
    except ValueError:
        raise DecodeError(f"unknown message type {parts[0][:40]!r}") from None
    expected = _BASE_FIELDS if kind is MessageType.CLAIMING_PARTITION else _BASE_FIELDS + 1
    if len(parts) != expected:
        raise DecodeError(f"{kind} needs {expected} '/'-separated fields, got {len(parts)}")
    if parts[1] != str(VERSION):
        raise DecodeError(f"unsupported version {parts[1][:20]!r} (this reader knows {VERSION})")
    unix_sec = _int("UnixSec", parts[2], MAX_UNIX_SEC)
    instance_id = _name("InstanceID", parts[3])
    client_id = _name("ClientID", parts[4])
    group_id = _name("GroupID", parts[5])
    is_group = kind is MessageType.RELEASE_GROUP
    topic = _name("Topic", parts[6], may_be_empty=is_group, limit=MAX_TOPIC_CHARS)
    partition = _int("Partition", parts[7], MAX_PARTITION)
    if kind is MessageType.CLAIMING_PARTITION:
        return ClaimingPartition(unix_sec, instance_id, client_id, group_id, topic, partition)
    if is_group:
        last = _int("MsgExpireTime", parts[8], MAX_UNIX_SEC)
    else:
        last = _int("Offset", parts[8], MAX_OFFSET)
    cls = _CLASS_OF[kind]
    return cls(unix_sec, instance_id, client_id, group_id, topic, partition, last)


class Partitioner(StrEnum):
    """How a claim's coordination partition is chosen."""

    SPEC = "spec"
    MARSHAL_GO = "marshal-go"


def md5_u64(text: str) -> int:
    """The first 8 bytes of md5(``text``), little-endian: every placement's hash."""
    return int.from_bytes(hashlib.md5(text.encode(), usedforsecurity=False).digest()[:8], "little")


def coordination_partition(
    topic: str, partition: int, num_partitions: int, partitioner: Partitioner = Partitioner.SPEC
) -> int:
    """The `__marshal` partition that coordinates a topic-partition.

    ``spec`` hashes topic and partition (so one topic's partitions spread over the coordination
    partitions); ``marshal-go`` hashes the topic only, as the Go implementation does: the first
    8 bytes of md5(topic), little-endian, modulo the partition count (a topic's partitions all
    land on one coordination partition: kept for fleets that know Go's layout, never to share
    a topic with Go).
    """
    if num_partitions < 1:
        raise ValueError("the coordination topic must have at least one partition")
    if partitioner is Partitioner.MARSHAL_GO:
        return md5_u64(topic) % num_partitions
    return md5_u64(f"{topic}/{partition}") % num_partitions


@fast_init
@dataclass(frozen=True, slots=True)
class CoordRecord:
    """One record of a coordination partition, as the log hands it to the fold.

    ``timestamp_ms`` is the log time: the broker's LogAppendTime, never the sender's clock.
    """

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Appended:
    """Where an acknowledged append landed, and its log time (ms)."""

    partition: int
    offset: int
    log_time: int
