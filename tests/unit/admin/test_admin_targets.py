"""Target offsets of set-position, from a stand-in for the data topic's offsets."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest

from marshal_workers.admin.targets import (
    Kind,
    Targets,
    TargetSpec,
    compute_targets,
    end_target_now,
    parse_offsets,
    parse_time,
)
from marshal_workers.common.errors import ConfigError
from marshal_workers.config.timearg import TimeArgError, parse_time_ms


class FakeSource:
    """Three partitions with stored offsets 10..50, 0..7 and 3..3 (empty)."""

    def __init__(self) -> None:
        self.marks = {0: (10, 50), 1: (0, 7), 2: (3, 3)}
        self.found: dict[int, int | None] = {0: 42, 1: None, 2: None}

    def partitions(self, topic: str) -> list[int]:
        return sorted(self.marks)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        return self.marks[partition]

    def offsets_for_time(
        self, topic: str, partitions: Sequence[int], time_ms: int
    ) -> dict[int, int | None]:
        return {p: self.found[p] for p in partitions}


class TestTargets:
    def test_earliest_and_latest_are_the_watermarks(self) -> None:
        """--to-earliest: low watermarks; --to-latest: high watermarks."""
        src = FakeSource()
        assert compute_targets(src, "t", TargetSpec(Kind.EARLIEST)) == Targets({0: 10, 1: 0, 2: 3})
        latest = compute_targets(src, "t", TargetSpec(Kind.LATEST))
        assert latest == Targets({0: 50, 1: 7, 2: 3}, ends=frozenset({0, 1, 2}))

    def test_datetime_without_a_later_record_goes_to_the_end(self) -> None:
        """offsets_for_times finds nothing at or after the time: the high watermark (an end:
        read again before it is set)."""
        spec = TargetSpec(Kind.DATETIME, time_ms=1)
        assert compute_targets(FakeSource(), "t", spec) == Targets(
            {0: 42, 1: 7, 2: 3}, ends=frozenset({1, 2})
        )

    def test_an_end_read_again_is_the_end_now_or_a_record_written_since(self) -> None:
        """--to-latest: the high watermark now. --to-datetime: the first record at or after
        the time if one has come since the plan, else the high watermark now."""
        src = FakeSource()
        src.marks[1] = (0, 9)
        assert end_target_now(src, "t", TargetSpec(Kind.LATEST), 1) == 9
        spec = TargetSpec(Kind.DATETIME, time_ms=1)
        assert end_target_now(src, "t", spec, 1) == 9
        src.found[1] = 8
        assert end_target_now(src, "t", spec, 1) == 8

    def test_explicit_offsets_move_only_the_listed_partitions(self) -> None:
        """--to-offset 0=20,1=7: the end is allowed; partition 2 is left out."""
        spec = TargetSpec(Kind.OFFSETS, offsets={0: 20, 1: 7})
        assert compute_targets(FakeSource(), "t", spec) == Targets({0: 20, 1: 7})

    @pytest.mark.parametrize(
        ("offsets", "message"),
        [
            ({5: 0}, "t has no partition 5"),
            ({0: 9}, "offset 9 of t[0] is outside 10..50"),
            ({1: 8}, "offset 8 of t[1] is outside 0..7"),
        ],
    )
    def test_impossible_offsets_are_refused(self, offsets: dict[int, int], message: str) -> None:
        """A partition the topic lacks, or an offset outside the stored records and the end."""
        with pytest.raises(ConfigError, match=re.escape(message)):
            compute_targets(FakeSource(), "t", TargetSpec(Kind.OFFSETS, offsets=offsets))


class TestParsing:
    def test_offsets_list(self) -> None:
        """P=O pairs separated by commas, spaces allowed."""
        assert parse_offsets("0=5, 3=0") == {0: 5, 3: 0}

    @pytest.mark.parametrize("text", ["0", "0=x", "-1=3", "0=1,0=2", ""])
    def test_bad_offsets_list(self, text: str) -> None:
        """Anything else is a usage error (exit 2) naming the option."""
        with pytest.raises(ConfigError, match="--to-offset"):
            parse_offsets(text)

    def test_times(self) -> None:
        """ISO 8601 with Z or an offset, naive as UTC, or Unix seconds."""
        assert parse_time("2024-01-01T00:00:00Z", "--x") == 1_704_067_200_000
        assert parse_time("2024-01-01T01:00:00+01:00", "--x") == 1_704_067_200_000
        assert parse_time("2024-01-01T00:00:00", "--x") == 1_704_067_200_000
        assert parse_time("1704067200", "--x") == 1_704_067_200_000
        with pytest.raises(ConfigError, match="--x: 'soon' is neither"):
            parse_time("soon", "--x")
        with pytest.raises(ConfigError, match="--x: '-5' is before 1970"):
            parse_time("-5", "--x")


class TestTimeArgument:
    """`timearg.parse_time_ms`, shared by marshal-admin and marshal-audit."""

    def test_unix_seconds_whole_or_fractional(self) -> None:
        assert parse_time_ms("1704067200") == 1_704_067_200_000
        assert parse_time_ms(" 1704067200.5 ") == 1_704_067_200_500
        assert parse_time_ms("1704067200.0004") == 1_704_067_200_000
        assert parse_time_ms("1704067200.0006") == 1_704_067_200_001
        assert parse_time_ms("0") == 0

    def test_iso_8601_utc_unless_it_says_otherwise(self) -> None:
        assert parse_time_ms("2024-01-01T00:00:00Z") == 1_704_067_200_000
        assert parse_time_ms("2024-01-01T01:00:00+01:00") == 1_704_067_200_000
        assert parse_time_ms("2024-01-01T00:00:00") == 1_704_067_200_000
        assert parse_time_ms("2024-01-01") == 1_704_067_200_000
        assert parse_time_ms("2024-01-01T00:00:00.250Z") == 1_704_067_200_250

    @pytest.mark.parametrize(
        ("text", "why"),
        [
            ("soon", "is neither an ISO 8601 time"),
            ("", "is neither an ISO 8601 time"),
            ("-1", "is before 1970"),
            ("-0.5", "is before 1970"),
            ("1969-12-31T23:59:59Z", "is before 1970"),
            ("nan", "is not a finite number"),
            ("inf", "is not a finite number"),
        ],
    )
    def test_refused(self, text: str, why: str) -> None:
        """Not a time, before 1970 (no log time is) or not finite: a ValueError saying why."""
        with pytest.raises(TimeArgError, match=why):
            parse_time_ms(text)
        assert issubclass(TimeArgError, ValueError)
