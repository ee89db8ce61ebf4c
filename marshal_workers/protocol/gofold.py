"""A Marshal Go fleet's coordination log, folded as the Go implementation folds it (pure).

This is for *migrating from* a Go fleet (dropbox/marshal), never for sharing a topic with one:
Go writes its records without a Kafka key (a compacted topic refuses them), judges claims on
the senders' clocks, and accepts any heartbeat. `marshal-admin status --go-topic` and
`dump --go-topic` show what the Go fleet believes, and `marshal-admin import-go` seeds a
group's positions from it. The rules follow marshal/rationalizer.go and marshal/topic.go:

- Heartbeat: whoever sends it becomes the holder; its offset becomes the position and its
  UnixSec the last heartbeat (Go checks nothing: "we can only assume it's valid").
- ClaimingPartition: granted unless the claim is held and not stale, judged at the claim's own
  UnixSec (a Go reader judges it at its wall clock when it folds it, about then). Held means
  ``0 <= now - LastHeartbeat < 2*HB``; a heartbeat from the future does not hold.
- ReleasingPartition: only from the holder (client, group and instance); records the offset and
  clears the heartbeat.
- ClaimingMessages: ignored (Go never implemented it). Go has no ReleaseGroup.

Offsets are the next offset to read in both implementations (Go heartbeats ``offset + 1`` of
the last record it processed), so a Go position is our position as it is. Decisions use the
message's UnixSec, never the record's Kafka timestamp; records need no key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from marshal_workers.protocol.rationalizer import ClaimState, RationalizerConfig, World
from marshal_workers.protocol.wire import (
    ClaimingMessages,
    ClaimingPartition,
    ClaimKey,
    CoordRecord,
    DecodeError,
    Heartbeat,
    ReleaseGroup,
    ReleasingPartition,
    claim_key,
    decode,
)

GO_HEARTBEAT_INTERVAL_S = 60  # marshal.HeartbeatInterval, a constant of the Go library


@dataclass(slots=True)
class GoClaim:
    """What a Go reader knows about one claim (marshal.PartitionClaim)."""

    client_id: str = ""
    instance_id: str = ""
    last_heartbeat_s: int = 0  # 0: not claimed (released, or never)
    last_release_s: int = 0
    current_offset: int = 0

    @property
    def held(self) -> bool:
        """Whether the last word was a claim or heartbeat (not a release)."""
        return self.last_heartbeat_s != 0


@dataclass(slots=True)
class GoWorld:
    """Every claim of one Go coordination topic (Go keeps one state for all partitions)."""

    heartbeat_interval_s: int = GO_HEARTBEAT_INTERVAL_S
    claims: dict[ClaimKey, GoClaim] = field(default_factory=dict)
    malformed: int = 0
    records: int = 0


@dataclass(frozen=True, slots=True)
class GoVerdict:
    """What a Go reader did with one record: ``applied``, or why not."""

    record: CoordRecord
    applied: bool
    what: str


def claimed_at(claim: GoClaim, now_s: int, hb_s: int) -> bool:
    """marshal.PartitionClaim.claimed: held, and 0 <= now - last heartbeat < 2*HB."""
    if claim.last_heartbeat_s == 0:
        return False
    delta = now_s - claim.last_heartbeat_s
    return 0 <= delta < 2 * hb_s


def fold_go(world: GoWorld, record: CoordRecord) -> GoVerdict:
    """Apply one record of the Go fleet's topic as a Go reader would; say what it did."""
    world.records += 1
    try:
        msg = decode(record.value)
    except DecodeError as exc:
        world.malformed += 1
        return GoVerdict(record, False, f"malformed: {exc}")
    if isinstance(msg, ReleaseGroup):
        world.malformed += 1
        return GoVerdict(record, False, "malformed: Marshal Go has no ReleaseGroup")
    key = claim_key(msg)
    claim = world.claims.setdefault(key, GoClaim())
    if isinstance(msg, Heartbeat):
        claim.client_id, claim.instance_id = msg.client_id, msg.instance_id
        claim.current_offset, claim.last_heartbeat_s = msg.offset, msg.unix_sec
        claim.last_release_s = 0
        return GoVerdict(record, True, f"heartbeat: {msg.client_id} at {msg.offset}")
    if isinstance(msg, ClaimingPartition):
        if claimed_at(claim, msg.unix_sec, world.heartbeat_interval_s):
            return GoVerdict(record, False, f"claim ignored: held by {claim.client_id}")
        claim.client_id, claim.instance_id = msg.client_id, msg.instance_id
        claim.last_heartbeat_s, claim.last_release_s = msg.unix_sec, 0
        return GoVerdict(record, True, f"claimed by {msg.client_id}")
    if isinstance(msg, ReleasingPartition):
        if (claim.client_id, claim.instance_id) != (msg.client_id, msg.instance_id):
            return GoVerdict(record, False, f"release dropped: {msg.client_id} is not the owner")
        claim.current_offset, claim.last_heartbeat_s = msg.offset, 0
        claim.last_release_s = msg.unix_sec
        return GoVerdict(record, True, f"released by {msg.client_id} at {msg.offset}")
    assert isinstance(msg, ClaimingMessages)
    return GoVerdict(record, False, "ignored: Marshal Go does not implement ClaimingMessages")


def fold_all(records: Iterable[CoordRecord], hb_s: int = GO_HEARTBEAT_INTERVAL_S) -> GoWorld:
    """A fresh GoWorld with every record folded (each partition in offset order)."""
    world = GoWorld(hb_s)
    for record in records:
        fold_go(world, record)
    return world


def positions(world: GoWorld, group: str) -> dict[str, dict[int, int]]:
    """{topic: {partition: position}} of ``group``: where the Go fleet would resume."""
    out: dict[str, dict[int, int]] = {}
    for key, claim in sorted(world.claims.items()):
        if key.group == group:
            out.setdefault(key.topic, {})[key.partition] = claim.current_offset
    return out


def live_claims(world: GoWorld, group: str, now_s: int) -> dict[ClaimKey, GoClaim]:
    """The claims of ``group`` a Go reader would call held at ``now_s`` (wall clock)."""
    return {
        key: claim
        for key, claim in world.claims.items()
        if key.group == group and claimed_at(claim, now_s, world.heartbeat_interval_s)
    }


def as_worlds(world: GoWorld) -> Mapping[int, World]:
    """The Go state as one of our worlds, for `groupstatus.group_status` (shown, never decided on):
    a held claim's last heartbeat is its UnixSec in ms; a released one is released."""
    ours = World(RationalizerConfig(world.heartbeat_interval_s * 1000), 0)
    ours.malformed = world.malformed
    for key, claim in world.claims.items():
        held = claim.held
        ours.claims[key] = ClaimState(
            certain=True,
            holder_client=claim.client_id if held else None,
            holder_instance=claim.instance_id if held else None,
            last_heartbeat=claim.last_heartbeat_s * 1000 if held else None,
            committed=claim.current_offset,
            released=not held and claim.last_release_s != 0,
            last_activity=max(claim.last_heartbeat_s, claim.last_release_s) * 1000,
        )
    return {0: ours}
