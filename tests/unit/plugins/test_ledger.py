"""The ledger plugin's reader and checks (no broker)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_type_hints

import pytest

from marshal_workers.common.ledgerfile import (
    DIR_ENV,
    LedgerRow,
    find_duplicates,
    find_gaps,
    find_overlaps,
    find_stale_claims,
    read_ledger,
)
from marshal_workers.handler import Context, Record
from marshal_workers.plugins import ledger
from marshal_workers.protocol.modes import Mode


def row(offset: int, pid: int, start: float, end: float, partition: int = 0) -> LedgerRow:
    """A ledger row of topic t."""
    return LedgerRow(
        topic="t",
        partition=partition,
        offset=offset,
        client_id=f"c{pid}",
        pid=pid,
        token=pid,
        start=start,
        end=end,
        group="g",
        instance_id=f"c{pid}-1",
        slice=None,
        key_hash=None,
    )


def context() -> Context:
    """A context for calling the handler directly."""
    return Context(
        client_id="c",
        instance_id="c-1",
        group_id="g",
        topic="t",
        partition=0,
        fencing_token=7,
        mode=Mode.ALO,
        log=None,
        pid=1,
        lease_remaining=lambda: 10.0,
    )


def record(offset: int) -> Record:
    """A record of t/0."""
    return Record("t", 0, offset, None, b"v", None, ())


@pytest.fixture
def ledger_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ledger directory in the environment, and no ledger file open yet."""
    monkeypatch.setenv(DIR_ENV, str(tmp_path))
    monkeypatch.setattr(ledger, "_settings", None)
    return tmp_path


class TestWritingAndReading:
    def test_handle_appends_one_row_per_record(self, ledger_dir: Path) -> None:
        """Each handled record is one row with its coordinates, client, token and times."""
        for offset in (0, 1):
            ledger.handle(record(offset), context())
        rows = read_ledger(ledger_dir)
        assert [(r.offset, r.client_id, r.token) for r in rows] == [
            (0, "c", 7),
            (1, "c", 7),
        ]
        assert all(r.start <= r.end for r in rows)

    def test_rows_name_the_claims_group_and_instance(self, ledger_dir: Path) -> None:
        """The row carries the context's group and instance id, as the audit needs them to
        tell two instances of one client apart under one token."""
        ledger.handle(record(0), context())
        line = json.loads(next(ledger_dir.glob("ledger-*.jsonl")).read_text())
        assert (line["group"], line["instance_id"]) == ("g", "c-1")
        assert list(line) == list(LedgerRow.__annotations__)

    def test_old_ledger_rows_read_with_none_group_and_instance(self, tmp_path: Path) -> None:
        """Files written before group and instance_id existed read with None for both."""
        old = {
            k: v
            for k, v in row(3, 1, 0.0, 1.0)._asdict().items()
            if k not in ("group", "instance_id")
        }
        (tmp_path / "ledger-1.jsonl").write_text(json.dumps(old) + "\n")
        (only,) = read_ledger(tmp_path)
        assert (only.group, only.instance_id) == (None, None)
        assert {k: v for k, v in only._asdict().items() if k in old} == old

    def test_fail_at_offset_raises_and_writes_nothing(
        self, ledger_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """MARSHAL_LEDGER_FAIL_AT_OFFSET raises on that offset and leaves no row for it."""
        monkeypatch.setenv(ledger.FAIL_ENV, "1")
        ledger.handle(record(0), context())
        with pytest.raises(ledger.SimulatedError):
            ledger.handle(record(1), context())
        assert [r.offset for r in read_ledger(ledger_dir)] == [0]

    def test_reader_skips_a_torn_last_line(self, tmp_path: Path) -> None:
        """A last line cut short by a killed process is ignored; complete lines are kept."""
        whole = row(3, 1, 0.0, 1.0).line()
        (tmp_path / "ledger-1.jsonl").write_text(whole + "\n" + whole[:10])
        (tmp_path / "ledger-2.jsonl").write_text(row(2, 2, 0.0, 1.0).line() + "\n")
        assert [r.offset for r in read_ledger(tmp_path)] == [2, 3]


class TestDuplicates:
    def test_each_record_once_is_clean(self) -> None:
        """Distinct offsets give no duplicates."""
        assert find_duplicates([row(0, 1, 0, 1), row(1, 1, 1, 2)]) == {}

    def test_same_offset_twice_is_reported_with_both_rows(self) -> None:
        """An offset processed twice (even by the same process) is reported with both rows."""
        first, again = row(5, 1, 0, 1), row(5, 2, 3, 4)
        assert find_duplicates([first, row(6, 1, 1, 2), again]) == {("t", 0, 5): [first, again]}

    def test_same_offset_other_partition_is_not_a_duplicate(self) -> None:
        """Offsets are per partition."""
        assert find_duplicates([row(0, 1, 0, 1), row(0, 1, 0, 1, partition=1)]) == {}


class TestOverlaps:
    def test_handover_after_the_old_owner_finished_is_clean(self) -> None:
        """A new owner starting after the old one's last end is not an overlap."""
        assert find_overlaps([row(0, 1, 0.0, 1.0), row(1, 2, 1.0, 2.0)]) == []

    def test_two_processes_at_once_on_one_partition_overlap(self) -> None:
        """Work of two processes on one partition that intersects in time is reported."""
        old, new = row(0, 1, 0.0, 5.0), row(1, 2, 2.0, 3.0)
        assert find_overlaps([new, old]) == [(old, new)]

    def test_long_row_overlapping_several_later_rows(self) -> None:
        """A long row is compared with every later row that starts before it ends."""
        long = row(0, 1, 0.0, 10.0)
        later = [row(1, 2, 1.0, 2.0), row(2, 2, 3.0, 4.0)]
        assert find_overlaps([long, *later]) == [(long, later[0]), (long, later[1])]

    def test_same_process_or_other_partition_never_overlaps(self) -> None:
        """Rows of one process, or of different partitions, are never an overlap."""
        rows = [row(0, 1, 0.0, 5.0), row(1, 1, 2.0, 3.0), row(0, 2, 1.0, 2.0, partition=1)]
        assert find_overlaps(rows) == []


def claimed(partition: int, token: int, client: str, start: float) -> LedgerRow:
    """A row of ``client`` on ``partition`` under ``token``, started at ``start``."""
    return row(0, hash(client) % 1000, start, start + 0.1, partition)._replace(
        client_id=client, token=token
    )


class TestStaleClaims:
    def test_equal_tokens_of_two_partitions_are_two_claims(self) -> None:
        """Seen in a real run: partitions 7 and 5 were both granted at token 2 (their claims
        live on two coordination partitions). A claim won after SIGCONT with a token equal to
        an old one of another partition is a new claim, not a stale one."""
        rows = [claimed(7, 2, "a", 1.0), claimed(5, 40, "b", 2.0), claimed(5, 2 + 60, "a", 9.0)]
        rows.append(claimed(7, 2, "c", 3.0))
        rows.append(claimed(3, 2, "a", 9.5))  # partition 3 was never handled before: new
        assert find_stale_claims(rows, "a", since=5.0) == []

    def test_a_claim_held_before_used_again_is_stale(self) -> None:
        """The client handling again under its old claim after another took the partition."""
        rows = [claimed(5, 2, "a", 1.0), claimed(5, 40, "b", 2.0), claimed(5, 2, "a", 9.0)]
        assert find_stale_claims(rows, "a", since=5.0) == [("t", 5, None, 2)]

    def test_a_token_older_than_the_takeover_is_stale(self) -> None:
        """Any token no newer than the partition's newest claim before ``since`` is stale,
        even one the ledger never showed the client using."""
        rows = [claimed(5, 40, "b", 2.0), claimed(5, 39, "a", 9.0), claimed(5, 41, "a", 9.1)]
        assert find_stale_claims(rows, "a", since=5.0) == [("t", 5, None, 39)]

    def test_slices_are_claims_of_their_own(self) -> None:
        """Two slices of one partition are two claims, with tokens that need not be ordered."""
        old = claimed(5, 40, "b", 2.0)._replace(slice="key.0of2")
        new = claimed(5, 7, "a", 9.0)._replace(slice="key.1of2")
        assert find_stale_claims([old, new], "a", since=5.0) == []


class TestGaps:
    def test_everything_expected_was_processed(self) -> None:
        """No gap when every expected offset has a row."""
        assert find_gaps([row(0, 1, 0, 1), row(1, 1, 1, 2)], {("t", 0): range(2)}) == []

    def test_missing_offsets_are_listed_in_order(self) -> None:
        """Expected offsets without a row are listed, partition by partition."""
        rows = [row(1, 1, 0, 1)]
        expected = {("t", 1): range(1), ("t", 0): range(3)}
        assert find_gaps(rows, expected) == [("t", 0, 0), ("t", 0, 2), ("t", 1, 0)]


def test_the_audits_spark_schema_and_parser_are_read_off_the_row() -> None:
    """The Spark schema names every field of the row, in order, with its type; the line
    parser reads a row the plugin writes back as the same values (none listed twice)."""
    from marshal_workers.audit.ledger import LEDGER_DDL, parse_line  # noqa: PLC0415

    spark = {str: "string", int: "long", float: "double"}
    expected = []
    for name, hint in get_type_hints(LedgerRow).items():
        kind = next(a for a in getattr(hint, "__args__", (hint,)) if a is not type(None))
        expected.append(f"`{name}` {spark[kind]}")
    assert ", ".join(expected) == LEDGER_DDL
    written = row(5, 7, 1.0, 2.5)._replace(slice="k2/4", key_hash=12345)._asdict()
    entry = parse_line(json.dumps(written))
    assert entry is not None and entry._asdict() == written
    old = {k: v for k, v in written.items() if k not in ("group", "instance_id", "slice")}
    assert parse_line(json.dumps(old)) == LedgerRow(**{**written, "group": None,
        "instance_id": None, "slice": None})  # fmt: skip
    assert parse_line(json.dumps({**written, "token": None})) is None
