"""The rationalizer: folds one coordination partition into the world every reader agrees on.

Theory of operation
-------------------
``fold(world, record)`` applies one record of one `__marshal` partition, in offset order, and
returns one event saying what the record did. It does no I/O and reads no clock: every
decision uses the record's *log time* (the broker's LogAppendTime, clamped so that it never
goes backwards), so two readers of the same log reach the same world whatever their clocks.
For speed the world is updated in place; ``World.copy()`` takes a snapshot.

A claim on ``(group, topic, partition)`` is, at log time T, with HB the heartbeat interval and
``age = T - last_heartbeat``: *fresh* if age < HB, *unknown* if HB <= age <= 2*HB, *stale* if
age > 2*HB. The rules (an input that breaks a rule changes nothing but the event it yields):

1. ClaimingPartition wins if the claim is unclaimed, released, or stale at T, and the group is
   not paused (or the claimer is the client that paused it). The first valid claim in log order
   wins; the winning record's offset is the claim's fencing token (it only grows per claim,
   since offsets do). A win counts as the first heartbeat.
2. Heartbeat is valid only from the holder's client id while the claim is not stale at T. A
   heartbeat from a new instance of that client takes the claim over (restart recovery),
   retires the old instance, whose records are refused from then on, and gives the claim a new
   fencing token (the takeover record's offset), so a sink can refuse the old instance. The
   offset becomes the committed position, except that a takeover keeps the position the
   claim has: not back (the old instance may have committed more between the new one's read
   of the log and its takeover) and not forward (a start the new one looked up while the
   claim had none can lie past the old instance's first heartbeat). The pausing admin's
   takeover sets it outright.
3. ReleasingPartition from the holder instance releases the claim and records its offset.
4. ClaimingMessages from the holder instance, not stale, with offset >= max(committed,
   reserved), reserves the messages below that offset (at-most-once) and commits them: under
   at-most-once a reserved message counts as consumed, so the record is its own committing
   heartbeat (one record per reservation, not two) and every reader, compacted or not, sees
   committed and reserved move together. Reservations outlive owners: a new owner resumes at
   max(committed, reserved) in AMO mode.
5. ReleaseGroup pauses a group until MsgExpireTime (from an admin, when admins are configured).
   While paused, only the pausing client may claim, and its heartbeats and releases set the
   position outright (also below a reservation): that is how ``set-position`` rewinds.

Records that are not about a claim (`metadata`): the coordination topic's recorded partition
count (CoordinationTopic, on partition 0) and a group's shared settings (GroupSettings) are
kept in ``World.topic_record`` and ``World.group_settings`` and change no claim; the runtime
and the admin compare them with their own (a mismatch is refused there).

Placed groups
-------------
A group is *spread* (every group before placement: a claim's home is a hash of its topic and
partition over every partition) or *placed* (`placement`: its claims in a window of partitions,
its settings at its home). Where a group's record belongs on this partition is
`placement_on(world, group)`: the placement of the group's accepted settings here; else the
one this reader knows (`RationalizerConfig.placements`: a member's own group); else spread. A
claim, heartbeat, release, reservation or poison record whose home by that placement is not
this partition is malformed, as a spread record off its home always was.

Spread settings records share one key; the newest wins, as ever. A placed settings record is
accepted if no placed settings of its group were accepted here yet (the first writer wins: two
members creating a group at once agree on the first record at its home, and neither claims
before it has folded that far), if it is a copy of the accepted ones, or if its writer is the
admin whose pause of the group is in force (a change or a move, made while nobody may claim);
any other is refused (`Malformed`, nothing changes). An accepted settings record without a mode
(`metadata`: the readable half of a pair, or a writer's from before modes) keeps the mode of
the settings it follows if both are spread or both placed: only a record with a mode changes
it. A first placed record keeps no mode of the spread settings it replaces: the cleaner may
erase those (a review found a compacted reader with no mode where the whole log's had one). A
spread record of a group placed here is refused. The rules read only placed settings records,
pauses, the newest spread record and the newest spread record with a mode, which all survive
the cleaner (each placed record and each pause has a key of its own), so a
reader of the compacted log accepts what a reader of the whole log accepts. A placed group's
fencing tokens are its placement's ``token_base`` plus the offset (a moved group's tokens stay
above every token it had before).

One group's view
----------------
A reader that acts on one group (a member, `status --group`) sets `RationalizerConfig.only_group`
and keeps nothing of the others: a record whose key names another group is counted in
``World.other_groups`` and returns `OtherGroup`, undecoded, once the offset, the gap and the log
time are taken (they are the partition's: every record moves them). Its own group's state is
then exactly the whole fold's (tests/unit/protocol/test_group_filter.py holds it to that), because:

- every record the fold takes for a group has a key that starts with ``group/`` or is the group
  (`wire.record_key`, `legacy_pause_keys`, `metadata_key`, `recordfailures.accepted_keys`; a
  group never contains ``/``), so a record of the group is never skipped, and one whose key
  names another group is malformed or another group's, never this group's;
- the state a record changes is its group's only (claims and poison counts by claim key,
  pauses and settings by group), bar what is the partition's, taken before the filter; the
  claims folded since the newest gap that a gap makes uncertain are each claim's own;
- keyless records (what a Marshal Go writer leaves, `gofleet` looks at them) and the keys
  that name no group (``/coordination-topic``, the pinned count) are folded in full.

Malformed records among other groups' keys are counted in ``other_groups``, not ``malformed``.
So a flood of records of other groups costs such a reader a count, not memory: it is bounded
by its own group. The audit, `dump` and the admin commands that act on several groups fold
everything.

Compacted history
-----------------
`__marshal` is compacted by key (one key per claim), and Kafka's cleaner keeps, for each key,
a *suffix* of its records; removed records leave gaps in the offsets. A claim whose first
record we fold while the offsets so far have been gap-free has its whole history in front of
us: it is *certain*, and the rules above apply. A claim first seen after a gap may have lost
its ClaimingPartition (a holder that heartbeats for weeks), so its records prove nothing about
who holds it. Such a claim is *uncertain*: every record on it is only activity (an Unverified
event), its position is the largest offset seen (holders only move forward), except that the
heartbeats and releases of the client that paused the group set it outright, as on a certain
claim: that is a ``set-position`` rewind, and the pause that authorises it survives compaction
(the newest ReleaseGroup of the group before the rewind is always kept, since the rewind itself
is). A ClaimingPartition wins only after a
record was seen on the claim and more than 2*HB of log time passed without any further record.
Because survivors are a suffix, any record that made the claim fresh for a reader of the whole
log is also in front of us, so an uncertain reader never grants a claim that a reader of the
whole log refuses. The winning claim makes the claim certain again.

Survivors are a suffix only within one pass of the cleaner. A reader that folded a claim's
first records and then fell behind the cleaner (stalled, or still catching up while the cleaner
runs ahead of it) sees that prefix, a gap, then the survivors: the middle (a release, a rival's
grant, the heartbeats that kept the claim fresh) is gone, at log times up to the end of the
gap. So at every gap each claim folded before it becomes uncertain, with its last activity at
the gap's log time (`_across_gap`): a claim is certain only if it was won (or first seen, with
no gap before) after the newest gap.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from marshal_workers.protocol import events as ev
from marshal_workers.protocol.metadata import (
    METADATA_PARTITION,
    GroupSettings,
    TopicRecord,
    decode_metadata,
    metadata_key,
)
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.placement import Placement, PlacementBook, spread
from marshal_workers.protocol.recordfailures import (
    PoisonState,
    accepted_keys,
    decode_poison,
    fold_poison,
    is_poison,
)
from marshal_workers.protocol.wire import (
    CLAIM_KEY_SUFFIX,
    MAX_LOG_TIME_MS,
    ClaimingMessages,
    ClaimingPartition,
    ClaimKey,
    CoordRecord,
    DecodeError,
    Heartbeat,
    Message,
    Partitioner,
    PartitionMessage,
    ReleaseGroup,
    ReleasingPartition,
    claim_key,
    decode,
    legacy_claim_key,
    legacy_pause_keys,
    pause_key,
    record_key,
)


class Freshness(StrEnum):
    """How recently a claim's holder was heard from, at some log time."""

    FRESH = "fresh"
    UNKNOWN = "unknown"
    STALE = "stale"


@dataclass(frozen=True, slots=True)
class RationalizerConfig:
    """The parameters every reader of one coordination topic must share."""

    heartbeat_interval_ms: int
    num_partitions: int | None = None  # the recorded count (`metadata`): checks home partitions
    partitioner: Partitioner = Partitioner.SPEC
    admin_client_ids: frozenset[str] | None = None
    # Not shared: the one group this reader keeps (None: every group); see "One group's view".
    only_group: str | None = None
    # Not shared: the placements this reader knows (a member: its own group's); "Placed groups"
    placements: PlacementBook = field(default_factory=PlacementBook)
    _only_key: bytes | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        only = None if self.only_group is None else self.only_group.encode()
        object.__setattr__(self, "_only_key", only)


@dataclass(slots=True)
class ClaimState:
    """What the log says about one claim. ``holder_client`` None means nobody holds it."""

    certain: bool
    holder_client: str | None = None
    holder_instance: str | None = None
    token: int | None = None
    last_heartbeat: int | None = None
    committed: int | None = None
    reserved: int | None = None
    released: bool = False
    retired: frozenset[str] = frozenset()
    last_activity: int | None = None
    position_unknown: bool = False  # uncertain: a claim's position may have been compacted away
    # AMO, after a gap: where the position would stand without the records this reader saw
    # written by an instance after another instance of its client took the claim over from it
    # (a whole-log reader refuses those); None while they raised it nothing (`_estimate_floor`)
    estimate_floor: int | None = None
    seen_holder: tuple[str, str] | None = None  # uncertain: the instance its heartbeats name
    seen_replaced: dict[str, int] = field(default_factory=dict)  # ... replaced, and when
    raised_by: tuple[str, str] | None = None  # uncertain: who wrote the record the estimate is
    beats_below: tuple[str, int] | None = None  # ... and another instance's heartbeats below it
    # uncertain: log time of the newest claim, or heartbeat not past a lapse, read since the
    # last gap (the whole log refreshes a lease on nothing else: `_lapsed`)
    beat_at: int | None = None

    @property
    def last_seen(self) -> int | None:
        """When the holder was last heard from (log time): its last heartbeat if the claim is
        certain, else its last activity (any record on an uncertain claim counts)."""
        return self.last_heartbeat if self.certain else self.last_activity


@dataclass(frozen=True, slots=True)
class GroupPause:
    """A group paused by ``client_id`` until ``until_ms`` (log time)."""

    client_id: str
    until_ms: int


@dataclass(slots=True)
class World:
    """The folded state of one coordination partition."""

    config: RationalizerConfig
    partition: int
    claims: dict[ClaimKey, ClaimState] = field(default_factory=dict)
    pauses: dict[str, GroupPause] = field(default_factory=dict)
    next_offset: int = 0
    gap_seen: bool = False
    malformed: int = 0
    log_time: int = 0
    topic_record: TopicRecord | None = None  # newest CoordinationTopic record (partition 0)
    group_settings: dict[str, GroupSettings] = field(default_factory=dict)  # newest per group
    keys: dict[bytes, ClaimKey] = field(default_factory=dict, compare=False, repr=False)
    poison: dict[ClaimKey, PoisonState] = field(default_factory=dict)  # see recordfailures.py
    gap_time: int | None = None  # log time at the newest gap: what it hid was no later
    other_groups: int = 0  # records of other groups than `RationalizerConfig.only_group`
    since_gap: set[ClaimKey] = field(default_factory=set, compare=False, repr=False)

    def copy(self) -> World:
        """A snapshot that later folds do not change."""
        return copy.deepcopy(self)


def freshness(last_heartbeat: int, now_ms: int, heartbeat_interval_ms: int) -> Freshness:
    """Fresh below HB, unknown up to and including 2*HB, stale beyond."""
    age = now_ms - last_heartbeat
    if age < heartbeat_interval_ms:
        return Freshness.FRESH
    if age <= 2 * heartbeat_interval_ms:
        return Freshness.UNKNOWN
    return Freshness.STALE


def claim_label(state: ClaimState | None, now_ms: int, heartbeat_interval_ms: int) -> str:
    """unclaimed, released, or the holder's freshness at ``now_ms`` (activity if uncertain)."""
    if state is None:
        return "unclaimed"
    last = state.last_seen
    if state.certain and state.holder_client is None:
        return "released" if state.released else "unclaimed"
    if last is None:
        return "unclaimed"
    return freshness(last, now_ms, heartbeat_interval_ms).value


def resume_offset(state: ClaimState | None, mode: Mode) -> int | None:
    """Where a new owner starts: committed (ALO), max(committed, reserved) (AMO), or None."""
    if state is None:
        return None
    if mode is Mode.ALO or state.reserved is None:
        return state.committed
    if state.committed is None:
        return state.reserved
    return max(state.committed, state.reserved)


def pause_of(world: World, group: str, now_ms: int) -> GroupPause | None:
    """The group's pause in force at log time ``now_ms``, if any."""
    pause = world.pauses.get(group)
    if pause is None or now_ms >= pause.until_ms:
        return None
    return pause


@functools.lru_cache(maxsize=64)
def _spread(partitions: int, partitioner: Partitioner) -> Placement:
    return spread(partitions, partitioner)


def placement_on(world: World, group: str) -> Placement | None:
    """Where ``group``'s records belong on this partition (see "Placed groups"): the
    placement of its accepted settings here, else the one the reader knows, else spread (None:
    a spread group of a reader that knows no partition count, which checks no home)."""
    settings = world.group_settings.get(group)
    if settings is not None and settings.placement is not None:
        return settings.placement
    cfg = world.config
    known = cfg.placements.get(group) if cfg.placements else None
    if known is not None:
        return known
    if cfg.num_partitions is None:
        return None
    return _spread(cfg.num_partitions, cfg.partitioner)


def _token(world: World, group: str, offset: int) -> int:
    """The fencing token of a record at ``offset`` that wins or takes over a claim: the offset
    plus the token base of the group's accepted placed settings here (0: spread)."""
    settings = world.group_settings.get(group)
    if settings is None or settings.placement is None:
        return offset
    return settings.placement.token_base + offset


def coordinated_here(world: World, key: ClaimKey) -> bool:
    """Whether ``key``'s records belong on this partition now (its group's placement here).
    A group moved to a window that keeps one of its old partitions leaves there the state of
    claims whose home moved on, frozen: a view of the group takes each claim from its home."""
    return _home_problem(world, key.group, key.topic, key.partition) is None


def _home_problem(world: World, group: str, topic: str, partition: int) -> str | None:
    """Why a record of the claim is not on its home partition, or None."""
    place = placement_on(world, group)
    if place is None:
        return None
    home = place.partition_of(topic, partition)
    if home == world.partition:
        return None
    return f"message belongs on coordination partition {home}"


def fold(world: World, record: CoordRecord) -> ev.Event:
    """Apply one record (the next in offset order) to ``world``; return what it did."""
    refused = _advance(world, record)
    if refused is not None:
        return refused
    only = world.config._only_key
    if only is not None and _names_another_group(record.key, only):
        world.other_groups += 1
        return ev.OtherGroup(record.partition, record.offset, world.log_time)
    try:
        msg = decode(record.value)
    except DecodeError as exc:
        if is_poison(record.value):  # failure counts of poison records: see recordfailures.py
            return _poison(world, record)
        return _metadata(world, record, exc)
    if type(msg) is ReleaseGroup:
        if record.key != pause_key(msg) and record.key not in legacy_pause_keys(msg):
            return _malformed(world, record, _key_mismatch(record, msg), _keyless(record, msg))
        return _release_group(world, record, msg)
    assert not isinstance(msg, ReleaseGroup)
    claim_keyed = record.key is not None and record.key.endswith(CLAIM_KEY_SUFFIX)
    if claim_keyed and type(msg) is not ClaimingPartition:  # only claims go under a claim key
        return _malformed(world, record, _key_mismatch(record, msg))
    key = _claim_of(world, record, msg)
    if not isinstance(key, ClaimKey):
        return key  # refused: its record key or its coordination partition is not the claim's
    state = world.claims.get(key)
    if state is None:  # stored only once a record changes it: a refusal leaves no trace
        state = ClaimState(certain=not world.gap_seen)
        if not state.certain:  # every record on an uncertain claim is activity
            world.claims[key] = state
    elif world.gap_time is not None and key not in world.since_gap:
        _behind_gap(state, world.gap_time)  # last folded before the newest gap
    world.since_gap.add(key)
    if not state.certain:
        return _uncertain(world, record, msg, key, state)
    return _RULES[type(msg)](world, record, msg, key, state)


def _advance(world: World, record: CoordRecord) -> ev.Event | None:
    """The record's place in the log: refused (`Malformed`) if it is of another partition or
    behind the fold; otherwise the fold moves past it, its log time is taken (refused if past
    any broker's clock), and an offset gap in front of it is noted (`_across_gap`)."""
    if record.partition != world.partition:
        reason = f"record of partition {record.partition} in the fold of {world.partition}"
        return _malformed(world, record, reason)
    if record.offset < world.next_offset:
        reason = f"offset {record.offset} is behind {world.next_offset}"
        return _malformed(world, record, reason)
    gap = record.offset > world.next_offset
    world.next_offset = record.offset + 1
    stamp = record.timestamp_ms
    if stamp > world.log_time:
        if stamp > MAX_LOG_TIME_MS:  # no broker's clock: a writer's, on a CreateTime topic
            if gap:
                _across_gap(world)
            return _malformed(world, record, f"log time {stamp} ms is past the year 9999")
        world.log_time = stamp
    if gap:
        _across_gap(world)
    return None


def _claim_of(world: World, record: CoordRecord, msg: PartitionMessage) -> ClaimKey | ev.Event:
    """The claim ``msg`` is about, its record key and home coordination partition checked the
    first time the fold meets that key (then remembered in ``world.keys``); a refusal
    (`Malformed`) when either is not the claim's."""
    key = world.keys.get(record.key)  # type: ignore[arg-type]
    if key is not None and key == (msg.group_id, msg.topic, msg.partition):
        return key
    key = claim_key(msg)
    if record.key != record_key(msg) and not (
        type(msg) is ClaimingPartition and record.key == legacy_claim_key(msg)
    ):
        return _malformed(world, record, _key_mismatch(record, msg), _keyless(record, msg))
    problem = _home_problem(world, msg.group_id, msg.topic, msg.partition)
    if problem is not None:
        return _malformed(world, record, problem)
    world.keys[record.key] = key  # a key checked once, home partition included
    return key


def _names_another_group(key: bytes | None, group: bytes) -> bool:
    """Whether a record key names a group other than ``group`` (see "One group's view"): it
    neither is ``group`` nor starts with ``group/``, and names some group (it is not None and
    does not start with ``/``)."""
    if key is None or key[:1] == b"/":
        return False
    return not (key.startswith(group) and (len(key) == len(group) or key[len(group)] == 0x2F))


def _across_gap(world: World) -> None:
    """An offset gap: the cleaner removed records in front of this one, and of any key. A
    reader that folded a claim's earlier records and then fell behind the cleaner sees them,
    the gap, then the claim's survivors: the records it missed (a release, a rival's grant,
    heartbeats that kept the claim fresh) may have been in the gap, at log times up to now.
    So every claim folded before the gap is uncertain from now on, active until now: those
    folded since the previous gap here, the older ones when their next record comes."""
    note_gap(world, world.log_time)


def note_gap(world: World, gap_time: int) -> None:
    """A gap at log time ``gap_time``: `_across_gap` gives it the fold's own time; a reader
    that folds a subset of a partition's records (the audit's fold per claim,
    `audit.claimfold`) learns of each gap in front of its next record from elsewhere, with
    the time the whole fold had there."""
    world.gap_seen = True
    world.gap_time = gap_time
    claims = world.claims
    for key in world.since_gap:
        state = claims.get(key)
        if state is not None:
            _behind_gap(state, gap_time)
    world.since_gap = set()


def _behind_gap(state: ClaimState, gap_time: int) -> None:
    """A claim whose records may be in a gap at log time ``gap_time``: uncertain, and active
    then (the uncertain rules wait for 2*HB of silence after it). What it had inferred about
    instances is dropped: the gap may hide a release or a grant (but not who raised the
    estimate: a holder's later heartbeats carry a position past it whatever came between, bar
    a rewind, `_beat_below`)."""
    state.certain = False
    state.seen_holder, state.seen_replaced = None, {}
    state.beat_at = None
    if state.last_activity is None or state.last_activity < gap_time:
        state.last_activity = gap_time


def _metadata(world: World, record: CoordRecord, error: DecodeError) -> ev.Event:
    """A record that is no protocol message: a metadata record (see `metadata`), or malformed
    (with the protocol decoder's reason)."""
    try:
        meta = decode_metadata(record.value)
    except DecodeError:
        return _malformed(world, record, str(error))
    if record.key != metadata_key(meta):
        return _malformed(world, record, f"key {_shown(record.key)} does not match the record")
    if isinstance(meta, TopicRecord):
        if record.partition != METADATA_PARTITION:
            reason = f"the topic record belongs on coordination partition {METADATA_PARTITION}"
            return _malformed(world, record, reason)
        world.topic_record = meta
        return ev.TopicRecorded(record.partition, record.offset, world.log_time, meta)
    refusal = _settings_refusal(world, meta)
    if refusal is not None:
        return _malformed(world, record, refusal)
    before = placement_on(world, meta.group_id)
    accepted = world.group_settings.get(meta.group_id)
    if accepted is not None and meta.mode is None and _same_kind(accepted, meta):
        meta = replace(meta, mode=accepted.mode)  # ("Placed groups": the mode is kept)
    world.group_settings[meta.group_id] = meta
    if placement_on(world, meta.group_id) != before:  # the group's keys are checked again
        group = meta.group_id
        world.keys = {k: v for k, v in world.keys.items() if v.group != group}
    return ev.GroupSettingsRecorded(record.partition, record.offset, world.log_time, meta)


def _same_kind(accepted: GroupSettings, meta: GroupSettings) -> bool:
    """Whether both are spread settings or both placed: only then does ``meta`` keep the
    ``accepted`` mode ("Placed groups": a spread record the cleaner may erase must not decide
    a placed group's mode)."""
    return (accepted.placement is None) == (meta.placement is None)


def _settings_refusal(world: World, meta: GroupSettings) -> str | None:
    """Why a group's settings record is refused here (see "Placed groups"), or None."""
    group = meta.group_id
    accepted = world.group_settings.get(group)
    if accepted is None or accepted.placement is None:
        return None  # spread settings, or none: the newest wins; a placed record is the first
    if meta.placement is None:
        return f"spread settings refused: group {group} is placed on this partition"
    if meta.same_settings(accepted) or _pause_client(world, group) == meta.client_id:
        return None  # a copy, or a change by the admin whose pause is in force
    return (
        f"settings of group {group} refused: its placed settings here differ and {meta.client_id} "
        "has no pause of the group in force (the first settings written win)"
    )


def _key_mismatch(record: CoordRecord, msg: Message) -> str:
    return f"key {_shown(record.key)} does not match the message (expected {record_key(msg)!r})"


def _shown(key: bytes | None) -> str:
    """A record key as a reason shows it: at most 80 bytes of it (a key may be a megabyte)."""
    if key is None or len(key) <= 80:
        return repr(key)
    return f"{key[:80]!r}..."


def _keyless(record: CoordRecord, msg: Message) -> str | None:
    """The group of a valid message written without a key (a Marshal Go writer), else None."""
    return msg.group_id if record.key is None else None


def _malformed(
    world: World, record: CoordRecord, reason: str, keyless_group: str | None = None
) -> ev.Event:
    world.malformed += 1
    return ev.Malformed(record.partition, record.offset, world.log_time, reason, keyless_group)


def _stale(state: ClaimState, now: int, hb: int) -> bool:
    return state.last_heartbeat is None or now - state.last_heartbeat > 2 * hb


def _pause_client(world: World, group: str) -> str | None:
    """The client whose pause of ``group`` is in force at the world's log time, if any."""
    pause = pause_of(world, group, world.log_time) if world.pauses else None
    return None if pause is None else pause.client_id


def _holder_refusal(
    state: ClaimState, client_id: str, instance_id: str, *, exact_instance: bool
) -> str | None:
    if state.holder_client is None:
        return "released" if state.released else "not claimed"
    if client_id != state.holder_client:
        return f"held by {state.holder_client}"
    if instance_id in state.retired:
        return f"instance {instance_id} was replaced by {state.holder_instance}"
    if exact_instance and instance_id != state.holder_instance:
        return f"instance {instance_id} has not taken over from {state.holder_instance}"
    return None


def _claim(
    world: World, rec: CoordRecord, msg: ClaimingPartition, key: ClaimKey, state: ClaimState
) -> ev.Event:
    now, hb = world.log_time, world.config.heartbeat_interval_ms
    pauser = _pause_client(world, key.group)
    if pauser is not None and pauser != msg.client_id:
        return ev.ClaimRejected(
            rec.partition, rec.offset, now, msg, "group paused", state.holder_client
        )
    previous, previous_hb = state.holder_client, state.last_heartbeat
    if previous is not None and not _stale(state, now, hb):
        reason = (
            "already held by this client" if previous == msg.client_id else f"held by {previous}"
        )
        return ev.ClaimRejected(rec.partition, rec.offset, now, msg, reason, previous)
    token = _token(world, key.group, rec.offset)
    _grant(world, key, state, msg, token)
    return ev.ClaimGranted(
        rec.partition,
        rec.offset,
        now,
        msg,
        token,
        previous,
        previous_hb if previous is not None else None,
    )


def _grant(
    world: World, key: ClaimKey, state: ClaimState, msg: ClaimingPartition, token: int
) -> None:
    now, client_id, instance_id = world.log_time, msg.client_id, msg.instance_id
    world.claims[key] = state
    state.certain = True
    state.holder_client, state.holder_instance = client_id, instance_id
    state.token, state.last_heartbeat = token, now
    state.released, state.retired, state.last_activity = False, frozenset(), now
    state.seen_holder, state.seen_replaced = None, {}  # (the floor is kept: `_estimate_floor`)
    state.raised_by = state.beats_below = None


def _is_current_holder(state: ClaimState, msg: PartitionMessage, now: int, hb: int) -> bool:
    """The common case, decided without building a reason: the holder instance, not stale."""
    last = state.last_heartbeat
    return (
        msg.instance_id == state.holder_instance
        and msg.client_id == state.holder_client
        and last is not None
        and now - last <= 2 * hb
    )


def _heartbeat(
    world: World, rec: CoordRecord, msg: Heartbeat, key: ClaimKey, state: ClaimState
) -> ev.Event:
    now, hb = world.log_time, world.config.heartbeat_interval_ms
    i = msg.instance_id
    replaced = None
    committed = msg.offset
    if not _is_current_holder(state, msg, now, hb):
        refusal = _holder_refusal(state, msg.client_id, i, exact_instance=False)
        if refusal is None and _stale(state, now, hb):
            refusal = "claim is stale"
        if refusal is not None:
            return ev.HeartbeatRejected(rec.partition, rec.offset, now, msg, refusal)
        replaced = state.holder_instance  # a new instance of the holder's client takes over
        if replaced is not None:
            state.retired = state.retired | {replaced}
        state.holder_instance = i
        state.token = _token(world, key.group, rec.offset)  # a sink refuses the replaced one
        pausing = bool(world.pauses) and _pause_client(world, key.group) == msg.client_id
        if state.committed is not None and not pausing:  # a takeover keeps the log's
            committed = state.committed  # position (the pausing admin sets it outright):
        # not back (the old instance may have committed more since the new one read), and
        # not forward (a start looked up while the claim had none may lie past the old
        # instance's first heartbeat, which may have handed it to a child)
    state.last_heartbeat = state.last_activity = now
    state.committed = committed
    if world.pauses and _pause_client(world, key.group) == msg.client_id:
        state.reserved = None  # the pausing admin sets the position outright
        state.estimate_floor = None
    elif state.estimate_floor is not None and replaced is None:
        _floor_reached(state, committed)  # (a takeover's offset is what its writer read)
    assert state.token is not None
    return ev.HeartbeatAccepted(rec.partition, rec.offset, now, msg, state.token, replaced)


def _release(
    world: World, rec: CoordRecord, msg: ReleasingPartition, key: ClaimKey, state: ClaimState
) -> ev.Event:
    now = world.log_time
    refusal = _holder_refusal(state, msg.client_id, msg.instance_id, exact_instance=True)
    if refusal is not None:
        return ev.ReleaseRejected(rec.partition, rec.offset, now, msg, refusal)
    if world.pauses and _pause_client(world, key.group) == msg.client_id:
        state.reserved = state.estimate_floor = None  # the pausing admin sets the position
    state.holder_client = state.holder_instance = None
    state.released, state.retired, state.committed = True, frozenset(), msg.offset
    if state.estimate_floor is not None:
        _floor_reached(state, msg.offset)
    state.last_activity = now
    assert state.token is not None
    return ev.Released(rec.partition, rec.offset, now, msg, state.token)


def _claim_messages(
    world: World, rec: CoordRecord, msg: ClaimingMessages, key: ClaimKey, state: ClaimState
) -> ev.Event:
    now, hb = world.log_time, world.config.heartbeat_interval_ms
    refusal = None
    if not _is_current_holder(state, msg, now, hb):
        refusal = _holder_refusal(state, msg.client_id, msg.instance_id, exact_instance=True)
        if refusal is None:
            refusal = "claim is stale"
    committed, reserved = state.committed, state.reserved
    start = (
        committed
        if reserved is None
        else reserved
        if committed is None
        else max(committed, reserved)
    )  # resume_offset(state, Mode.AMO), inlined on this hot path
    if refusal is None and start is not None and msg.offset < start:
        refusal = f"offset {msg.offset} is behind the position {start}"
    if refusal is not None:
        return ev.MessagesRejected(rec.partition, rec.offset, now, msg, refusal)
    state.reserved = state.committed = msg.offset  # (>= start: never back)
    state.last_activity = now
    if state.estimate_floor is not None:
        _floor_reached(state, msg.offset)
    assert state.token is not None
    return ev.MessagesClaimed(rec.partition, rec.offset, now, msg, start, state.token)


_Rule = Callable[[World, CoordRecord, Any, ClaimKey, ClaimState], ev.Event]
_RULES: dict[type, _Rule] = {
    ClaimingPartition: _claim,
    Heartbeat: _heartbeat,
    ReleasingPartition: _release,
    ClaimingMessages: _claim_messages,
}


def _poison(world: World, rec: CoordRecord) -> ev.Event:
    """A poison record (`poison`): checked like any record for its key and home partition,
    then folded by `poison.fold_poison` against the claim's holder at this log time."""
    assert rec.value is not None
    try:
        msg = decode_poison(rec.value)
    except DecodeError as exc:
        return _malformed(world, rec, str(exc))
    key = ClaimKey(msg.group_id, msg.topic, msg.partition)
    keys = accepted_keys(msg)
    if rec.key not in keys:
        reason = f"key {_shown(rec.key)} does not match the message (expected {keys[0]!r})"
        return _malformed(world, rec, reason)
    cfg = world.config
    problem = _home_problem(world, msg.group_id, msg.topic, msg.partition)
    if problem is not None:
        return _malformed(world, rec, problem)
    state = world.claims.get(key)
    return fold_poison(
        world.poison,
        msg,
        coord_partition=rec.partition,
        coord_offset=rec.offset,
        log_time=world.log_time,
        holder_client=state.holder_client if state else None,
        holder_instance=state.holder_instance if state else None,
        last_seen=state.last_seen if state else None,
        heartbeat_interval_ms=cfg.heartbeat_interval_ms,
        admin_client_ids=cfg.admin_client_ids,
        certain=state.certain if state else not world.gap_seen,
    )


def _release_group(world: World, rec: CoordRecord, msg: ReleaseGroup) -> ev.Event:
    now, c = world.log_time, msg.client_id
    admins = world.config.admin_client_ids
    if admins is not None and c not in admins:
        reason = f"{c} is not an admin client"
        return ev.GroupPauseRejected(rec.partition, rec.offset, now, msg, reason)
    until_ms = msg.expire_time * 1000
    world.pauses[msg.group_id] = GroupPause(c, until_ms)
    return ev.GroupPaused(rec.partition, rec.offset, now, msg, until_ms)


def _uncertain(
    world: World, rec: CoordRecord, msg: PartitionMessage, key: ClaimKey, state: ClaimState
) -> ev.Event:
    """A claim whose earlier history may have been compacted: see the module docstring."""
    now, hb = world.log_time, world.config.heartbeat_interval_ms
    silent = state.last_activity is not None and now - state.last_activity > 2 * hb
    lapsed = _lapsed(state, msg, now, hb)
    if type(msg) is ClaimingPartition or (type(msg) is Heartbeat and not lapsed):
        state.beat_at = now
    if isinstance(msg, ClaimingPartition):
        if msg.instance_id in state.seen_replaced:  # it may hold the claim again (a release
            # or a lapse the whole log saw): its records count from now on
            state.seen_replaced = {
                k: v for k, v in state.seen_replaced.items() if k != msg.instance_id
            }
        pauser = _pause_client(world, key.group)
        no_position = state.committed is None and state.reserved is None
        if no_position and rec.key is not None and not rec.key.endswith(CLAIM_KEY_SUFFIX):
            # a claim under the key it shared with positions (a log written before claims
            # were keyed apart) may have superseded them: what survives cannot tell a new
            # claim from one whose position the cleaner erased
            state.position_unknown = True
        if silent and state.position_unknown and no_position:
            state.last_activity = now
            reason = "position unknown after compaction: set it with marshal-admin set-position"
            return ev.ClaimRejected(
                rec.partition, rec.offset, now, msg, reason, state.holder_client
            )
        if silent and (pauser is None or pauser == msg.client_id):
            previous, previous_hb = state.holder_client, state.last_activity
            token = _token(world, key.group, rec.offset)
            _grant(world, key, state, msg, token)
            return ev.ClaimGranted(
                rec.partition, rec.offset, now, msg, token, previous, previous_hb
            )
        state.last_activity = now
        reason = "group paused" if silent else "history compacted: waiting for 2*HB of silence"
        return ev.ClaimRejected(rec.partition, rec.offset, now, msg, reason, state.holder_client)
    # (the inference is only needed for a heartbeat or release, or once an instance is seen
    # replaced: a reservation of the instance its heartbeats name changes nothing)
    seen = state.seen_replaced or type(msg) is not ClaimingMessages
    replaced = seen and _seen_replaced(state, msg, now, hb)
    before = resume_offset(state, Mode.AMO) if replaced or lapsed else None
    top = max(state.committed or 0, state.reserved or 0)
    if msg.offset > top or state.committed is None:
        state.raised_by, state.beats_below = (msg.client_id, msg.instance_id), None
    elif type(msg) is Heartbeat and not replaced and not lapsed and msg.offset < top:
        _beat_below(state, msg)  # (a lapsed heartbeat the whole log refused: it shows nothing)
    if isinstance(msg, ClaimingMessages):
        state.reserved = max(state.reserved or 0, msg.offset)
        state.committed = max(state.committed or 0, msg.offset)  # reserved is consumed (rule 4)
    else:
        if world.pauses and _pause_client(world, key.group) == msg.client_id:
            state.committed, state.reserved = msg.offset, None  # a rewind: set outright
            state.estimate_floor = None
        else:
            state.committed = max(state.committed or 0, msg.offset)
        if isinstance(msg, Heartbeat):
            # a release proves nothing about holding (its writer's own refused release
            # included): only a heartbeat names the likely holder of an uncertain claim
            state.holder_client, state.holder_instance = msg.client_id, msg.instance_id
    if replaced or lapsed:
        _estimate_floor(state, before)
    elif state.estimate_floor is not None:
        _floor_reached(state, msg.offset)
    state.last_activity = now
    return ev.Unverified(rec.partition, rec.offset, now, msg)


def _seen_replaced(state: ClaimState, msg: PartitionMessage, now: int, hb: int) -> bool:
    """Whether an uncertain claim's record comes from an instance that this reader saw
    replaced by another instance of its client (restart recovery): a whole-log reader refuses
    it, if the heartbeat that seemed to take over was accepted. Inferred from the survivors
    alone, and kept narrow, since a wrong inference would report handled records lost
    (`_estimate_floor`): a heartbeat of another instance of the client its heartbeats named
    replaces that instance; the replaced one's records count as such only within 2*HB of log
    time after it (past its lease a member writes nothing that carries a position, so a record
    later than that proves the takeover was the refused one), and a claim of it, a release, a
    heartbeat of another client, or a gap ends what was inferred."""
    client, instance = msg.client_id, msg.instance_id
    since = state.seen_replaced.get(instance)
    if since is not None and state.seen_holder is not None and state.seen_holder[0] == client:
        if now - since <= 2 * hb:
            return True
        state.seen_replaced = {}  # a replaced instance that goes on: the inference was wrong
        state.estimate_floor = None
    if isinstance(msg, Heartbeat):
        holder = state.seen_holder
        if holder is None or holder[0] != client:
            state.seen_replaced = {}
        elif holder[1] != instance:
            state.seen_replaced = {**state.seen_replaced, holder[1]: now}
        state.seen_holder = (client, instance)
    elif isinstance(msg, ReleasingPartition):
        state.seen_holder, state.seen_replaced = None, {}
        state.raised_by = state.beats_below = None
    return False


def _lapsed(state: ClaimState, msg: PartitionMessage, now: int, hb: int) -> bool:
    """Whether a heartbeat or reservation on an uncertain claim comes past every lease: more
    than 2*HB of log time after the newest claim or heartbeat of the claim read since the last
    gap (`beat_at`). With no gap since, this reader read every record of the claim's partition
    between the two, as a whole-log reader did, and only a claim or a heartbeat refreshes a
    lease: the whole log finds the claim stale and refuses it, whoever wrote it (a holder
    frozen past its lease, whose last writes land late: marshal-sim seed 3631003). A release
    is not judged so (a stale holder's release is accepted). Counted as a replaced instance's
    records are (`_estimate_floor`): the estimate takes its offset, the floor does not."""
    if type(msg) is not Heartbeat and type(msg) is not ClaimingMessages:
        return False
    return state.beat_at is not None and now - state.beat_at > 2 * hb


def _beat_below(state: ClaimState, msg: Heartbeat) -> None:
    """A heartbeat below the estimate on an uncertain claim, from another instance of the
    client whose record raised it. A holder's heartbeat carries its fold's position; one that
    took the claim over carries what its writer read before (its first), but every later one
    the position at the takeover or past it, which includes any reservation accepted before
    the takeover. So a second such heartbeat below the estimate shows the record that raised
    it refused: the takeover came first, and the cleaner may have erased it (its cut between
    the two: marshal-sim seed 870072). The old instance cannot be the one whose heartbeats
    these are as a zombie: a new instance reserves only once the old one's lease has ended,
    and past its lease the old one writes nothing. The floor is then that heartbeat's offset."""
    raised = state.raised_by
    if raised is None or raised[0] != msg.client_id or raised[1] == msg.instance_id:
        return
    below = state.beats_below
    if below is None or below[0] != msg.instance_id:
        state.beats_below = (msg.instance_id, 1)
    elif state.estimate_floor is None:
        state.estimate_floor = msg.offset


def _estimate_floor(state: ClaimState, before: int | None) -> None:
    """Keep ``estimate_floor`` on an uncertain claim (AMO) after a record of an instance seen
    replaced moved the position from ``before``: where the position would stand without such
    records. A reservation such an instance wrote inside its lease can land after the takeover:
    the whole log refuses it (its child was granted nothing), yet the estimate, the largest
    offset seen, takes its end, and a holder that starts there passes over records nobody was
    granted. The estimate stays as it is (taking less could hand records out twice: the
    takeover may be the refused one); the floor lets the member that starts there report the
    records between as lost. Every other record raises the floor to its offset
    (`_floor_reached`)."""
    after = resume_offset(state, Mode.AMO)
    if state.estimate_floor is None and before is not None and (after or 0) > before:
        state.estimate_floor = before


def _floor_reached(state: ClaimState, offset: int) -> None:
    """A record the floor counts, at ``offset``: the floor rises to it, and is gone once it
    reaches the position."""
    assert state.estimate_floor is not None
    floor = max(state.estimate_floor, offset)
    position = resume_offset(state, Mode.AMO)
    state.estimate_floor = None if position is None or floor >= position else floor
