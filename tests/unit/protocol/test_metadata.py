"""Metadata records (the pinned partition count, a group's settings): wire form, fold, checks."""

from __future__ import annotations

from marshal_workers.protocol import events as ev
from marshal_workers.protocol.metadata import (
    GroupSettings,
    TopicRecord,
    decode_metadata,
    encode_metadata,
    metadata_key,
    partition_count_problem,
    settings_problem,
)
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.wire import CoordRecord, Partitioner
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
