"""Ledger checks on a sliced group (ordering key or unordered): each fault is found, and a
clean ledger of slices worked side by side has none (pure)."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

from marshal_workers.audit import report
from marshal_workers.audit.local import run_local
from marshal_workers.audit.model import AuditConfig, FileInput
from marshal_workers.audit.schema import columns
from marshal_workers.audit.slices import slice_summary
from marshal_workers.common.ledgerfile import LedgerRow
from marshal_workers.protocol.wire import CoordRecord, Message, coordination_partition
from tests.support import HB, TOPIC, claim, hb, record, release, reserve

T0 = 1_700_000_000_000
S0 = T0 / 1000
U0, U1 = f"{TOPIC}+unordered.0of2", f"{TOPIC}+unordered.1of2"
K0, K1 = f"{TOPIC}+key.0of2", f"{TOPIC}+key.1of2"


def log(*entries: tuple[int, Message]) -> list[CoordRecord]:
    """Records of one coordination partition: (ms after T0, message), in offset order."""
    return [record(m, i, T0 + t) for i, (t, m) in enumerate(entries)]


def two_slices(s0: str, s1: str, position: int = 6) -> list[CoordRecord]:
    """A holds slice 0 (token 0) and B slice 1 (token 1) of partition 0, both committing
    [0, ``position``); the log ends at 1500 with both still holding."""
    return log(
        (0, claim("A", topic=s0)), (10, claim("B", topic=s1)),
        (500, hb("A", 0, topic=s0)), (510, hb("B", 0, topic=s1)),
        (1500, hb("A", position, topic=s0)), (1510, hb("B", position, topic=s1)),
    )  # fmt: skip


def row(
    offset: int, client: str, start_ms: int, part: str, *, key: bytes | None = None,
    pid: int = 0, dur: int = 10,
) -> LedgerRow:  # fmt: skip
    """A ledger row of partition 0 handled by ``client`` (A: token 0, B: token 1) under slice
    ``part`` (``key.0of2``) from T0 + start_ms for ``dur`` ms."""
    pid = pid or {"A": 101, "B": 202}.get(client, 303)
    token = {"A": 0, "B": 1}.get(client, 9)
    start, end = S0 + start_ms / 1000, S0 + (start_ms + dur) / 1000
    key_hash = None if key is None else zlib.crc32(key)
    return LedgerRow(
        TOPIC, 0, offset, client, pid, token, start, end, "g", f"{client}-1", part, key_hash
    )


def stripes(count: int = 6) -> list[LedgerRow]:
    """Both unordered stripes at work side by side: A the even offsets, B the odd ones."""
    return [
        row(o, "A" if o % 2 == 0 else "B", 600 + 50 * (o // 2), f"unordered.{o % 2}of2")
        for o in range(count)
    ]


def check(records: list[CoordRecord], ledger: list[LedgerRow]) -> list[dict[str, Any]]:
    """The violations of a local audit as dicts."""
    config = AuditConfig(FileInput(Path("-")), Path("-"), HB)
    result, _ = run_local(records, config, ledger)
    return [dict(zip(columns("violations"), v, strict=True)) for v in result.violations]


def kinds(violations: list[dict[str, Any]]) -> list[str]:
    return sorted(v["kind"] for v in violations)


class TestUnorderedStripes:
    def test_stripes_worked_side_by_side_are_clean(self) -> None:
        """Each row is matched to its own slice's claim: no zombie work, no overlap between
        slices that run at once by design, no gap from another slice's offsets."""
        assert check(two_slices(U0, U1), stripes()) == []

    def test_a_stripes_missing_offset_is_its_gap_alone(self) -> None:
        """Slice 0 committed past offset 2 and never handled it: one gap, of slice 0, and the
        odd offsets of slice 1 below the position are not gaps of slice 0."""
        found = check(two_slices(U0, U1), [r for r in stripes() if r.offset != 2])
        assert kinds(found) == ["alo_gap"]
        assert (found[0]["offset"], found[0]["slice"]) == (2, "unordered.0of2")
        assert "offsets 2..2 (1)" in found[0]["detail"]

    def test_gaps_of_a_stripe_are_one_run(self) -> None:
        """Offsets 2 and 4 of slice 0 missing are one run of the slice, not two gaps."""
        found = check(two_slices(U0, U1), [r for r in stripes() if r.offset not in (2, 4)])
        assert kinds(found) == ["alo_gap"]
        assert "offsets 2..4 (2)" in found[0]["detail"]

    def test_an_offset_outside_the_slice_is_wrong_slice(self) -> None:
        """A worker of slice 0 handling an odd offset handled a record not its slice's."""
        found = check(two_slices(U0, U1), [*stripes(), row(3, "A", 900, "unordered.0of2")])
        assert kinds(found) == ["wrong_slice"]
        assert (found[0]["offset"], found[0]["client_id"]) == (3, "A")

    def test_one_offset_handled_by_two_slices_at_once(self) -> None:
        """Offset 3 handled by slice 1 and, at the same time, by slice 0: two holders of one
        offset at once, whatever each claim says."""
        ledger = [*stripes(), row(3, "A", 652, "unordered.0of2")]
        found = check(two_slices(U0, U1), ledger)
        assert kinds(found) == ["offset_overlap", "wrong_slice"]
        overlap = next(v for v in found if v["kind"] == "offset_overlap")
        assert [r["client_id"] for r in json.loads(overlap["evidence"])["ledger"]] == ["B", "A"]

    def test_two_processes_of_one_slice_at_once_overlap(self) -> None:
        """Two processes on one slice at once overlap, as on a partition."""
        found = check(two_slices(U0, U1), [*stripes(), row(4, "A", 602, "unordered.0of2", pid=9)])
        assert "overlap" in kinds(found)

    def test_a_row_is_judged_by_its_own_slices_claim(self) -> None:
        """B's token names B's claim on slice 1: B working under slice 0 is zombie work."""
        found = check(two_slices(U0, U1), [*stripes(), row(8, "B", 900, "unordered.0of2")])
        assert "zombie_work" in kinds(found)


def keyed(offset: int, key: bytes, start_ms: int, **kw: Any) -> LedgerRow:
    """A row of the key slice ``key`` falls in, by its holder (A: slice 0, B: slice 1)."""
    index = zlib.crc32(key) % 2
    return row(offset, "AB"[index], start_ms, f"key.{index}of2", key=key, **kw)


# keys with known slices: crc32 mod 2
KEY0 = next(k for k in (b"k1", b"k2", b"k3", b"k4") if zlib.crc32(k) % 2 == 0)
KEY1 = next(k for k in (b"k1", b"k2", b"k3", b"k4") if zlib.crc32(k) % 2 == 1)


def key_ledger() -> list[LedgerRow]:
    """Offsets 0..5 of keys KEY0/KEY1 alternating, each handled by its key's slice."""
    return [keyed(o, (KEY0, KEY1)[o % 2], 600 + 50 * o) for o in range(6)]


class TestKeySlices:
    def test_key_slices_side_by_side_are_clean(self) -> None:
        """Each key handled by its slice, in offset order: clean."""
        assert check(two_slices(K0, K1), key_ledger()) == []

    def test_a_key_handled_by_another_slice_is_wrong_slice(self) -> None:
        """A record of KEY1 handled by slice 0's worker is not its slice's."""
        bad = row(1, "A", 650, "key.0of2", key=KEY1)
        found = check(two_slices(K0, K1), [*key_ledger()[:1], bad, *key_ledger()[2:]])
        assert kinds(found) == ["wrong_slice"]

    def test_a_key_handled_out_of_order_is_reported(self) -> None:
        """Slice 0's worker handles KEY0@4 before KEY0@2: per-key order broken."""
        ledger = key_ledger()
        ledger[2], ledger[4] = ledger[2]._replace(offset=4), ledger[4]._replace(offset=2)
        found = check(two_slices(K0, K1), ledger)
        assert kinds(found) == ["key_order"]
        assert found[0]["offset"] == 2 and found[0]["slice"] == "key.0of2"

    def test_one_process_handling_an_offset_again_is_not_out_of_order(self) -> None:
        """The same record handled twice in a row by its holder is a redelivery (ALO)."""
        assert check(two_slices(K0, K1), [*key_ledger(), keyed(4, KEY0, 1000)]) == []

    def test_a_redelivery_by_the_next_holder_is_not_out_of_order(self) -> None:
        """After a failover the next holder handles a key again from its position: ALO
        redelivery, not a break of per-key order."""
        records = log(
            (0, claim("A", topic=K0)), (10, claim("B", topic=K1)),
            (500, hb("A", 0, topic=K0)), (510, hb("B", 0, topic=K1)),
            (1500, hb("B", 6, topic=K1)),
            (3600, claim("C", topic=K0)), (3700, hb("C", 6, topic=K0)),
        )  # fmt: skip
        again = [row(o, "C", 3610 + o, "key.0of2", key=KEY0, pid=303) for o in (0, 2, 4)]
        again = [r._replace(token=5) for r in again]
        assert check(records, [*key_ledger(), *again]) == []

    def test_a_gap_every_key_slice_committed_past_is_reported(self) -> None:
        """An offset no row handled, below the position of every key slice, is a gap."""
        found = check(two_slices(K0, K1), [r for r in key_ledger() if r.offset != 3])
        assert kinds(found) == ["alo_gap"]
        assert found[0]["offset"] == 3

    def test_a_gap_only_one_key_slice_committed_past_is_unknowable(self) -> None:
        """Slice 1 committed only to 2: offset 4 unhandled may be slice 1's record (the log
        names no keys), so it is not reported."""
        records = log(
            (0, claim("A", topic=K0)), (10, claim("B", topic=K1)),
            (500, hb("A", 0, topic=K0)), (510, hb("B", 0, topic=K1)),
            (1500, hb("A", 6, topic=K0)), (1510, hb("B", 2, topic=K1)),
        )  # fmt: skip
        assert check(records, [r for r in key_ledger() if r.offset not in (4, 5)]) == []


class TestAmoStripes:
    def test_a_stripe_loses_only_its_own_offsets(self) -> None:
        """Stripe 0 reserved [0, 6) and handled 0 and 4: offset 2 is its loss, and the odd
        offsets, stripe 1's records, are not."""
        records = log(
            (0, claim("A", topic=U0)), (10, claim("B", topic=U1)),
            (100, hb("A", 0, topic=U0)), (110, hb("B", 0, topic=U1)),
            (400, reserve("A", 6, topic=U0)), (450, hb("A", 6, topic=U0)),
            (460, reserve("B", 6, topic=U1)), (470, hb("B", 6, topic=U1)),
            (2000, release("A", 6, topic=U0)), (2010, release("B", 6, topic=U1)),
        )  # fmt: skip
        ledger = [r for r in stripes() if r.offset != 2]
        config = AuditConfig(FileInput(Path("-")), Path("-"), HB)
        result, tables = run_local(records, config, ledger)
        assert result.violations == []
        lost = [dict(zip(columns("amo_losses"), r, strict=True)) for r in tables["amo_losses"]]
        assert [(r["topic"], r["start_offset"], r["end_offset"]) for r in lost] == [(U0, 2, 3)]


class TestAmoKeySlices:
    def test_a_crashed_key_slice_shows_what_the_log_puts_at_risk(self) -> None:
        """Key slice 0's holder A reserved [0, 6) and [6, 12) and crashed; B took it over.
        The log names no keys, so the ledger cannot tell which unhandled offsets were slice
        0's: the audit shows what the log puts at risk, as status does, with ``handled``
        null, not 0 losses (a review read 0 in the audit beside status's 8 ranges)."""
        records = log(
            (0, claim("A", topic=K0)), (100, hb("A", 0, topic=K0)),
            (400, reserve("A", 6, topic=K0)), (450, hb("A", 6, topic=K0)),
            (500, reserve("A", 12, topic=K0)),
            (4000, claim("B", topic=K0)),
        )  # fmt: skip
        ledger = [row(o, "A", 600, "key.0of2", key=b"k") for o in range(3)]
        config = AuditConfig(FileInput(Path("-")), Path("-"), HB)
        _, tables = run_local(records, config, ledger)
        lost = [dict(zip(columns("amo_losses"), r, strict=True)) for r in tables["amo_losses"]]
        shown = [(r["topic"], r["start_offset"], r["end_offset"], r["cause"], r["handled"])
                 for r in lost]  # fmt: skip
        assert shown == [(K0, 0, 12, "taken_over", None)]


class TestReportAndLag:
    def test_a_slices_lag_is_measured_against_its_data_partition(self) -> None:
        """A slice's claim topic names no Kafka topic: its lag is against the data
        partition's high watermark (an upper bound: the slice owes only some records)."""
        config = AuditConfig(FileInput(Path("-")), Path("-"), HB)
        _, tables = run_local(two_slices(U0, U1), config, None, watermarks={(TOPIC, 0): 10})
        cols = columns("lag")
        lags = {(r[cols.index("topic")], r[cols.index("offset")], r[cols.index("lag")])
                for r in tables["lag"]}  # fmt: skip
        assert (U0, 6, 4) in lags and (U1, 6, 4) in lags

    def test_the_report_shows_each_partitions_slices(self) -> None:
        """The report's slices table lists both slices of partition 0 with their holders,
        and the timeline names each slice's lane under its partition."""
        config = AuditConfig(FileInput(Path("-")), Path("-"), HB)
        result, _ = run_local(two_slices(U0, U1), config, stripes())
        assert slice_summary(result.tables["claims"]) == [
            ("g", TOPIC, 0, "unordered.0of2", 1, "A", "A", 6, "still_held"),
            ("g", TOPIC, 0, "unordered.1of2", 1, "B", "B", 6, "still_held"),
        ]
        lanes = sorted([("g", f"{TOPIC}+key.10of11", 0), ("g", f"{TOPIC}+key.2of11", 0),
                        ("g", TOPIC, 1)], key=report.lane_order)  # fmt: skip
        assert [report.lane_label(n) for n in lanes] == [
            "g/orders/0 key.2of11",
            "g/orders/0 key.10of11",
            "g/orders/1",
        ]
        assert "Slices of partitions (2)" in report.render(result)

    def test_a_violation_is_marked_on_its_slices_lane(self) -> None:
        """A slice's violation is marked on that slice's lane; a key cut's gap on them all."""
        names = [("g", U0, 0), ("g", U1, 0), ("g", K0, 0), ("g", K1, 0)]
        found = check(two_slices(U0, U1), [*stripes(), row(3, "A", 900, "unordered.0of2")])
        assert report.violation_lanes(tuple(found[0].values()), names) == [0]
        gap = check(two_slices(K0, K1), [r for r in key_ledger() if r.offset != 3])
        assert report.violation_lanes(tuple(gap[0].values()), names) == [2, 3]


class TestTokensPerClaim:
    def test_a_token_of_another_slices_claim_does_not_cover_a_row(self) -> None:
        """Slices of one partition live on different coordination partitions, so their
        tokens (coordination offsets) may be equal: A's claim on slice 0 and B's on slice 1
        both have token 0. B working under slice 0 with its token is zombie work, not covered
        by its claim on slice 1."""
        s0, s1 = f"{TOPIC}+key.0of4", f"{TOPIC}+key.1of4"
        homes = {coordination_partition(t, 0, 2) for t in (s0, s1)}
        assert homes == {0, 1}, "the two slices should live on different coordination partitions"
        records = [
            record(claim("A", topic=s0), 0, T0, partition=coordination_partition(s0, 0, 2)),
            record(claim("B", topic=s1), 0, T0 + 10, partition=coordination_partition(s1, 0, 2)),
        ]
        mine = LedgerRow(TOPIC, 0, 0, "A", 101, 0, S0 + 0.1, S0 + 0.11, "g", "A-1", "key.0of4", 4)
        theirs = mine._replace(offset=1, client_id="B", pid=202, instance_id="B-1", key_hash=8,
                               start=S0 + 0.2, end=S0 + 0.21)  # fmt: skip
        config = AuditConfig(FileInput(Path("-")), Path("-"), HB)
        result, _ = run_local(records, config, [mine, theirs], num_partitions=2)
        found = [dict(zip(columns("violations"), v, strict=True)) for v in result.violations]
        assert [(v["kind"], v["client_id"]) for v in found] == [("zombie_work", "B")]


class TestOlderLedgers:
    def test_a_key_row_without_a_key_hash_is_not_judged_by_its_offset(self) -> None:
        """key_hash is optional: a key slice's rows that lack it (a record without a key, or a
        ledger that does not write the field) are not taken for another slice's records."""
        keys_against_offsets = [keyed(o, (KEY1, KEY0)[o % 2], 600 + 50 * o) for o in range(6)]
        ledger = [r._replace(key_hash=None) for r in keys_against_offsets]
        assert check(two_slices(K0, K1), ledger) == []
