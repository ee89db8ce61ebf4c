"""The audit's fold per claim gives every record the partition fold's verdict, and the same
tables, on multi-group logs with pauses, settings, poison, keyless, misplaced and malformed
records, compacted."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from marshal_workers.audit.claimfold import ClaimFold, fold_by_claim, folds, route
from marshal_workers.audit.finalize import merge_coordination, merge_groups
from marshal_workers.audit.fold import FoldSettings, Worlds, fold_records
from marshal_workers.audit.heartbeats import from_records
from marshal_workers.audit.placed import Placed, annotate, annotated_log
from marshal_workers.audit.tables import Row
from marshal_workers.protocol import recordfailures as rf
from marshal_workers.protocol.metadata import (
    GroupSettings,
    TopicRecord,
    encode_metadata,
    metadata_key,
)
from marshal_workers.protocol.placement import Placement
from marshal_workers.protocol.rationalizer import RationalizerConfig
from marshal_workers.protocol.recordfailures import (
    Action,
    Outcome,
    PoisonResolved,
    RecordFailed,
    encode_poison,
    poison_record_key,
)
from marshal_workers.protocol.wire import (
    MAX_LOG_TIME_MS,
    ClaimingMessages,
    ClaimingPartition,
    CoordRecord,
    Heartbeat,
    Partitioner,
    ReleaseGroup,
    ReleasingPartition,
    coordination_partition,
    encode,
    legacy_pause_keys,
    record_key,
)

HB = 1000
COORD = 3
GROUPS = ("g", "h", "gg")
PROPERTY = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KINDS = (
    "claim", "claim", "hb", "hb", "hb", "release", "reserve", "pause", "legacy-pause",
    "settings", "placed-settings", "pin", "failed", "resolved", "keyless", "garbage",
    "foreign-key", "misplaced",
)  # fmt: skip


@st.composite
def logs(draw: st.DrawFn) -> list[CoordRecord]:
    """Several coordination partitions of several groups (each claim's records on its home
    partition, but for misplaced ones): claims, heartbeats, releases, reservations, pauses
    (under legacy keys too), settings of two heartbeat intervals, placed settings (a change
    accepted only under its writer's pause), poison counts and decisions,
    the pinned count, keyless and garbage records; log time mostly forward, sometimes back or
    past any broker's clock; offsets with gaps now and then."""
    out: list[CoordRecord] = []
    offsets, t = [0] * COORD, 0
    for _ in range(draw(st.integers(1, 60))):
        group = draw(st.sampled_from(GROUPS))
        client = draw(st.sampled_from(["a", "b"]))
        inst = f"{client}-{draw(st.integers(1, 2))}"
        part = draw(st.integers(0, 3))
        at = draw(st.integers(0, 30))
        kind = draw(st.sampled_from(KINDS))
        coord = coordination_partition("t", part, COORD, Partitioner.SPEC)
        key: bytes | None
        value: bytes | None
        if kind in ("claim", "hb", "release", "reserve", "keyless", "foreign-key", "misplaced"):
            msg = {
                "claim": ClaimingPartition(0, inst, client, group, "t", part),
                "release": ReleasingPartition(0, inst, client, group, "t", part, at),
                "reserve": ClaimingMessages(0, inst, client, group, "t", part, at),
            }.get(kind, Heartbeat(0, inst, client, group, "t", part, at))
            value, key = encode(msg), record_key(msg)
            if kind == "keyless":
                key = None
            elif kind == "foreign-key":  # another claim's key on this message: malformed
                key = record_key(replace(msg, group_id=draw(st.sampled_from(GROUPS))))
            elif kind == "misplaced":  # on another coordination partition than its home
                coord = (coord + draw(st.integers(1, COORD - 1))) % COORD
        elif kind in ("pause", "legacy-pause"):
            pause = ReleaseGroup(t // 1000, inst, client, group, "", 0, t // 1000 + at % 5)
            value = encode(pause)
            key = record_key(pause) if kind == "pause" else legacy_pause_keys(pause)[part % 2]
            coord = draw(st.integers(0, COORD - 1))
        elif kind == "settings":
            meta = GroupSettings(0, inst, client, group, HB * (1 + at % 2), Partitioner.SPEC, None)
            key, value = metadata_key(meta), encode_metadata(meta)
            coord = draw(st.integers(0, COORD - 1))
        elif kind == "placed-settings":  # changes accepted only under the writer's pause
            where = Placement(COORD, at % COORD, 1)
            meta = GroupSettings(t // 1000, inst, client, group, HB, Partitioner.SPEC, None,
                                 placement=where)  # fmt: skip
            key, value = metadata_key(meta), encode_metadata(meta)
            coord = draw(st.sampled_from([where.first, where.first, (where.first + 1) % COORD]))
        elif kind == "pin":
            pin = TopicRecord(0, inst, client, COORD)
            key, value = metadata_key(pin), encode_metadata(pin)
            coord = draw(st.sampled_from([0, 0, 1]))
        elif kind in ("failed", "resolved"):
            poison = (
                RecordFailed(0, inst, client, group, "t", part, at, 1 + at % 3, Outcome.RETRY, "e")
                if kind == "failed"
                else PoisonResolved(0, inst, client, group, "t", part, at, Action.RETRY)
            )
            key, value = poison_record_key(poison), encode_poison(poison)
        else:
            key = draw(st.sampled_from([b"", b"g", b"g/", b"/x", b"gg/t/0", None]))
            value = draw(
                st.sampled_from([b"Heartbeat/1/x", b"ReleaseGroup", b"GroupSettings/1", b"", None])
                | st.binary(max_size=20)
            )
            coord = draw(st.integers(0, COORD - 1))
        step = draw(st.sampled_from([0, 1, HB // 2, HB, 2 * HB + 1, 3 * HB, -HB, "future"]))
        stamp = t
        if step == "future":  # a writer's clock on a CreateTime topic: refused, no clamp
            stamp = MAX_LOG_TIME_MS + 1
        else:
            t = stamp = max(0, t + int(step))
        offsets[coord] += draw(st.sampled_from([1, 1, 1, 1, 2, 5]))
        out.append(CoordRecord(coord, offsets[coord] - 1, stamp, key, value))
    return out


def compacted(log: list[CoordRecord], cut: int) -> list[CoordRecord]:
    """``log`` after Kafka's cleaner ran over its first ``cut`` records (in write order): in
    that prefix each partition keeps the newest record per key; offsets keep their gaps."""
    head, tail = log[:cut], log[cut:]
    newest = {(r.partition, r.key): r.offset for r in head}
    return [r for r in head if newest[(r.partition, r.key)] == r.offset] + tail


def fold_settings(log: list[CoordRecord], admins: bool, pinned: bool) -> FoldSettings:
    """What the audit folds ``log`` with (`AuditConfig.with_heartbeats`, `rationalizer`)."""
    heartbeats = from_records(annotated_log(log), None, HB)
    config = RationalizerConfig(
        heartbeats.default_ms,
        num_partitions=COORD if pinned else None,
        admin_client_ids=frozenset({"a"}) if admins else None,
    )
    return FoldSettings(config, heartbeats=heartbeats)


def partition_events(log: list[CoordRecord], s: FoldSettings) -> dict[tuple[int, int], Any]:
    """Each record's event in the partition fold (each partition in offset order)."""
    out = {}
    for p in sorted({r.partition for r in log}):
        worlds = Worlds(s, p)
        for r in sorted((r for r in log if r.partition == p), key=lambda r: r.offset):
            out[(p, r.offset)] = worlds.verdict(r)
    return out


def claim_events(log: list[CoordRecord], s: FoldSettings) -> dict[tuple[int, int], Any]:
    """Each record's event in the fold per claim: reported once, in one fold only."""
    out = {}
    own, context = folds(log)
    for key, placed in own.items():
        one = ClaimFold(s, key, context)
        for p in placed:
            event = one.fold(p)
            where = (key[0], p.record.offset)
            assert where not in out, f"{where} reported twice"
            out[where] = (one.tables.hb, event)
    return out


def merged(tables: dict[str, list[Row]]) -> dict[str, list[str]]:
    """Every table as a sorted list, the parts of coordination and groups rows merged."""
    out = dict(tables)
    out["coordination"] = merge_coordination(out.get("coordination", []))
    out["groups"] = merge_groups(out.get("groups", []), out.get("group_keys", []))
    return {name: sorted(map(repr, rows)) for name, rows in out.items() if rows}


@PROPERTY
@given(
    logs(),
    st.integers(0, 60),
    st.integers(0, 60),
    st.booleans(),
    st.booleans(),
)
def test_every_record_gets_the_partition_folds_event_and_the_tables_are_the_same(
    log: list[CoordRecord], cut: int, cut_again: int, admins: bool, pinned: bool
) -> None:
    """Compacted twice (or not at all: cuts of 0), every record's verdict (and the heartbeat
    interval it was judged with) per claim equals the partition fold's, every record is
    reported exactly once, and every table is the same once the parts are merged."""
    log = compacted(compacted(log, cut), cut_again)
    s = fold_settings(log, admins, pinned)
    assert claim_events(log, s) == partition_events(log, s)
    assert merged(fold_by_claim(log, s)) == merged(fold_records(log, s))


def _beat(offset: int, t: int, inst: str = "a-1", part: int = 0) -> CoordRecord:
    msg = Heartbeat(0, inst, "a", "g", "t", part, offset)
    return CoordRecord(0, offset, t, record_key(msg), encode(msg))


def _claim(offset: int, t: int, inst: str = "a-1", part: int = 0) -> CoordRecord:
    msg = ClaimingPartition(0, inst, "a", "g", "t", part)
    return CoordRecord(0, offset, t, record_key(msg), encode(msg))


def _failed(offset: int, t: int) -> CoordRecord:
    msg = RecordFailed(0, "a-1", "a", "g", "t", 0, 7, 1, Outcome.RETRY, "boom")
    return CoordRecord(0, offset, t, poison_record_key(msg), encode_poison(msg))


class TestGaps:
    def test_a_poison_record_after_two_gaps_gets_the_same_verdict(self) -> None:
        """A claim folded, then two gaps (on another claim's records), then a poison record of
        the claim: the partition fold marked the claim uncertain at the first gap (a poison
        record marks nothing), the fold per claim at the second; the poison record reads only
        that it is uncertain, so its verdict is the same."""
        log = [
            _claim(0, 1_000),
            _beat(1, 1_100),
            _claim(5, 2_000, part=1),  # gap 1, at 2 s
            _beat(9, 9_000, part=1),  # gap 2, at 9 s
            _failed(10, 9_500),
        ]
        s = FoldSettings(RationalizerConfig(HB))
        want = partition_events(log, s)
        assert claim_events(log, s) == want
        poison = want[(0, 10)][1]
        assert isinstance(poison, rf.PoisonNoted)

    def test_an_admins_claim_under_its_pause_is_by_admin_in_the_claims_fold(self) -> None:
        """The pause travels to the claim's fold as context: the admin's claim interval there
        is marked ``by_admin`` (the tables took the pause), as in the partition fold, and the
        pause is reported once."""
        pause = ReleaseGroup(1, "a-1", "a", "g", "", 0, 100)
        hold = [
            CoordRecord(0, 0, 1_000, record_key(pause), encode(pause)),
            _claim(1, 1_100),
        ]
        take = ClaimingMessages(0, "a-1", "a", "g", "t", 0, 5)
        free = ReleasingPartition(0, "a-1", "a", "g", "t", 0, 5)
        log = [
            *hold,
            CoordRecord(0, 2, 1_200, record_key(take), encode(take)),
            CoordRecord(0, 3, 1_300, record_key(free), encode(free)),
        ]
        s = FoldSettings(RationalizerConfig(HB, admin_client_ids=frozenset({"a"})))
        want = merged(fold_records(log, s))
        assert merged(fold_by_claim(log, s)) == want
        assert "True)" in want["claims"][0]  # by_admin, the last column

    def test_placed_settings_written_behind_the_log_time_get_the_partition_folds_verdict(
        self,
    ) -> None:
        """A placed group's changed settings, by the admin whose pause ended before the log
        time, stamped before that end (log time steps back): the partition fold refuses them
        at its clamped log time, and so must each claim's fold that takes them as context.
        (It judged them at its own last record's log time, under the pause: accepted, and the
        claim's later records judged with the refused settings' heartbeat interval.)"""

        def settings_at(offset: int, t: int, first: int) -> CoordRecord:
            meta = GroupSettings(t // 1000, "a-1", "a", "g", HB, Partitioner.SPEC, None,
                                 placement=Placement(COORD, first, 1))  # fmt: skip
            return CoordRecord(0, offset, t, metadata_key(meta), encode_metadata(meta))

        pause = ReleaseGroup(1, "a-1", "a", "g", "", 0, 5)  # until 5 s
        log = [
            settings_at(0, 1_000, 0),  # placed here
            CoordRecord(0, 1, 1_000, record_key(pause), encode(pause)),
            _claim(2, 1_100),
            _beat(3, 9_000, inst="b-1", part=1),  # log time 9 s: the pause has ended
            settings_at(4, 2_000, 1),  # moved, stamped 2 s, under the pause's end: refused
            _beat(5, 9_100),
            _beat(6, 9_200),
        ]
        s = FoldSettings(RationalizerConfig(HB, num_partitions=COORD))
        want = partition_events(log, s)
        assert type(want[(0, 4)][1]).__name__ == "Malformed"
        assert claim_events(log, s) == want
        assert merged(fold_by_claim(log, s)) == merged(fold_records(log, s))

    def test_annotations_known_answers(self) -> None:
        """Log time is the running clamp (a stamp past any clock refused); a gap is an offset
        past the previous + 1 (or a first offset above 0); a repeated offset is behind."""
        rs = [
            CoordRecord(0, 2, 50, None, b"x"),
            CoordRecord(0, 3, 40, None, b"x"),
            CoordRecord(0, 3, 90, None, b"x"),
            CoordRecord(0, 6, MAX_LOG_TIME_MS + 5, None, b"x"),
            CoordRecord(0, 7, 70, None, b"x"),
        ]
        got = [(p.log_time, p.gap_offset, p.gap_time, p.behind) for p in annotate(rs)]
        assert got == [
            (50, 2, 50, False),
            (50, 2, 50, False),
            (50, 2, 50, True),
            (50, 6, 50, False),
            (70, 6, 50, False),
        ]
        assert isinstance(annotate(rs)[0], Placed)


class TestRoute:
    def test_routes(self) -> None:
        """A claim's record to its claim, a pause or settings to its group, the rest nowhere."""
        beat = encode(Heartbeat(0, "i", "c", "g", "t", 7, 3))
        assert route(beat) == ("g", "t", 7)
        poison = encode_poison(PoisonResolved(0, "i", "c", "g", "t", 7, 3, Action.SKIP))
        assert route(poison) == ("g", "t", 7)
        pause = encode(ReleaseGroup(0, "i", "c", "g", "", 0, 9))
        assert route(pause) == ("g", None, None)
        meta = encode_metadata(GroupSettings(0, "i", "c", "g", HB, Partitioner.SPEC, None))
        assert route(meta) == ("g", None, None)
        for other in (None, b"", b"Heartbeat/1/2", b"Heartbeat/1/0/i/c/g/t/x/3", b"\xff/1"):
            assert route(other) == (None, None, None)
        assert route(encode_metadata(TopicRecord(0, "i", "c", 4))) == (None, None, None)
