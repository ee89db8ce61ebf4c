"""Ordering modes: how a partition is cut into slices, how a slice's claim is named,
how the cut is recorded in a group's settings, and how a slice's child keeps its records."""

from __future__ import annotations

import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from marshal_workers.admin.records import claim_of_record
from marshal_workers.child.consumer import Reach, _kept
from marshal_workers.ipc.messages import ChildSpec
from marshal_workers.protocol.metadata import (
    GroupSettings,
    decode_metadata,
    encode_metadata,
    settings_problem,
)
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import RationalizerConfig, World
from marshal_workers.protocol.recordfailures import PoisonState
from marshal_workers.protocol.slicing import (
    WHOLE,
    Ordering,
    Slice,
    Slicing,
    data_topic,
    records_at_most,
    slice_topic,
    split_topic,
)
from marshal_workers.protocol.wire import ClaimKey, Partitioner

ORDERINGS = st.sampled_from([Ordering.KEY, Ordering.UNORDERED])


class TestRecordsAtMost:
    """How many records of a claim an AMO loss of ``start``..``end`` can hold: an unordered
    slice's own offsets exactly (counted as the range's width, a review saw 4,538 reported for
    1,085 lost), all of them for a whole partition or a key slice."""

    @given(st.integers(1, 64), st.data(), st.integers(0, 10**6), st.integers(0, 300))
    def test_an_unordered_slice_counts_its_own_offsets(
        self, count: int, data: st.DataObject, start: int, width: int
    ) -> None:
        index = data.draw(st.integers(0, count - 1))
        part = Slice(Ordering.UNORDERED, count, index)
        topic = slice_topic("orders", part)
        mine = sum(1 for o in range(start, start + width) if part.takes(o, b"k"))
        assert records_at_most(topic, start, start + width) == mine

    @given(st.integers(1, 64), st.data(), st.integers(0, 10**6), st.integers(0, 300))
    def test_a_key_slice_or_a_partition_counts_the_whole_range(
        self, count: int, data: st.DataObject, start: int, width: int
    ) -> None:
        index = data.draw(st.integers(0, count - 1))
        key_slice = slice_topic("orders", Slice(Ordering.KEY, count, index))
        assert records_at_most(key_slice, start, start + width) == width
        assert records_at_most("orders", start, start + width) == width

    def test_an_empty_or_backward_range_holds_none(self) -> None:
        topic = slice_topic("orders", Slice(Ordering.UNORDERED, 4, 1))
        assert records_at_most(topic, 10, 10) == 0
        assert records_at_most(topic, 10, 5) == 0


class TestCut:
    @given(ORDERINGS, st.integers(1, 64), st.integers(0, 10**9), st.none() | st.binary())
    def test_every_record_is_in_exactly_one_slice(
        self, ordering: Ordering, count: int, offset: int, key: bytes | None
    ) -> None:
        """Slices of one cut are disjoint and cover the partition: no record is taken by two
        workers, none by nobody."""
        takers = [i for i in range(count) if Slice(ordering, count, i).takes(offset, key)]
        assert len(takers) == 1

    @given(st.integers(2, 64), st.binary(), st.integers(0, 10**6), st.integers(0, 10**6))
    def test_a_key_stays_in_one_slice_whatever_its_offset(
        self, count: int, key: bytes, a: int, b: int
    ) -> None:
        """ordering key: every record of a key is in one slice, so one holder handles them in
        offset order."""
        (first,) = [i for i in range(count) if Slice(Ordering.KEY, count, i).takes(a, key)]
        assert Slice(Ordering.KEY, count, first).takes(b, key)
        assert first == zlib.crc32(key) % count

    def test_unordered_stripes_share_any_backlog_evenly(self) -> None:
        """ordering unordered: 4 stripes of 1,000 consecutive offsets get 250 each, whatever
        the keys (no worker idles while another holds the backlog)."""
        for i in range(4):
            stripe = Slice(Ordering.UNORDERED, 4, i)
            assert sum(stripe.takes(o, b"same-key") for o in range(5000, 6000)) == 250

    def test_records_without_a_key_are_striped_in_key_mode(self) -> None:
        """A record with no key has no order to keep: it goes by offset."""
        assert Slice(Ordering.KEY, 3, 2).takes(5, None)
        assert not Slice(Ordering.KEY, 3, 1).takes(5, None)

    def test_partition_ordering_takes_one_worker(self) -> None:
        with pytest.raises(ValueError, match="needs ordering key or unordered"):
            Slicing(Ordering.PARTITION, 4)
        with pytest.raises(ValueError, match="1 to 1024"):
            Slicing(Ordering.KEY, 0)
        assert WHOLE.claim_topics("orders") == ["orders"]


class TestNames:
    @given(
        ORDERINGS,
        st.integers(1, 1024).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))),
    )
    def test_a_slice_name_reads_back(self, ordering: Ordering, cut: tuple[int, int]) -> None:
        count, index = cut
        part = Slice(ordering, count, index)
        assert split_topic(slice_topic("orders.v2", part)) == ("orders.v2", part)

    def test_the_claims_of_a_cut_are_one_per_slice(self) -> None:
        assert Slicing(Ordering.KEY, 3).claim_topics("o") == [
            "o+key.0of3",
            "o+key.1of3",
            "o+key.2of3",
        ]
        assert data_topic("o+unordered.1of2") == "o"

    @pytest.mark.parametrize(
        "name",
        ["orders", "o+key.01of2", "o+key.2of2", "o+key.0of0", "o+kei.0of2", "+key.0of1",
         "o+key.0of2x", "o+key0of2", "o+key.0of1025", "o+key.٣of5"],
    )  # fmt: skip
    def test_anything_else_is_a_whole_partition_topic(self, name: str) -> None:
        """Only the canonical name of a valid slice is a slice: one slice has one claim key
        (``01of2`` would be a second key for slice 1 of 2)."""
        assert split_topic(name) == (name, None)


def settings(slicing: Slicing | None) -> GroupSettings:
    return GroupSettings(1, "i", "c", "g", 1000, Partitioner.SPEC, None, slicing)


class TestGroupSettings:
    @pytest.mark.parametrize(
        "cut", [WHOLE, Slicing(Ordering.KEY, 8), Slicing(Ordering.UNORDERED, 1)]
    )
    def test_the_cut_is_recorded_and_read_back(self, cut: Slicing) -> None:
        assert decode_metadata(encode_metadata(settings(cut))) == settings(cut)

    def test_a_record_without_the_fields_is_a_partition_group(self) -> None:
        """Settings recorded before orderings existed (9 fields) read as ordering partition,
        and a partition group is still written that way."""
        old = b"GroupSettings/1/1/i/c/g/1000/spec/*"
        assert decode_metadata(old) == settings(WHOLE)
        assert encode_metadata(settings(WHOLE)) == old

    def test_a_member_with_another_cut_is_refused(self) -> None:
        """Two cuts of one partition overlap (slice 0 of 4 and slice 0 of 8 share records):
        a member whose cut differs from the group's may not run."""
        group = settings(Slicing(Ordering.KEY, 4))
        problem = settings_problem(group, settings(Slicing(Ordering.KEY, 8)))
        assert problem is not None
        assert "ordering is key with 8 workers per partition here but key with 4" in problem
        assert settings_problem(group, settings(WHOLE)) is not None
        assert settings_problem(group, settings(Slicing(Ordering.KEY, 4))) is None
        # no advice to change what cannot change: group-settings does not take the ordering
        # (a review followed the generic line's advice)
        assert "group-settings" not in problem
        assert "start this member with the group's ordering" in problem

    def test_an_admin_acts_on_any_cut(self) -> None:
        """An admin command's own settings name no cut: it never compares one."""
        assert settings_problem(settings(Slicing(Ordering.UNORDERED, 3)), settings(None)) is None


class Message:
    """A fetched message, as `_kept` reads it (what confluent-kafka's Message answers)."""

    def __init__(self, offset: int, key: bytes | None) -> None:
        self._offset, self._key = offset, key

    def error(self) -> None:
        return None

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key


def spec(part: Slice | None) -> ChildSpec:
    return ChildSpec("h", Mode.ALO, "k:9092", "g", "c", "i", "t", 0, None, 1, slice=part)


class TestChildKeepsItsSlice:
    def test_a_slice_keeps_its_records_and_says_how_far_it_read(self) -> None:
        messages: list[Any] = [Message(o, f"k{o % 5}".encode()) for o in range(10, 30)]
        part = Slice(Ordering.KEY, 3, 1)
        reach = Reach()
        kept = _kept(messages, spec(part), reach, log=None)
        assert [m.offset() for m in kept] == [
            o for o in range(10, 30) if zlib.crc32(f"k{o % 5}".encode()) % 3 == 1
        ]
        assert reach.end == 30

    def test_a_whole_partition_keeps_everything(self) -> None:
        messages: list[Any] = [Message(o, None) for o in range(5)]
        reach = Reach()
        assert _kept(messages, spec(None), reach, log=None) == messages
        assert reach.end is None


class Session:
    """What `claim_of_record` reads of an admin session: the folded worlds and the home of a
    claim (one coordination partition here)."""

    def __init__(self, world: World) -> None:
        self.worlds = {0: world}

    def partition_of(self, key: ClaimKey) -> int:
        return 0


class TestOperatorOnASlicesRecord:
    def world(self, cut: Slicing) -> World:
        world = World(RationalizerConfig(1000), 0)
        world.group_settings["g"] = settings(cut)
        return world

    def test_skip_record_finds_the_slice_whose_record_fails(self) -> None:
        """skip-record/retry-record name the data topic; on a sliced group the resolution goes
        to the slice whose failing record is at that offset (else the log would refuse it as
        'not the partition's failing record')."""
        world = self.world(Slicing(Ordering.KEY, 4))
        failing = ClaimKey("g", "orders+key.2of4", 3)
        world.poison[failing] = PoisonState(40, 4, True, "boom", "c", 1)
        found = claim_of_record(Session(world), ClaimKey("g", "orders", 3), 40)  # type: ignore[arg-type]
        assert found == failing

    def test_a_whole_partition_group_or_a_slice_name_is_taken_as_given(self) -> None:
        world = self.world(WHOLE)
        key = ClaimKey("g", "orders", 3)
        assert claim_of_record(Session(world), key, 40) == key  # type: ignore[arg-type]
        named = ClaimKey("g", "orders+key.1of4", 3)
        assert claim_of_record(Session(self.world(Slicing(Ordering.KEY, 4))), named, 7) == named  # type: ignore[arg-type]
