"""The fold of a placed group: first-writer-wins settings, where its records belong, its tokens."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from marshal_workers.protocol import events as ev
from marshal_workers.protocol.metadata import (
    GroupSettings,
    encode_metadata,
    metadata_key,
    settings_records,
)
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.placement import Placement, PlacementBook, spread
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold, placement_on
from marshal_workers.protocol.slicing import WHOLE
from marshal_workers.protocol.wire import (
    CoordRecord,
    Partitioner,
    ReleaseGroup,
    coordination_partition,
)
from tests.support import GROUP, HB, TOPIC, claim, hb, pause, record

N = 4
ADMIN = "ops"
HERE = 2  # the partition these tests fold
WINDOW = Placement(N, HERE, 1)  # every claim of the group here
ELSEWHERE = Placement(N, 0, 1)
# a data partition whose spread home is not HERE: valid here only when the group is placed
NOBODY = PlacementBook()
PART = next(p for p in range(100) if coordination_partition(TOPIC, p, N) != HERE)


def settings_of(
    client: str, placement: Placement | None, sec: int = 1, hb_ms: int = HB
) -> GroupSettings:
    """``client``'s settings of the group (spread when ``placement`` is None)."""
    cut = WHOLE
    return GroupSettings(sec, f"{client}-1", client, GROUP, hb_ms, Partitioner.SPEC,
                         frozenset({ADMIN}), cut, placement)  # fmt: skip


def meta(s: GroupSettings, offset: int, t: int) -> CoordRecord:
    return CoordRecord(HERE, offset, t, metadata_key(s), encode_metadata(s))


def world(book: PlacementBook | None = None) -> World:
    cfg = RationalizerConfig(
        HB, num_partitions=N, admin_client_ids=frozenset({ADMIN}), placements=book or NOBODY
    )
    return World(cfg, HERE)


class TestFirstWriterWins:
    def test_the_first_placed_record_wins_and_a_different_one_is_refused(self) -> None:
        """Two creators race: the first record on the partition is the group's settings."""
        w = world()
        first = fold(w, meta(settings_of("m1", WINDOW), 0, 10))
        second = fold(w, meta(settings_of("m2", ELSEWHERE), 1, 11))
        assert isinstance(first, ev.GroupSettingsRecorded)
        assert isinstance(second, ev.Malformed) and "refused" in second.reason
        assert w.group_settings[GROUP].placement == WINDOW

    def test_a_copy_is_accepted(self) -> None:
        """The same settings written again (by another member, at another second) are a copy."""
        w = world()
        fold(w, meta(settings_of("m1", WINDOW), 0, 10))
        copy = fold(w, meta(settings_of("m2", WINDOW, sec=5), 1, 11))
        assert isinstance(copy, ev.GroupSettingsRecorded)
        assert w.group_settings[GROUP].placement == WINDOW

    def test_a_member_cannot_change_a_placed_groups_heartbeat(self) -> None:
        """Any shared setting that differs, not only the placement, is refused from a member."""
        w = world()
        fold(w, meta(settings_of("m1", WINDOW), 0, 10))
        e = fold(w, meta(settings_of("m2", WINDOW, hb_ms=2 * HB), 1, 11))
        assert isinstance(e, ev.Malformed)
        assert w.group_settings[GROUP].heartbeat_interval_ms == HB

    def test_an_admin_changes_them_only_under_its_own_pause(self) -> None:
        """The admin's different settings: refused unpaused, accepted under its own pause."""
        w = world()
        fold(w, meta(settings_of("m1", WINDOW), 0, 10))
        assert isinstance(fold(w, meta(settings_of(ADMIN, ELSEWHERE), 1, 11)), ev.Malformed)
        fold(w, record(pause(ADMIN, 100), 2, 12, HERE))
        moved = fold(w, meta(settings_of(ADMIN, ELSEWHERE, sec=3), 3, 13))
        assert isinstance(moved, ev.GroupSettingsRecorded)
        assert w.group_settings[GROUP].placement == ELSEWHERE

    def test_an_admin_is_refused_under_an_expired_pause(self) -> None:
        """The pause must be in force at the record's log time."""
        w = world()
        fold(w, meta(settings_of("m1", WINDOW), 0, 10))
        fold(w, record(pause(ADMIN, 1), 1, 12, HERE))  # ends at 1,000 ms
        e = fold(w, meta(settings_of(ADMIN, ELSEWHERE, sec=3), 2, 1_000))
        assert isinstance(e, ev.Malformed)

    def test_a_legacy_record_after_placed_settings_is_refused(self) -> None:
        """A spread member's settings cannot turn a placed partition back to spread."""
        w = world()
        fold(w, meta(settings_of("m1", WINDOW), 0, 10))
        e = fold(w, CoordRecord(HERE, 1, 11, *_legacy(settings_of("old", None))))
        assert isinstance(e, ev.Malformed) and "placed" in e.reason
        assert w.group_settings[GROUP].placement == WINDOW

    def test_legacy_settings_before_placed_ones_are_replaced(self) -> None:
        """A placed record is judged by the placed records and pauses before it only (they all
        survive the cleaner, a spread record need not): it replaces spread settings."""
        w = world()
        fold(w, CoordRecord(HERE, 0, 10, *_legacy(settings_of("old", None))))
        e = fold(w, meta(settings_of("m1", WINDOW), 1, 11))
        assert isinstance(e, ev.GroupSettingsRecorded)
        assert w.group_settings[GROUP].placement == WINDOW

    def test_legacy_records_keep_newest_wins(self) -> None:
        """Spread groups as ever: the newest record wins, whoever wrote it."""
        w = world()
        fold(w, CoordRecord(HERE, 0, 10, *_legacy(settings_of("a", None))))
        e = fold(w, CoordRecord(HERE, 1, 11, *_legacy(settings_of("b", None, hb_ms=2 * HB))))
        assert isinstance(e, ev.GroupSettingsRecorded)
        assert w.group_settings[GROUP].heartbeat_interval_ms == 2 * HB


def _legacy(s: GroupSettings) -> tuple[bytes, bytes]:
    return metadata_key(s), encode_metadata(s)


class TestWhereRecordsBelong:
    def test_a_placed_groups_claim_is_valid_at_its_placed_home_only(self) -> None:
        """Spread, the claim's home is elsewhere; placed here, it is granted here."""
        w = world()
        assert isinstance(fold(w, record(claim("a", PART), 0, 10, HERE)), ev.Malformed)
        fold(w, meta(settings_of("m1", WINDOW), 1, 11))
        assert isinstance(fold(w, record(claim("a", PART), 2, 12, HERE)), ev.ClaimGranted)

    def test_a_claim_on_a_wrong_partition_of_a_placed_group_is_malformed(self) -> None:
        """Placed elsewhere: a claim here, even at its spread home, is malformed."""
        spread_here = next(p for p in range(100) if coordination_partition(TOPIC, p, N) == HERE)
        w = world()
        fold(w, meta(settings_of("m1", ELSEWHERE), 0, 10))
        e = fold(w, record(claim("a", spread_here), 1, 11, HERE))
        assert isinstance(e, ev.Malformed) and "partition 0" in e.reason

    def test_the_readers_book_places_a_group_without_settings_here(self) -> None:
        """No settings on the partition: what the reader knows of the group decides."""
        w = world(PlacementBook.of({GROUP: WINDOW}))
        assert isinstance(fold(w, record(claim("a", PART), 0, 10, HERE)), ev.ClaimGranted)

    def test_settings_on_the_partition_outrank_the_book(self) -> None:
        """The accepted settings, which every reader of the partition agrees on, decide."""
        w = world(PlacementBook.of({GROUP: WINDOW}))
        fold(w, meta(settings_of("m1", ELSEWHERE), 0, 10))
        assert placement_on(w, GROUP) == ELSEWHERE
        assert isinstance(fold(w, record(claim("a", PART), 1, 11, HERE)), ev.Malformed)

    def test_a_group_known_nowhere_is_spread(self) -> None:
        """Neither settings nor book: today's rule."""
        assert placement_on(world(), GROUP) == spread(N, Partitioner.SPEC)

    def test_a_key_checked_before_a_move_is_checked_again(self) -> None:
        """A claim key's home check is remembered, but not across a change of placement."""
        w = world(PlacementBook.of({GROUP: WINDOW}))
        fold(w, record(claim("a", PART), 0, 10, HERE))
        assert isinstance(fold(w, record(hb("a", 4, PART), 1, 11, HERE)), ev.HeartbeatAccepted)
        fold(w, record(pause(ADMIN, 100), 2, 12, HERE))
        fold(w, meta(settings_of(ADMIN, ELSEWHERE), 3, 13))
        assert isinstance(fold(w, record(hb("a", 5, PART), 4, 14, HERE)), ev.Malformed)


class TestTokens:
    def test_tokens_are_the_base_plus_the_offset(self) -> None:
        """A grant's and a takeover's token both carry the group's token base."""
        w = world()
        fold(w, meta(settings_of("m1", replace(WINDOW, token_base=1_000)), 0, 10))
        granted = fold(w, record(claim("a", PART), 1, 11, HERE))
        assert isinstance(granted, ev.ClaimGranted) and granted.token == 1_001
        took = fold(w, record(hb("a", 3, PART, inst="a-2"), 2, 12, HERE))
        assert isinstance(took, ev.HeartbeatAccepted) and took.token == 1_002

    def test_a_spread_groups_tokens_are_offsets(self) -> None:
        """Legacy groups: base 0, tokens unchanged."""
        spread_here = next(p for p in range(100) if coordination_partition(TOPIC, p, N) == HERE)
        w = world()
        fold(w, record(hb("x", 1, spread_here + 1), 0, 10, HERE))  # (its offset only)
        granted = fold(w, record(claim("a", spread_here), 1, 11, HERE))
        assert isinstance(granted, ev.ClaimGranted) and granted.token == 1


# ---- compaction ------------------------------------------------------------------------------

WRITERS = ("m1", "m2", ADMIN)
PLACES = (None, WINDOW, ELSEWHERE, replace(WINDOW, token_base=9))


@st.composite
def settings_logs(draw: st.DrawFn) -> list[CoordRecord]:
    """Settings of the group (spread and placed, by members and the admin, with a mode or
    without: a writer from before modes) and pauses. Settings with a mode are written as a pair
    (`settings_records`), of which either half may be missing (a write that failed). A writer
    writes each key of a placed record once (its instance and second: a retry waits for the
    next second), as every writer must: a record written again under its key would lose its
    first place to the cleaner, and a rival's record between the two would win a compacted
    reader's fold (`metadata`, "placed settings keys")."""
    out: list[CoordRecord] = []
    used: set[tuple[str, int]] = set()
    for step in range(draw(st.integers(1, 14))):
        if draw(st.integers(0, 3)) == 0:
            offset = len(out)
            until = draw(st.integers(0, 20))  # seconds: some in force, some not
            one = ReleaseGroup(step, f"{ADMIN}-1", ADMIN, GROUP, "", 0, until)  # a key each
            out.append(record(one, offset, 10 + 100 * offset, HERE))
            continue
        writer, place = draw(st.sampled_from(WRITERS)), draw(st.sampled_from(PLACES))
        sec = draw(st.integers(0, 3))
        if place is not None:
            if (writer, sec) in used:
                continue
            used.add((writer, sec))
        s = settings_of(writer, place, sec, draw(st.sampled_from((HB, 2 * HB))))
        s = replace(s, mode=draw(st.sampled_from((None, Mode.ALO, Mode.AMO))))
        pair = settings_records(s)
        landed = draw(st.sampled_from(("both", "first", "second"))) if len(pair) == 2 else "both"
        for i, (key, value) in enumerate(pair):
            if landed == "both" or (landed == "first") == (i == 0):
                offset = len(out)
                out.append(CoordRecord(HERE, offset, 10 + 100 * offset, key, value))
    return out


def compact(log: list[CoordRecord], clean_before: int) -> list[CoordRecord]:
    """Kafka's cleaner: below ``clean_before``, only the newest record of each key survives."""
    newest = {r.key: r.offset for r in log}
    return [r for r in log if r.offset >= clean_before or newest[r.key] == r.offset]


def accepted(log: list[CoordRecord]) -> GroupSettings | None:
    w = world()
    for r in log:
        fold(w, r)
    return w.group_settings.get(GROUP)


class TestCompaction:
    @settings(max_examples=300, deadline=None)
    @given(settings_logs(), st.data())
    def test_compacting_twice_keeps_the_accepted_settings(
        self, log: list[CoordRecord], data: st.DataObject
    ) -> None:
        """Placed settings and pauses all survive the cleaner, and the rule reads only them
        (and the newest spread record, and the newest spread record with a mode, which survive
        too): the accepted settings of a compacted log are the whole log's, mode included."""
        once = compact(log, data.draw(st.integers(0, len(log))))
        twice = compact(once, data.draw(st.integers(0, len(log))))
        whole = accepted(log)
        for part in (once, twice):
            got = accepted(part)
            assert (got is None) == (whole is None)
            if got is not None and whole is not None:
                assert got.same_settings(whole) and got.placement == whole.placement
                assert got.mode is whole.mode


class TestTheMode:
    def test_a_copy_without_a_mode_keeps_the_accepted_one(self) -> None:
        """A copy by a member from before modes (no thirteenth field) is accepted and cannot
        erase the group's mode; a copy of another mode is refused."""
        w = world()
        fold(w, meta(replace(settings_of("m1", WINDOW), mode=Mode.ALO), 0, 10))
        old = fold(w, meta(settings_of("old", WINDOW, sec=5), 1, 11))
        assert isinstance(old, ev.GroupSettingsRecorded) and old.settings.mode is Mode.ALO
        assert w.group_settings[GROUP].mode is Mode.ALO
        amo = fold(w, meta(replace(settings_of("m2", WINDOW, sec=6), mode=Mode.AMO), 2, 12))
        assert isinstance(amo, ev.Malformed) and "refused" in amo.reason
        assert w.group_settings[GROUP].mode is Mode.ALO

    def test_settings_without_a_mode_take_one_from_a_copy(self) -> None:
        """A group placed before modes: the first member of this version records the mode."""
        w = world()
        fold(w, meta(settings_of("old", WINDOW), 0, 10))
        e = fold(w, meta(replace(settings_of("m1", WINDOW, sec=5), mode=Mode.AMO), 1, 11))
        assert isinstance(e, ev.GroupSettingsRecorded)
        assert w.group_settings[GROUP].mode is Mode.AMO

    def test_a_spread_groups_newest_record_wins_but_keeps_the_mode(self) -> None:
        """Spread settings: the newest wins, and one without a mode (an older writer's, or the
        readable half of a pair) keeps the recorded mode. The cleaner keeps the newest under
        each of the two keys, so a compacted reader agrees: a later heartbeat interval, the
        mode of the newest record with one."""
        alo = replace(settings_of("a", None), mode=Mode.ALO)
        later = settings_of("old", None, hb_ms=2 * HB)
        for records in ([alo, later], [replace(alo, mode=None), alo, later]):
            log = [CoordRecord(HERE, i, 10 + i, *_legacy(s)) for i, s in enumerate(records)]
            for part in (log, compact(log, len(log))):
                got = accepted(part)
                assert got is not None and got.mode is Mode.ALO
                assert got.heartbeat_interval_ms == 2 * HB

    def test_a_placed_record_keeps_no_mode_of_the_spread_settings_it_replaces(self) -> None:
        """A review's sequence: spread settings with ALO, then a lone placed half without a
        mode (an older admin's move), then a later spread pair (refused here). The cleaner
        erases the first mode record (its key's newest is the later one); a compacted reader
        must agree with the whole log's, so the placed record takes no mode from spread."""
        alo = replace(settings_of("a", None), mode=Mode.ALO)
        log: list[CoordRecord] = []
        for key, value in settings_records(alo):  # spread, without then with the mode
            log.append(CoordRecord(HERE, len(log), 10 + len(log), key, value))
        log.append(meta(settings_of("m2", WINDOW, sec=2), len(log), 10 + len(log)))
        for key, value in settings_records(replace(alo, client_id="b", unix_sec=9)):
            log.append(CoordRecord(HERE, len(log), 10 + len(log), key, value))
        whole, compacted = accepted(log), accepted(compact(log, len(log)))
        assert whole is not None and compacted is not None
        assert whole.mode is compacted.mode is None
        assert whole.placement == compacted.placement == WINDOW
