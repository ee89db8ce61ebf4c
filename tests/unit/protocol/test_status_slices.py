"""The status of a sliced group (ordering key or unordered): each data partition with its
slices under it, their holders, positions and lag (pure)."""

from __future__ import annotations

from typing import Any

from marshal_workers.protocol.amolosses import AmoLosses
from marshal_workers.protocol.groupstatus import (
    group_status,
    group_topics,
    lag_trends,
    lags,
    render_table,
)
from tests.support import GROUP, HB, TOPIC, Log, claim, hb, reserve

T0 = 1_700_000_000_000
K = [f"{TOPIC}+key.{i}of3" for i in range(3)]


def sliced() -> Log:
    """Partition 0 cut in 3 key slices: A holds slices 2 and 0 (positions 7 and 5), B slice 1
    (position 6); partition 1 is a whole partition held by B (a group whose cut changed)."""
    log = Log()
    log.at(T0, claim("A", 0, topic=K[2]))
    log.at(T0 + 10, claim("B", 0, topic=K[1]))
    log.at(T0 + 20, claim("A", 0, topic=K[0]))
    log.at(T0 + 30, claim("B", 1))
    log.at(T0 + 100, hb("A", 7, 0, topic=K[2]))
    log.at(T0 + 110, hb("B", 6, 0, topic=K[1]))
    log.at(T0 + 120, hb("A", 5, 0, topic=K[0]))
    log.at(T0 + 130, hb("B", 3, 1))
    return log


def claims_of(highs: dict[tuple[str, int], int] | None = None) -> list[dict[str, Any]]:
    status = group_status(GROUP, {0: sliced().world}, HB, T0 + 200, highs or {})
    claims: list[dict[str, Any]] = status.to_json()["claims"]  # type: ignore[assignment]
    return claims


class TestSlicesInStatus:
    def test_slices_are_listed_under_their_partition_by_index(self) -> None:
        """Each claim names the data topic and its slice (ordering, index, count), a
        partition's slices together and in index order, the whole partition with none."""
        rows = [(c["topic"], c["partition"], c["slice"], c["client_id"]) for c in claims_of()]
        assert rows == [
            (TOPIC, 0, {"name": "key.0of3", "ordering": "key", "index": 0, "count": 3}, "A"),
            (TOPIC, 0, {"name": "key.1of3", "ordering": "key", "index": 1, "count": 3}, "B"),
            (TOPIC, 0, {"name": "key.2of3", "ordering": "key", "index": 2, "count": 3}, "A"),
            (TOPIC, 1, None, "B"),
        ]

    def test_a_slices_lag_is_against_its_data_partition(self) -> None:
        """A slice's lag is the data partition's high watermark minus the slice's position
        (an upper bound: the slice takes only some of those records)."""
        lag = [(c["slice"] and c["slice"]["index"], c["offset"], c["lag"]) for c in claims_of(
            {(TOPIC, 0): 10, (TOPIC, 1): 10}
        )]  # fmt: skip
        assert lag == [(0, 5, 5), (1, 6, 4), (2, 7, 3), (None, 3, 7)]

    def test_the_watermarks_asked_for_are_the_data_topics(self) -> None:
        """A slice's claim topic names no Kafka topic: the status asks for the data topic's
        ends (asking for 'orders+key.0of3' would mark the status incomplete)."""
        assert group_topics({0: sliced().world}, GROUP) == {TOPIC}

    def test_the_table_has_a_slice_column_and_says_what_a_slices_lag_is(self) -> None:
        """The table shows each slice under its partition, and a footnote on slice lag."""
        status = group_status(GROUP, {0: sliced().world}, HB, T0 + 200, {(TOPIC, 0): 10})
        lines = render_table(status).splitlines()
        header = next(line for line in lines if line.startswith("TOPIC"))
        assert header.split()[:3] == ["TOPIC", "PARTITION", "SLICE"]
        rows = [line.split()[:4] for line in lines if line.startswith(f"{TOPIC} ")]
        assert rows == [
            [TOPIC, "0", "key.0of3", "fresh"],
            [TOPIC, "0", "key.1of3", "fresh"],
            [TOPIC, "0", "key.2of3", "fresh"],
            [TOPIC, "1", "-", "fresh"],
        ]
        assert any("upper bound" in line for line in lines)

    def test_a_whole_partition_group_has_no_slice_column(self) -> None:
        """Without slices the table is as it was."""
        log = Log()
        log.at(T0, claim("A", 0))
        status = group_status(GROUP, {0: log.world}, HB, T0 + 10, {})
        text = render_table(status)
        assert "SLICE" not in text and "upper bound" not in text

    def test_lag_trends_are_per_slice(self) -> None:
        """--watch follows each slice's lag on its own, not one per partition."""
        status = group_status(GROUP, {0: sliced().world}, HB, T0 + 200, {(TOPIC, 0): 10})
        before = lags(status)
        assert len(before) == 4
        later = group_status(GROUP, {0: sliced().world}, HB, T0 + 200, {(TOPIC, 0): 12})
        assert sorted(lag_trends(before, later, 1.0).values()) == ["+2 (+2/s)"] * 3 + ["-"]

    def test_an_amo_slices_last_loss_names_the_slice(self) -> None:
        """At most once, a slice's last loss is its own line, naming the slice, and the
        table has both the SLICE and the AMO LOST columns."""
        log = Log()
        log.at(T0, claim("A", 0, topic=K[0]))
        log.at(T0 + 50, hb("A", 0, 0, topic=K[0]))
        log.at(T0 + 100, reserve("A", 10, 0, topic=K[0]))
        log.at(T0 + 5000, claim("B", 0, topic=K[0]))
        losses = AmoLosses(HB)
        losses.add_all(log.events)  # type: ignore[arg-type]
        status = group_status(GROUP, {0: log.world}, HB, T0 + 5100, {}, losses)
        lines = render_table(status).splitlines()
        header = next(line for line in lines if line.startswith("TOPIC")).split()
        assert header[:3] == ["TOPIC", "PARTITION", "SLICE"] and "LOST" in header
        assert any(line.startswith(f"AMO last loss {TOPIC}/0 slice key.0of3: ") for line in lines)
