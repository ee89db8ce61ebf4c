"""Group placement: where a group's records go on the coordination topic (`protocol.placement`)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marshal_workers.protocol.placement import (
    Placement,
    PlacementBook,
    home,
    placed,
    reads,
    spread,
)
from marshal_workers.protocol.wire import MAX_PARTITION, Partitioner, coordination_partition

names = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="/"),
                min_size=1, max_size=40)  # fmt: skip


class TestKnownAnswers:
    def test_home_of_a_group(self) -> None:
        """md5(group), first 8 bytes little-endian, modulo N: the design's table."""
        assert [home("shop.billing", n) for n in (1, 4, 50, 256)] == [0, 3, 23, 67]
        assert (home("g0", 50), home("g0", 256)) == (30, 138)
        assert (home("g1", 50), home("g1", 256)) == (45, 1)

    def test_claims_within_a_window(self) -> None:
        """A window of 4 from 23 on 50 partitions: md5(topic/partition) mod 4 past its first."""
        window = Placement(50, first=23, span=4)
        assert window.partition_of("orders", 0) == 25
        assert window.partition_of("orders", 7) == 24
        assert window.partition_of("__member.host-1", 0) == 26
        assert window.partition_of("orders+key.3of8", 2) == 23

    def test_span_one_is_home(self) -> None:
        """A window of one partition at its home takes every claim of the group there."""
        first = home("shop.billing", 50)
        one = Placement(50, first=first, span=1)
        assert {one.partition_of(f"t{i}", i) for i in range(50)} == {first}
        assert reads("shop.billing", one) == frozenset({first})
        assert placed("shop.billing", 50) == one  # a new group's window starts at its home

    def test_reads_wrap_around(self) -> None:
        """A window past the last partition wraps to the first; home is read too."""
        assert reads("g1", Placement(50, first=48, span=4)) == frozenset({48, 49, 0, 1, 45})


class TestSpread:
    @settings(deadline=None)  # no timed checks: a loaded machine is slow
    @given(names, st.integers(0, MAX_PARTITION), st.integers(1, 5000),
           st.sampled_from(list(Partitioner)))  # fmt: skip
    def test_spread_is_todays_coordination_partition(
        self, topic: str, partition: int, n: int, partitioner: Partitioner
    ) -> None:
        """Every legacy group is placed exactly where `wire.coordination_partition` puts it."""
        got = spread(n, partitioner).partition_of(topic, partition)
        assert got == coordination_partition(topic, partition, n, partitioner)

    def test_spread_reads_everything(self) -> None:
        """A legacy group's readers follow every coordination partition."""
        assert reads("g", spread(7, Partitioner.SPEC)) == frozenset(range(7))
        assert spread(7, Partitioner.SPEC).legacy


class TestWindow:
    @settings(deadline=None)
    @given(names, st.integers(0, MAX_PARTITION), st.integers(1, 300), st.data())
    def test_every_claim_is_in_the_window(
        self, topic: str, partition: int, n: int, data: st.DataObject
    ) -> None:
        """`partition_of` is one of the window's partitions, whatever the claim."""
        first = data.draw(st.integers(0, n - 1))
        span = data.draw(st.integers(1, n))
        place = Placement(n, first, span)
        window = {(first + i) % n for i in range(span)}
        assert place.partition_of(topic, partition) in window
        assert window <= reads("g", place)

    def test_marshal_go_hashes_the_topic_only(self) -> None:
        """Inside the window, ``marshal-go`` puts every partition of a topic on one place."""
        place = Placement(50, 10, 8, partitioner=Partitioner.MARSHAL_GO)
        assert len({place.partition_of("orders", p) for p in range(20)}) == 1

    @pytest.mark.parametrize(
        ("n", "first", "span", "base"),
        [(0, 0, 1, 0), (4, 4, 1, 0), (4, -1, 1, 0), (4, 0, 0, 0), (4, 0, 5, 0), (4, 0, 1, -1)],
    )
    def test_impossible_placements_are_refused(
        self, n: int, first: int, span: int, base: int
    ) -> None:
        """No partitions, a first outside them, an empty or oversized window, a negative base."""
        with pytest.raises(ValueError, match="placement"):
            Placement(n, first, span, base)


class TestBook:
    def test_a_book_is_hashable_and_finds_its_groups(self) -> None:
        """What a reader knows of groups' placements: looked up by group, frozen, hashable."""
        a = Placement(50, 23, 1)
        book = PlacementBook.of({"shop.billing": a})
        assert book.get("shop.billing") == a and book.get("other") is None
        assert hash(book) == hash(PlacementBook.of({"shop.billing": a}))
        assert book == PlacementBook.of({"shop.billing": a}) and book != PlacementBook()
