"""Builders for hand-written coordination logs (pure; no broker)."""

from __future__ import annotations

from dataclasses import dataclass, field

from marshal_workers.protocol.metadata import decode_metadata
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.wire import (
    ClaimingMessages,
    ClaimingPartition,
    CoordRecord,
    DecodeError,
    Heartbeat,
    Message,
    ReleaseGroup,
    ReleasingPartition,
    decode,
    encode,
    record_key,
)

HB = 1000  # heartbeat interval in the tests, ms
GROUP = "g"
TOPIC = "orders"


def claim(client: str, part: int = 0, inst: str | None = None, topic: str = TOPIC) -> Message:
    """A ClaimingPartition by ``client`` (instance defaults to ``client``-1)."""
    return ClaimingPartition(0, inst or f"{client}-1", client, GROUP, topic, part)


def hb(
    client: str, offset: int, part: int = 0, inst: str | None = None, topic: str = TOPIC
) -> Message:
    """A Heartbeat by ``client`` with ``offset``."""
    return Heartbeat(0, inst or f"{client}-1", client, GROUP, topic, part, offset)


def release(
    client: str, offset: int, part: int = 0, inst: str | None = None, topic: str = TOPIC
) -> Message:
    """A ReleasingPartition by ``client`` at ``offset``."""
    return ReleasingPartition(0, inst or f"{client}-1", client, GROUP, topic, part, offset)


def reserve(
    client: str, offset: int, part: int = 0, inst: str | None = None, topic: str = TOPIC
) -> Message:
    """A ClaimingMessages by ``client`` up to ``offset``."""
    return ClaimingMessages(0, inst or f"{client}-1", client, GROUP, topic, part, offset)


def pause(client: str, until_sec: int) -> Message:
    """A ReleaseGroup by ``client`` until ``until_sec`` (Unix seconds)."""
    return ReleaseGroup(0, f"{client}-1", client, GROUP, "", 0, until_sec)


def record(msg: Message, offset: int, t: int, partition: int = 0) -> CoordRecord:
    """The coordination record of ``msg`` at ``offset`` with log time ``t`` ms."""
    return CoordRecord(partition, offset, t, record_key(msg), encode(msg))


@dataclass
class Log:
    """Folds messages one by one at chosen log times, keeping every event."""

    config: RationalizerConfig = field(default_factory=lambda: RationalizerConfig(HB))
    world: World = field(init=False)
    events: list[object] = field(default_factory=list)
    records: list[CoordRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.world = World(self.config, 0)

    def at(self, t: int, msg: Message) -> object:
        """Fold ``msg`` as the next record, at log time ``t``; return its event."""
        rec = record(msg, self.world.next_offset, t)
        self.records.append(rec)
        event = fold(self.world, rec)
        self.events.append(event)
        return event

    def raw(self, rec: CoordRecord) -> object:
        """Fold a raw record as given; return its event."""
        event = fold(self.world, rec)
        self.events.append(event)
        return event


def message_of(value: bytes | None) -> Message | None:
    """The protocol message of a coordination record's value, or None for a metadata record
    (`marshal-admin init`'s partition count, a group's settings); anything else raises."""
    try:
        return decode(value)
    except DecodeError:
        decode_metadata(value)
        return None
