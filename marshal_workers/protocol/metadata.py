"""Records about the coordination topic and its groups (not about claims), and their checks.

Pure: no I/O, no clock. Two records live beside the claims, each under a key of its own that no
claim and no ReleaseGroup can have (a group or topic never contains ``/``), so that compaction
keeps the newest of each for ever::

    CoordinationTopic/1/UnixSec/InstanceID/ClientID/Partitions          key "/coordination-topic"
    CoordinationTopic/2/UnixSec/InstanceID/ClientID/Partitions/placed   key "/coordination-topic"
    GroupSettings/1/UnixSec/InstanceID/ClientID/GroupID/HeartbeatMs/Partitioner/AdminIds
                 [/Ordering/WorkersPerPartition]                         key "GROUP//settings"
    GroupSettings/1/UnixSec/InstanceID/ClientID/GroupID/HeartbeatMs/Partitioner/AdminIds
                 /Ordering/WorkersPerPartition/Placement   key "GROUP//settings/INSTANCE/UNIXSEC"
    GroupSettings/1/UnixSec/InstanceID/ClientID/GroupID/HeartbeatMs/Partitioner/AdminIds
                 /Ordering/WorkersPerPartition/Placement|spread/Mode
                 key "GROUP//settings/mode" (spread), "GROUP//settings/INSTANCE/UNIXSEC/MODE"

*CoordinationTopic* pins the topic's partition count: `marshal-admin init` writes it on
coordination partition 0 when it creates the topic (or, once, on a topic that has none). Every
claim's home partition is a hash modulo that count, so a topic whose count differs from the
recorded one must not be used (`partition_count_problem`). Version 2 (``placed``) marks a topic
whose new groups are placed (`placement`; `marshal-admin init` writes it on a new topic, and
``init --enable-placement`` on an existing one); on a version-1 topic new groups are spread. A
reader from before placement counts a version-2 record malformed: on a topic created at
version 2 it finds no recorded partition count and refuses to start (it would spread a new
group over every partition); on one enabled later it keeps the version-1 record until the
cleaner compacts it away (the same key), and starts as before until then.

*GroupSettings* holds the settings every member of a group and every admin acting on it must
share: the heartbeat interval (it decides freshness, and with it every lease), the partitioner
(it decides where each claim is coordinated), the admin ids (they decide which pauses count)
and the ordering with its workers per partition (they decide which records each claim covers:
`slicing`; a record without the two fields is a ``partition`` group, as every group was before
them).
It is written on every coordination partition, so that each partition's fold sees it before any
later record of that partition (a change is ordered before, say, the lift of a pause). The
newest record wins. `settings_differences` names each setting that differs, with both values.

AdminIds: ``*`` for any client, an empty field for none, else the ids joined by ``,``.

A *placed* group (`placement`) has a twelfth field, ``first:span:partitions:token_base``
(``23:1:50:0``), with the ordering fields always present before it, and a key per writer (its
instance and second), so that every placed settings record survives the cleaner: the fold
accepts the first one of a partition and refuses later ones that differ (`rationalizer`), and a
refused record under a shared key could be that key's newest, the one a reader of the compacted
log would take. For the same reason a writer never writes one placed settings key twice (placed
settings keys: a retry is a new record, in a new second): the cleaner would keep the second
copy only, and a rival's record written between the two would be first for a compacted reader.
A record of 9 or 11 fields is a spread group's (``placement`` None), as every
group was before placement; a reader from before placement counts a 12-field record malformed.

The *mode* (``amo`` or ``alo``) is the thirteenth field, after the placement (``spread`` for a
spread group), under a key of its own: ``GROUP//settings/mode`` for a spread group,
``GROUP//settings/INSTANCE/UNIXSEC/MODE`` for a placed one. It always follows the same settings
without a mode (`settings_records`), which a reader from before modes reads as ever; it counts
the 13-field record malformed. A record without a mode keeps the group's recorded mode
(`rationalizer`), so only a record with a mode changes it. Members of two modes in one group
break both guarantees: an ALO member resumes after the runs an AMO member reserved and never
handled (records skipped), an AMO member before the records an ALO member handled and had not
yet heartbeated (records handed out twice). So the group's first member records its mode, a
member of the other mode is refused, and a member that finds the group's settings without a
mode (a group from before modes were recorded) records them again with its own. A member from
before modes is not checked for its mode, and does not see a change of the mode: change it
once every member runs this version.

As for the claim records (`wire`), every field is bounded on decode, and a record outside the
bounds is malformed: names as `wire.validate_name` takes them, UnixSec up to the last second of
9999, a partition count within Kafka's 32 bits, a heartbeat interval of at most
`MAX_HEARTBEAT_MS` (a year: every lease and freshness window stays a date a reader can show).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Final

from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.placement import Placement, placement_problem
from marshal_workers.protocol.slicing import MAX_SLICES, WHOLE, Ordering, Slicing
from marshal_workers.protocol.wire import (
    MAX_OFFSET,
    MAX_PARTITION,
    MAX_UNIX_SEC,
    DecodeError,
    Partitioner,
    validate_name,
)

TOPIC_RECORD_KEY: Final = b"/coordination-topic"
SETTINGS_SUFFIX: Final = b"//settings"
METADATA_PARTITION: Final = 0  # where CoordinationTopic lives
ANY: Final = "*"
MAX_HEARTBEAT_MS: Final = 365 * 24 * 3600 * 1000  # a year


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """The coordination topic's partition count, as `marshal-admin init` recorded it."""

    unix_sec: int
    instance_id: str
    client_id: str
    partitions: int
    placed: bool = False  # version 2: the topic's new groups are placed


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """What every member of ``group_id`` and every admin acting on it must agree on."""

    unix_sec: int
    instance_id: str
    client_id: str
    group_id: str
    heartbeat_interval_ms: int
    partitioner: Partitioner
    admin_client_ids: frozenset[str] | None  # None: anyone may pause
    # how claims cut partitions; None in an admin's own settings: it acts on any cut
    slicing: Slicing | None = WHOLE
    placement: Placement | None = None  # None: spread over every partition (a legacy group)
    # the group's delivery mode; None: not recorded (an older writer), or an admin's own
    # settings (it acts on either mode)
    mode: Mode | None = None

    def same_settings(self, other: GroupSettings) -> bool:
        """Whether the shared settings are equal (who wrote them, and when, aside)."""
        return not settings_differences(self, other)


MetadataRecord = TopicRecord | GroupSettings


def settings_key(group: str) -> bytes:
    """The record key of a spread group's settings (one key: the newest survives)."""
    return group.encode() + SETTINGS_SUFFIX


def placed_settings_key(record: GroupSettings) -> bytes:
    """The record key of a placed group's settings: one per writer instance and second (and
    mode: the record with a mode follows the same settings without one, `settings_records`)."""
    key = f"{record.group_id}//settings/{record.instance_id}/{record.unix_sec}"
    return (key if record.mode is None else f"{key}/{record.mode.value}").encode()


def metadata_key(record: MetadataRecord) -> bytes:
    """The record key of a metadata record."""
    if isinstance(record, TopicRecord):
        return TOPIC_RECORD_KEY
    if record.placement is not None:
        return placed_settings_key(record)
    if record.mode is not None:  # beside the settings a reader from before modes reads
        return record.group_id.encode() + SETTINGS_SUFFIX + b"/mode"
    return settings_key(record.group_id)


def settings_records(record: GroupSettings) -> list[tuple[bytes, bytes]]:
    """The (key, value) records that write ``record``, in order. Settings with a mode come after
    the same settings without it, under a key of their own (the cleaner keeps both), so that a
    reader from before modes still reads the group's settings: of a placed group it takes the
    first placed settings it can read on a partition for the group's placement (with none it
    would take the group for a spread one and claim where its members do not look); of a spread
    group, the newest under the shared key (with none, it would check nothing, and write its
    own over the group's)."""
    out = []
    if record.mode is not None:
        readable = replace(record, mode=None)
        out.append((metadata_key(readable), encode_metadata(readable)))
    out.append((metadata_key(record), encode_metadata(record)))
    return out


def placement_text(placement: Placement | None) -> str:
    """A placement as its field: ``first:span:partitions:token_base`` (``spread``: None)."""
    if placement is None:
        return "spread"
    p = placement
    return f"{p.first}:{p.span}:{p.partitions}:{p.token_base}"


def _admins_text(ids: frozenset[str] | None) -> str:
    return ANY if ids is None else ",".join(sorted(ids))


def encode_metadata(record: MetadataRecord) -> bytes:
    """The text form of a metadata record."""
    head = f"{record.unix_sec}/{record.instance_id}/{record.client_id}"
    if isinstance(record, TopicRecord):
        if record.placed:
            return f"CoordinationTopic/2/{head}/{record.partitions}/placed".encode()
        return f"CoordinationTopic/1/{head}/{record.partitions}".encode()
    text = (
        f"GroupSettings/1/{head}/{record.group_id}/{record.heartbeat_interval_ms}/"
        f"{record.partitioner.value}/{_admins_text(record.admin_client_ids)}"
    )
    cut = record.slicing
    if record.mode is not None:
        cut = cut if cut is not None else WHOLE
        where = placement_text(record.placement)
        text += f"/{cut.ordering.value}/{cut.count}/{where}/{record.mode.value}"
    elif record.placement is not None:
        cut = cut if cut is not None else WHOLE
        text += f"/{cut.ordering.value}/{cut.count}/{placement_text(record.placement)}"
    elif cut is not None and cut.sliced:
        text += f"/{cut.ordering.value}/{cut.count}"
    return text.encode()


def _int(name: str, text: str, minimum: int, maximum: int, digits: int = 18) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > digits:
        raise DecodeError(f"{name} {text[:24]!r} is not an integer from {minimum} to {maximum}")
    value = int(text)
    if not minimum <= value <= maximum:
        raise DecodeError(f"{name} {text!r} is not an integer from {minimum} to {maximum}")
    return value


def _name(name: str, text: str) -> str:
    try:
        return validate_name(name, text)
    except ValueError as exc:
        raise DecodeError(str(exc)) from None


def decode_metadata(value: bytes | None) -> MetadataRecord:
    """Parse a metadata record; DecodeError saying what is wrong."""
    if value is None:
        raise DecodeError("record has no value")
    try:
        parts = value.decode("utf-8").split("/")
    except UnicodeDecodeError:
        raise DecodeError("value is not UTF-8") from None
    kind, n = parts[0], len(parts)
    v1 = n == 6 and parts[1] == "1"
    v2 = n == 7 and parts[1] == "2" and parts[6] == "placed"
    if kind == "CoordinationTopic" and (v1 or v2):
        return TopicRecord(
            _int("UnixSec", parts[2], 0, MAX_UNIX_SEC),
            _name("InstanceID", parts[3]),
            _name("ClientID", parts[4]),
            _int("Partitions", parts[5], 1, MAX_PARTITION),
            placed=not v1,
        )
    if kind == "GroupSettings" and n in (9, 11, 12, 13) and parts[1] == "1":
        try:
            partitioner = Partitioner(parts[7])
        except ValueError:
            raise DecodeError(f"unknown partitioner {parts[7][:20]!r}") from None
        admins = parts[8]
        ids = None
        if admins != ANY:
            ids = frozenset(_name("AdminIds", i) for i in admins.split(",") if i)
        return GroupSettings(
            _int("UnixSec", parts[2], 0, MAX_UNIX_SEC),
            _name("InstanceID", parts[3]),
            _name("ClientID", parts[4]),
            _name("GroupID", parts[5]),
            _int("HeartbeatMs", parts[6], 1, MAX_HEARTBEAT_MS),
            partitioner,
            ids,
            _slicing(parts[9:11]),
            _placement_field(parts, partitioner),
            _mode(parts[12]) if n == 13 else None,
        )
    raise DecodeError(f"not a metadata record: {value[:40]!r}")


def _slicing(fields: list[str]) -> Slicing:
    if not fields:
        return Slicing()
    try:
        count = _int("WorkersPerPartition", fields[1], 1, MAX_SLICES)
        return Slicing(Ordering(fields[0]), count)
    except ValueError as exc:
        raise DecodeError(f"bad ordering: {str(exc)[:80]}") from None


def _placement_field(parts: list[str], partitioner: Partitioner) -> Placement | None:
    """The twelfth field: none in a record of 9 or 11, ``spread`` (None) only beside a mode."""
    if len(parts) < 12 or (len(parts) == 13 and parts[11] == "spread"):
        return None
    return _placement(parts[11], partitioner)


def _mode(field: str) -> Mode:
    try:
        return Mode(field)
    except ValueError:
        raise DecodeError(f"unknown mode {field[:20]!r}") from None


def _placement(field: str, partitioner: Partitioner) -> Placement:
    numbers = field.split(":")
    if len(numbers) != 4:
        raise DecodeError(f"placement {field[:40]!r} is not first:span:partitions:token_base")
    first, span, partitions = (_int("Placement", x, 0, MAX_PARTITION) for x in numbers[:3])
    base = _int("Placement", numbers[3], 0, MAX_OFFSET, digits=19)
    problem = placement_problem(partitions, first, span, base)
    if problem is not None:
        raise DecodeError(problem)
    return Placement(partitions, first, span, base, partitioner)


# ---- checks ------------------------------------------------------------------------------


def partition_count_problem(topic: str, recorded: int | None, actual: int) -> str | None:
    """Why a coordination topic with ``actual`` partitions must not be used, or None."""
    if recorded is None:
        return (
            f"coordination topic {topic} has no recorded partition count: run "
            "`marshal-admin init` on it once (it records the count the fleet must keep)"
        )
    if recorded != actual:
        return (
            f"coordination topic {topic} has {actual} partitions but {recorded} were recorded "
            "at init: claims would move to other partitions; refusing (see docs/operating.md, "
            "'Changing the coordination topic')"
        )
    return None


def _admins_shown(ids: frozenset[str] | None) -> str:
    return "any client (*)" if ids is None else f"[{', '.join(sorted(ids))}]"


def settings_differences(group: GroupSettings, mine: GroupSettings) -> list[str]:
    """Each shared setting in which ``mine`` differs from the ``group``'s, with both values."""
    out = []
    if group.heartbeat_interval_ms != mine.heartbeat_interval_ms:
        out.append(
            f"heartbeat_interval is {mine.heartbeat_interval_ms / 1000:g}s here but "
            f"{group.heartbeat_interval_ms / 1000:g}s in group {group.group_id}'s settings"
        )
    if group.partitioner is not mine.partitioner:
        out.append(
            f"partitioner is {mine.partitioner.value} here but {group.partitioner.value} in "
            f"group {group.group_id}'s settings"
        )
    if group.admin_client_ids != mine.admin_client_ids:
        out.append(
            f"admin_client_ids is {_admins_shown(mine.admin_client_ids)} here but "
            f"{_admins_shown(group.admin_client_ids)} in group {group.group_id}'s settings"
        )
    if mine.slicing is not None and group.slicing is not None and mine.slicing != group.slicing:
        out.append(
            f"ordering is {describe_slicing(mine.slicing)} here but "
            f"{describe_slicing(group.slicing)} in group {group.group_id}'s settings (a group's "
            "ordering is fixed by its first member: another cut would let two workers take one "
            "record)"
        )
    if mine.mode is not None and group.mode is not None and mine.mode is not group.mode:
        out.append(
            f"mode is {mine.mode.value} here but {group.mode.value} in group {group.group_id}'s "
            "settings (members of two modes in one group skip records or hand them out twice)"
        )
    if group.placement != mine.placement:
        out.append(
            f"placement is {placement_text(mine.placement)} here but "
            f"{placement_text(group.placement)} in group {group.group_id}'s settings (where the "
            "group's claims are coordinated: members that disagree would claim one partition "
            "on two coordination partitions)"
        )
    return out


def needs_recording(group: GroupSettings | None, mine: GroupSettings) -> bool:
    """Whether a member records ``mine`` over the ``group``'s settings on a partition (its
    start, once they differ in nothing): there are none, or they have no mode and ``mine``
    has (a group from before modes were recorded)."""
    return group is None or (group.mode is None and mine.mode is not None)


def placement_moved(group: GroupSettings, mine: GroupSettings) -> bool:
    """Whether ``mine`` differs from the ``group``'s settings in the placement only (an
    operator moved the group: a member restarted with its own settings joins the new one)."""
    return group.placement != mine.placement and not settings_differences(
        group, replace(mine, placement=group.placement)
    )


def moved_text(group: GroupSettings, mine: GroupSettings) -> str:
    """What a member whose group was moved (`placement_moved`) says as it stops: the operator
    did what the settings line would tell them to do; the member is to be started again."""
    return (
        f"group {group.group_id} was moved (placement {placement_text(mine.placement)} here, "
        f"{placement_text(group.placement)} in its settings: marshal-admin group-settings "
        "--move): stopping; restarted, the member locates it there"
    )


def describe_slicing(cut: Slicing) -> str:
    """The ordering and workers per partition, as words."""
    if not cut.sliced:
        return cut.ordering.value
    return f"{cut.ordering.value} with {cut.count} workers per partition"


def recorded_problem(recorded: Iterable[GroupSettings | None], mine: GroupSettings) -> str | None:
    """The first `settings_problem` of ``mine`` with the group's settings as each coordination
    partition recorded them (None where one has none), or None."""
    for group in recorded:
        problem = settings_problem(group, mine)
        if problem is not None:
            return problem
    return None


def settings_problem(group: GroupSettings | None, mine: GroupSettings) -> str | None:
    """One line saying why ``mine`` may not act on the group, or None (also when the group has
    no settings recorded yet)."""
    if group is None:
        return None
    diffs = settings_differences(group, mine)
    if not diffs:
        return None
    more = f" (and {len(diffs) - 1} more: {'; '.join(diffs[1:])})" if len(diffs) > 1 else ""
    cut = mine.slicing is not None and group.slicing is not None and mine.slicing != group.slicing
    if cut and len(diffs) == 1:  # fixed for the group's life: nothing to change fleet-wide
        return (
            f"{diffs[0]}: start this member with the group's ordering and workers per "
            "partition (another cut needs a new group: docs/ordering.md)"
        )
    also = "; start this member with the group's ordering" if cut else ""
    return (
        f"{diffs[0]}{more}: every member and admin of a group must share it; change it "
        f"fleet-wide with `marshal-admin group-settings` (docs/operating.md){also}"
    )
