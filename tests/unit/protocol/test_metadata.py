"""Metadata records (the pinned partition count, a group's settings): wire form, fold, checks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from marshal_workers.protocol import events as ev
from marshal_workers.protocol.metadata import (
    GroupSettings,
    TopicRecord,
    decode_metadata,
    encode_metadata,
    metadata_key,
    partition_count_problem,
    settings_problem,
    settings_records,
)
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.placement import Placement
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.slicing import WHOLE, Ordering, Slicing
from marshal_workers.protocol.wire import CoordRecord, DecodeError, Partitioner
from tests.support import HB, claim, record

SETTINGS = GroupSettings(0, "i-1", "a", "g", 2000, Partitioner.SPEC, frozenset({"ops"}))


def meta_record(meta: TopicRecord | GroupSettings, offset: int, partition: int = 0) -> CoordRecord:
    return CoordRecord(partition, offset, offset, metadata_key(meta), encode_metadata(meta))


class TestWireForm:
    def test_round_trip(self) -> None:
        """Both records decode to what was encoded (admin lists: none, some, anyone)."""
        for ids in (frozenset(), frozenset({"ops", "ops-2"}), None):
            settings = GroupSettings(5, "i", "c", "g", 1500, Partitioner.MARSHAL_GO, ids)
            assert decode_metadata(encode_metadata(settings)) == settings
        topic = TopicRecord(5, "i", "c", 4)
        assert decode_metadata(encode_metadata(topic)) == topic

    def test_a_placed_topic_record_is_version_2(self) -> None:
        """A topic whose new groups are placed: CoordinationTopic/2/.../placed, decoded back;
        a version-1 record is a topic whose new groups are spread."""
        topic = TopicRecord(5, "i", "c", 4, placed=True)
        assert encode_metadata(topic) == b"CoordinationTopic/2/5/i/c/4/placed"
        assert decode_metadata(encode_metadata(topic)) == topic
        assert decode_metadata(b"CoordinationTopic/1/5/i/c/4") == TopicRecord(5, "i", "c", 4)
        for bad in (b"CoordinationTopic/2/5/i/c/4", b"CoordinationTopic/2/5/i/c/4/spread",
                    b"CoordinationTopic/1/5/i/c/4/placed"):  # fmt: skip
            with pytest.raises(DecodeError):
                decode_metadata(bad)

    def test_keys_cannot_be_claim_or_group_keys(self) -> None:
        """Names never contain '/', so these keys collide with no claim and no ReleaseGroup."""
        assert metadata_key(TopicRecord(0, "i", "c", 1)).startswith(b"/")
        assert metadata_key(SETTINGS) == b"g//settings"


class TestFold:
    def test_metadata_records_are_kept_and_change_no_claim(self) -> None:
        """The fold keeps the newest of each and reports it; claims are untouched."""
        world = World(RationalizerConfig(HB, num_partitions=1), 0)
        fold(world, record(claim("a"), 0, 0))
        before = dict(world.claims)
        e1 = fold(world, meta_record(TopicRecord(0, "i", "init", 1), 1))
        e2 = fold(world, meta_record(SETTINGS, 2))
        assert isinstance(e1, ev.TopicRecorded) and isinstance(e2, ev.GroupSettingsRecorded)
        assert world.topic_record == e1.record and world.group_settings["g"] == SETTINGS
        assert world.claims == before and world.malformed == 0

    def test_topic_record_off_partition_zero_is_malformed(self) -> None:
        """The pinned count lives on partition 0 only."""
        world = World(RationalizerConfig(HB), 1)
        e = fold(world, meta_record(TopicRecord(0, "i", "init", 2), 0, partition=1))
        assert isinstance(e, ev.Malformed) and world.topic_record is None


class TestChecks:
    def test_partition_count(self) -> None:
        """No record: run init; another count: refused; the same: fine."""
        assert "marshal-admin init" in str(partition_count_problem("t", None, 2))
        assert "has 3 partitions but 2 were recorded" in str(partition_count_problem("t", 2, 3))
        assert partition_count_problem("t", 2, 2) is None

    def test_a_differing_setting_is_named_with_both_values(self) -> None:
        """One line naming the setting, this process's value and the group's."""
        mine = GroupSettings(9, "j", "b", "g", 1000, Partitioner.SPEC, frozenset({"ops"}))
        line = settings_problem(SETTINGS, mine)
        assert line is not None and "\n" not in line
        assert "heartbeat_interval is 1s here but 2s in group g's settings" in line
        assert settings_problem(SETTINGS, SETTINGS) is None
        assert settings_problem(None, mine) is None


class TestPlacedSettings:
    PLACED = GroupSettings(
        7, "i-2", "m1", "g", 2000, Partitioner.SPEC, None, WHOLE, Placement(50, 23, 1)
    )

    def test_round_trip_of_twelve_fields(self) -> None:
        """A placed group's settings carry the ordering fields and the placement, always."""
        text = encode_metadata(self.PLACED)
        assert text == b"GroupSettings/1/7/i-2/m1/g/2000/spec/*/partition/1/23:1:50:0"
        assert decode_metadata(text) == self.PLACED
        go = Partitioner.MARSHAL_GO  # the settings' partitioner is the hash inside the window
        sliced = replace(self.PLACED, slicing=Slicing(Ordering.KEY, 8), partitioner=go,
                         placement=Placement(50, 48, 4, 1_000_000, go))  # fmt: skip
        assert decode_metadata(encode_metadata(sliced)) == sliced

    def test_nine_and_eleven_fields_are_legacy(self) -> None:
        """Records written before placement decode as before: spread (no placement)."""
        nine = decode_metadata(b"GroupSettings/1/7/i/c/g/2000/spec/*")
        eleven = decode_metadata(b"GroupSettings/1/7/i/c/g/2000/spec/*/key/3")
        assert isinstance(nine, GroupSettings) and nine.placement is None
        assert isinstance(eleven, GroupSettings) and eleven.placement is None

    def test_a_placed_record_has_a_key_per_writer(self) -> None:
        """Every placed settings record survives the cleaner: its key names writer and second."""
        assert metadata_key(self.PLACED) == b"g//settings/i-2/7"
        assert metadata_key(SETTINGS) == b"g//settings"

    @pytest.mark.parametrize(
        "field",
        [
            "23:1:50",  # three numbers
            "23:1:50:0:9",  # five
            "50:1:50:0",  # first outside the partitions
            "23:0:50:0",  # an empty window
            "23:51:50:0",  # a window wider than the partitions
            "0:1:0:0",  # no partitions
            "0:1:2147483648:0",  # past Kafka's 32 bits
            "0:1:50:9223372036854775808",  # a token base past 64 bits
            "0:1:50:-1",
            "a:1:50:0",
            "9" * 4301 + ":1:50:0",  # past int()'s digit limit
            "",
        ],
    )
    def test_a_hostile_placement_is_malformed(self, field: str) -> None:
        """Every number of a placement is bounded on decode: anything else is malformed."""
        text = f"GroupSettings/1/7/i/c/g/2000/spec/*/partition/1/{field}".encode()
        with pytest.raises(DecodeError):
            decode_metadata(text)

    def test_a_placed_record_without_its_ordering_is_malformed(self) -> None:
        """Ten or twelve-with-a-bad-ordering fields: no record."""
        for text in (b"GroupSettings/1/7/i/c/g/2000/spec/*/23:1:50:0",
                     b"GroupSettings/1/7/i/c/g/2000/spec/*/partition/3/23:1:50:0",
                     b"GroupSettings/1/7/i/c/g/2000/spec/*/partition/1/23:1:50:0/x"):  # fmt: skip
            with pytest.raises(DecodeError):
                decode_metadata(text)

    def test_a_placement_is_a_shared_setting(self) -> None:
        """A member spread where the group is placed (or placed elsewhere) is named."""
        spread_member = replace(self.PLACED, placement=None)
        line = settings_problem(self.PLACED, spread_member)
        assert line is not None and "placement is spread here but 23:1:50:0" in line
        other = replace(self.PLACED, placement=Placement(50, 23, 2))
        assert "placement is 23:2:50:0 here" in str(settings_problem(self.PLACED, other))
        assert settings_problem(self.PLACED, replace(self.PLACED, unix_sec=9)) is None


class TestMode:
    SPREAD = GroupSettings(7, "i-2", "m1", "g", 2000, Partitioner.SPEC, None, WHOLE,
                           mode=Mode.ALO)  # fmt: skip
    PLACED = replace(SPREAD, placement=Placement(50, 23, 1), mode=Mode.AMO)

    def test_the_mode_is_the_thirteenth_field(self) -> None:
        """After the ordering and the placement (``spread`` for a spread group, whose key stays
        the shared one), decoded back."""
        assert (
            encode_metadata(self.SPREAD)
            == b"GroupSettings/1/7/i-2/m1/g/2000/spec/*/partition/1/spread/alo"
        )
        assert (
            encode_metadata(self.PLACED)
            == b"GroupSettings/1/7/i-2/m1/g/2000/spec/*/partition/1/23:1:50:0/amo"
        )
        for s in (self.SPREAD, self.PLACED, replace(self.SPREAD, slicing=Slicing(Ordering.KEY, 4))):
            assert decode_metadata(encode_metadata(s)) == s
        assert metadata_key(self.SPREAD) == b"g//settings/mode"
        assert metadata_key(self.PLACED) == b"g//settings/i-2/7/amo"

    def test_a_placed_groups_mode_follows_settings_a_reader_from_before_modes_reads(
        self,
    ) -> None:
        """Such a reader takes the first placed settings it can read as the group's placement;
        with none it would take the group for a spread one. So the settings go first without
        the mode (12 fields, as it reads them), then with it, under keys of their own (the
        cleaner keeps both); a spread group's too (9 fields under the shared key, which such a
        reader checks its members against)."""
        (k1, v1), (k2, v2) = settings_records(self.PLACED)
        assert v1.count(b"/") == 11 and decode_metadata(v1) == replace(self.PLACED, mode=None)
        assert k1 == b"g//settings/i-2/7" and k2 == b"g//settings/i-2/7/amo"
        assert decode_metadata(v2) == self.PLACED
        world = World(RationalizerConfig(HB, num_partitions=50), 23)
        for offset, (k, v) in enumerate(((k1, v1), (k2, v2))):
            fold(world, CoordRecord(23, offset, offset, k, v))
        assert world.group_settings["g"] == self.PLACED and world.malformed == 0
        (k1, v1), (k2, v2) = settings_records(self.SPREAD)
        assert (k1, v1.count(b"/")) == (b"g//settings", 8) and k2 == b"g//settings/mode"
        assert decode_metadata(v2) == self.SPREAD

    def test_without_a_mode_the_record_is_as_before(self) -> None:
        """An admin's settings, or a writer from before modes: no thirteenth field."""
        assert encode_metadata(replace(self.SPREAD, mode=None)).count(b"/") == 8
        assert encode_metadata(replace(self.PLACED, mode=None)).count(b"/") == 11

    @pytest.mark.parametrize(
        "text",
        [
            b"GroupSettings/1/7/i/c/g/2000/spec/*/partition/1/spread/both",  # no such mode
            b"GroupSettings/1/7/i/c/g/2000/spec/*/partition/1/spread/",
            b"GroupSettings/1/7/i/c/g/2000/spec/*/partition/1/spread",  # spread without a mode
            b"GroupSettings/1/7/i/c/g/2000/spec/*/partition/1/spread/alo/x",  # fourteen
        ],
    )
    def test_a_bad_mode_field_is_malformed(self, text: bytes) -> None:
        with pytest.raises(DecodeError):
            decode_metadata(text)

    def test_the_mode_is_a_shared_setting_named_with_both_values(self) -> None:
        """Another mode is refused; a mode on one side only (an admin's, a group from before
        modes) is no difference."""
        amo = replace(self.SPREAD, mode=Mode.AMO)
        line = settings_problem(self.SPREAD, amo)
        assert line is not None and line.startswith("mode is amo here but alo in group g's")
        assert "group-settings" in line
        assert settings_problem(self.SPREAD, replace(self.SPREAD, mode=None)) is None
        assert settings_problem(replace(self.SPREAD, mode=None), amo) is None
