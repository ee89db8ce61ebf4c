"""Hostile coordination records: whatever a writer with Write on the coordination topic appends,
every reader (the fold, `status` as text and JSON, `dump`, `group-settings`, the audit's rows,
the Go fold) counts it as malformed or takes it within bounds; nothing else escapes."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from marshal_workers.admin.dump import dump_entry, dump_line
from marshal_workers.admin.group_settings import describe
from marshal_workers.audit import arrow
from marshal_workers.audit.local import run_local
from marshal_workers.audit.model import AuditConfig, FileInput
from marshal_workers.audit.summary import summarize
from marshal_workers.config.timearg import TimeArgError, parse_time_ms
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.gofold import as_worlds, fold_all
from marshal_workers.protocol.groupstatus import group_status, iso_ms, render_table
from marshal_workers.protocol.metadata import GroupSettings, TopicRecord, decode_metadata
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.recordfailures import PoisonVerdict, decode_poison
from marshal_workers.protocol.wire import (
    CoordRecord,
    DecodeError,
    ReleaseGroup,
    decode,
    validate_name,
)
from tests.support import HB

INT64_MAX = 2**63 - 1
YEAR_10000_S = 253_402_300_800  # 10000-01-01T00:00:00Z: no date can show it
LAST_SECOND = YEAR_10000_S - 1  # 9999-12-31T23:59:59Z
DIGITS_4301 = "9" * 4301  # one past Python's default limit for int(str)
PROPERTY = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))

# Each message type with every integer field a placeholder: {s} UnixSec, {p} Partition, {o} the
# last integer (Offset, MsgExpireTime, Partitions, HeartbeatMs, Failures), and its key.
TEMPLATES = {
    "Heartbeat": ("g/t/{p}", "Heartbeat/1/{s}/i/c/g/t/{p}/{o}"),
    "ClaimingPartition": ("g/t/{p}/claim", "ClaimingPartition/1/{s}/i/c/g/t/{p}"),
    "ReleasingPartition": ("g/t/{p}", "ReleasingPartition/1/{s}/i/c/g/t/{p}/{o}"),
    "ClaimingMessages": ("g/t/{p}", "ClaimingMessages/1/{s}/i/c/g/t/{p}/{o}"),
    "ReleaseGroup": ("g/pause/{o}/i/{s}", "ReleaseGroup/1/{s}/i/c/g/t/{p}/{o}"),
    "CoordinationTopic": ("/coordination-topic", "CoordinationTopic/1/{s}/i/c/{o}"),
    "GroupSettings": ("g//settings", "GroupSettings/1/{s}/i/c/g/{o}/spec/*"),
    "RecordFailed": ("g/t/{p}/poison", "RecordFailed/1/{s}/i/c/g/t/{p}/{o}/{o}/parked/e"),
    "PoisonResolved": ("g/t/{p}/poison/decision", "PoisonResolved/1/{s}/i/c/g/t/{p}/{o}/skip"),
}


def _record(kind: str, offset: int = 0, t: int = 1_000, **fields: str) -> CoordRecord:
    values = {"s": "1", "p": "0", "o": "5", **fields}
    key, value = TEMPLATES[kind]
    return CoordRecord(0, offset, t, key.format(**values).encode(), value.format(**values).encode())


def _everything_renders(records: list[CoordRecord]) -> tuple[World, list[ev.Event]]:
    """Fold ``records`` as a member and the admin commands do, then render what they render:
    status (text and JSON) of every group named, at several clocks, every dump line, every
    group's settings line, the audit's rows and summary, and the Go fold's status. Returns the
    world and the events; any exception fails the caller."""
    world = World(RationalizerConfig(HB, num_partitions=1, admin_client_ids=None), 0)
    events = [fold(world, r) for r in records]
    for record, event in zip(records, events, strict=True):
        dump_line(record, event)
        json.dumps(dump_entry(record, event))
        if isinstance(event, ev.GroupSettingsRecorded):
            describe(event.settings)
    groups = {k.group for k in world.claims} | set(world.pauses) | set(world.group_settings)
    groups |= {k.group for k in world.poison}
    go = as_worlds(fold_all(records))
    for group in groups | {k.group for k in go[0].claims}:
        for now in (0, world.log_time, LAST_SECOND * 1000):
            for worlds in ({0: world}, go):
                status = group_status(group, worlds, HB, now, {("t", 0): 7})
                render_table(status)
                json.dumps(status.to_json())
    config = AuditConfig(FileInput(Path("-")), Path("-"), HB, report=False)
    result, tables = run_local(records, config)
    json.dumps(summarize(result))
    arrow.packed_batch(tables)
    return world, events


# ---- the defects, one by one ---------------------------------------------------------------


INT_FIELDS = [(k, f) for k in sorted(TEMPLATES) for f in "spo" if f"{{{f}}}" in TEMPLATES[k][1]]


@pytest.mark.parametrize(("kind", "field"), INT_FIELDS)
def test_an_integer_field_of_4301_digits_is_counted_malformed(kind: str, field: str) -> None:
    """A 4.3 KB integer field (past Python's int(str) limit) is a malformed record, whatever
    the message type and field, and every reader goes on."""
    record = _record(kind, **{field: DIGITS_4301})
    world, events = _everything_renders([record])
    assert isinstance(events[0], ev.Malformed), events[0]
    assert world.malformed == 1
    assert len(events[0].reason) < 200  # the reason shows a bounded piece of the field


@pytest.mark.parametrize("until", [YEAR_10000_S, INT64_MAX, int(DIGITS_4301[:19])])
def test_a_pause_ending_past_year_9999_is_malformed(until: int) -> None:
    """A pause whose end no date can show (past 9999-12-31, up to INT64_MAX) is malformed: no
    group is paused by it and status renders."""
    world, events = _everything_renders([_record("ReleaseGroup", o=str(until))])
    assert isinstance(events[0], ev.Malformed)
    assert world.pauses == {}


def test_a_pause_ending_in_the_last_second_of_9999_pauses_and_renders() -> None:
    """The last second a date can show is a valid pause end, and status shows it."""
    world, events = _everything_renders([_record("ReleaseGroup", o=str(LAST_SECOND))])
    assert isinstance(events[0], ev.GroupPaused)
    status = group_status("g", {0: world}, HB, 2_000, {})
    assert "paused by c until 9999-12-31T23:59:59.000Z" in render_table(status)


@pytest.mark.parametrize("kind", ["Heartbeat", "ClaimingPartition", "RecordFailed"])
def test_a_unix_sec_past_year_9999_is_malformed(kind: str) -> None:
    """The sender's UnixSec is shown (dump, the Go fold's status): past 9999 it is malformed."""
    _, events = _everything_renders([_record(kind, s=str(YEAR_10000_S))])
    assert isinstance(events[0], ev.Malformed)
    _, events = _everything_renders([_record(kind, s=str(LAST_SECOND))])
    assert not isinstance(events[0], ev.Malformed)


@pytest.mark.parametrize("kind", ["Heartbeat", "ClaimingPartition", "RecordFailed"])
def test_a_partition_past_kafkas_32_bits_is_malformed(kind: str) -> None:
    """A data partition is a Kafka partition: 2**31 and above is malformed."""
    _, events = _everything_renders([_record(kind, p=str(2**31))])
    assert isinstance(events[0], ev.Malformed)
    _, events = _everything_renders([_record(kind, p=str(2**31 - 1))])
    assert not isinstance(events[0], ev.Malformed)


def test_a_go_record_past_year_9999_is_malformed_for_the_go_fold() -> None:
    """The Go fold (status and dump of a Go fleet's topic) decides on UnixSec: past 9999 it is
    malformed there too, and its status renders."""
    records = [_record("ClaimingPartition", s=str(YEAR_10000_S)), _record("Heartbeat", 1)]
    world = fold_all(records)
    assert world.malformed == 1
    _everything_renders(records)


@pytest.mark.parametrize("field", ["i", "c", "g", "t"])
def test_a_name_longer_than_the_bound_is_malformed(field: str) -> None:
    """An id, group or topic field of 100 KB is malformed (names are bounded on decode)."""
    long = "x" * 100_000
    names = {"i": long, "c": "c", "g": "g", "t": "t"} | {field: long}
    value = "Heartbeat/1/1/{i}/{c}/{g}/{t}/0/5".format(**names)
    record = CoordRecord(0, 0, 1_000, f"{names['g']}/{names['t']}/0".encode(), value.encode())
    _, events = _everything_renders([record])
    assert isinstance(events[0], ev.Malformed)
    assert len(events[0].reason) < 400


def test_a_poison_error_longer_than_the_escaped_bound_is_malformed() -> None:
    """A RecordFailed's Error field is at most what `escape` writes (3 characters per one of
    200); a megabyte of it is malformed, never unescaped."""
    value = b"RecordFailed/1/1/i/c/g/t/0/5/1/parked/" + b"%41" * 200
    assert decode_poison(value).error == "A" * 200
    with pytest.raises(DecodeError):
        decode_poison(value + b"x")
    with pytest.raises(DecodeError):
        decode_poison(b"RecordFailed/1/1/i/c/g/t/0/5/1/parked/" + b"x" * 1_000_000)


def test_group_settings_bounds() -> None:
    """A recorded heartbeat interval is at most a year; a topic record's count fits Kafka's
    32 bits; each admin id is a valid name."""
    year_ms = 365 * 24 * 3600 * 1000
    assert isinstance(
        decode_metadata(_record("GroupSettings", o=str(year_ms)).value), GroupSettings
    )
    for bad in (str(year_ms + 1), "999999999999999999"):
        with pytest.raises(DecodeError):
            decode_metadata(_record("GroupSettings", o=bad).value)
    assert isinstance(
        decode_metadata(_record("CoordinationTopic", o=str(2**31 - 1)).value), TopicRecord
    )
    with pytest.raises(DecodeError):
        decode_metadata(_record("CoordinationTopic", o=str(2**31)).value)
    with pytest.raises(DecodeError):
        decode_metadata(b"GroupSettings/1/1/i/c/g/1000/spec/a,b\tc")


def test_a_log_time_past_year_9999_is_malformed_and_moves_no_clock() -> None:
    """A record stamped past 9999 (only a topic with CreateTime lets a writer choose its
    timestamp) is malformed, and the fold's log time stays where it was."""
    first = _record("ClaimingPartition", 0, t=5_000)
    hostile = _record("Heartbeat", 1, t=INT64_MAX)
    world, events = _everything_renders([first, hostile])
    assert isinstance(events[1], ev.Malformed)
    assert world.log_time == 5_000


@pytest.mark.parametrize(
    "ms", [-(2**63), -1, 0, LAST_SECOND * 1000 + 999, YEAR_10000_S * 1000, INT64_MAX]
)
def test_iso_ms_shows_any_integer(ms: int) -> None:
    """Every time a reader shows is shown, even one no date can hold."""
    assert iso_ms(ms)


# ---- the property ---------------------------------------------------------------------------

EXTREME_INTS = st.one_of(
    st.sampled_from(
        [0, 1, 2**31 - 1, 2**31, LAST_SECOND, YEAR_10000_S, INT64_MAX, 2**63, 2**64]
    ).map(str),
    st.integers(min_value=0, max_value=2**70).map(str),
    st.integers(min_value=19, max_value=6000).map(lambda n: "9" * n),
    st.sampled_from(["", "-1", "01", "1e3", "١٢", "0x10", " 1"]),
)
NAMES = st.one_of(
    st.sampled_from(["g", "h", "c", "i", "t", "t+key.0of2", "t+key.1of99999999999999999999999"]),
    st.text(min_size=0, max_size=40),
    st.integers(min_value=250, max_value=5000).map(lambda n: "n" * n),
)
TIMES = st.one_of(
    st.integers(min_value=0, max_value=10_000),
    st.sampled_from([-1, LAST_SECOND * 1000 + 999, YEAR_10000_S * 1000, INT64_MAX]),
    st.integers(min_value=-(2**63), max_value=INT64_MAX),
)


@st.composite
def hostile_record(draw: st.DrawFn) -> tuple[bytes | None, bytes | None, int]:
    """A record as a hostile writer appends it: arbitrary bytes, or one of the record types
    with extreme integers and names, under its right key (so that only its fields decide)."""
    t = draw(TIMES)
    if draw(st.booleans()) and draw(st.booleans()):
        key = draw(st.one_of(st.none(), st.binary(max_size=80)))
        return key, draw(st.one_of(st.none(), st.binary(max_size=200))), t
    kind = draw(st.sampled_from(sorted(TEMPLATES)))
    g, topic, client = draw(NAMES), draw(NAMES), draw(NAMES)
    fields = {"s": draw(EXTREME_INTS), "p": draw(EXTREME_INTS), "o": draw(EXTREME_INTS)}
    key, value = (part.format(**fields) for part in TEMPLATES[kind])
    key = key.replace("g/", f"{g}/", 1).replace("/t/", f"/{topic}/", 1)
    value = value.replace("/c/g/", f"/{client}/{g}/", 1).replace("/t/", f"/{topic}/", 1)
    return key.encode(), value.encode(), t


def _bounded(event: ev.Event) -> None:
    """A record taken as valid carries only fields within the bounds."""
    message = getattr(event, "message", None)
    if isinstance(event, ev.GroupSettingsRecorded | ev.TopicRecorded):
        message = getattr(event, "settings", None) or getattr(event, "record", None)
    if message is None:
        return
    for name in ("instance_id", "client_id", "group_id"):
        value = getattr(message, name, None)
        assert value is None or 0 < len(value) <= 255, (name, len(value))
    topic = getattr(message, "topic", "")
    assert len(topic) <= 300
    assert 0 <= getattr(message, "unix_sec", 0) <= LAST_SECOND
    assert 0 <= getattr(message, "partition", 0) < 2**31
    assert 0 <= getattr(message, "offset", 0) <= INT64_MAX
    if isinstance(message, ReleaseGroup):
        assert message.expire_time <= LAST_SECOND
    if isinstance(event, PoisonVerdict):
        assert 0 <= event.message.offset <= INT64_MAX


@PROPERTY
@given(st.lists(hostile_record(), min_size=1, max_size=12))
def test_hostile_records_are_counted_malformed_or_taken_within_bounds(
    drawn: list[tuple[bytes | None, bytes | None, int]],
) -> None:
    """Arbitrary bytes and extreme-but-well-formed records of every type: decode, the fold,
    status (text and JSON), dump, group settings, the audit's rows and the Go fold never raise;
    a record is either a counted malformed one or within bounds."""
    records = [CoordRecord(0, i, t, key, value) for i, (key, value, t) in enumerate(drawn)]
    for record in records:
        with contextlib.suppress(DecodeError):
            decode(record.value)
    world, events = _everything_renders(records)
    assert world.malformed == sum(isinstance(e, ev.Malformed) for e in events)
    for event in events:
        _bounded(event)


def test_what_a_member_or_admin_writes_stays_within_the_bounds() -> None:
    """The bounds a reader decodes by are refused where they are configured: an id or group
    longer than 255 characters, a time past 9999 (`release-group --until`, audit windows)."""
    validate_name("client id", "c" * 255)
    with pytest.raises(ValueError, match="longer than 255"):
        validate_name("client id", "c" * 256)
    assert parse_time_ms(str(LAST_SECOND)) == LAST_SECOND * 1000
    with pytest.raises(TimeArgError, match="after the year 9999"):
        parse_time_ms(str(YEAR_10000_S))
    with pytest.raises(TimeArgError, match="after the year 9999"):
        parse_time_ms("1e400")
