"""The audit's tables from hand-written logs with known answers (pure: no Spark, no broker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marshal_workers.audit import arrow
from marshal_workers.audit.claimfold import fold_by_claim
from marshal_workers.audit.finalize import add_lag, merge_groups
from marshal_workers.audit.fold import FoldSettings, fold_batches, fold_records
from marshal_workers.audit.local import run_local
from marshal_workers.audit.model import AuditConfig, FileInput, finish_small
from marshal_workers.audit.schema import TABLES, columns
from marshal_workers.audit.synthetic import Fleet, generate
from marshal_workers.audit.tables import Window
from marshal_workers.common.ledgerfile import LedgerRow
from marshal_workers.protocol.members import member_key
from marshal_workers.protocol.rationalizer import RationalizerConfig
from marshal_workers.protocol.wire import (
    ClaimingPartition,
    CoordRecord,
    Heartbeat,
    Message,
    encode,
    record_key,
)
from tests.support import GROUP, HB, TOPIC, claim, hb, pause, record, release, reserve

T0 = 1_700_000_000_000


def log(*entries: tuple[int, Message]) -> list[CoordRecord]:
    """Records of one coordination partition: (ms after T0, message), in offset order."""
    return [record(m, i, T0 + t) for i, (t, m) in enumerate(entries)]


def audit(
    records: list[CoordRecord], window: Window | None = None, **kw: Any
) -> dict[str, list[dict[str, Any]]]:
    """Every table of a local audit as dicts (HB = 1 s)."""
    config = AuditConfig(FileInput(Path("-")), Path("-"), HB, window=window or Window(), **kw)
    _, tables = run_local(records, config)
    return {name: [dict(zip(columns(name), r, strict=True)) for r in rows]
            for name, rows in tables.items()}  # fmt: skip


HANDOVER_THEN_FAILOVER = log(
    (0, claim("A")),
    (500, hb("A", 0)),
    (1000, hb("A", 10)),
    (1500, hb("A", 20)),
    (2000, release("A", 25)),
    (2100, claim("B")),  # token 5: a handover 100 ms after the release
    (2600, hb("B", 30)),
    (5000, claim("C")),  # token 7: B was last heard at 2600, stale after 4600
    (5500, hb("C", 40)),
)


class TestClaimIntervals:
    def test_released_claim_ends_at_its_release(self) -> None:
        """A released claim's interval runs from its win to the release, with its offsets."""
        a = audit(HANDOVER_THEN_FAILOVER)["claims"][0]
        assert (a["client_id"], a["token"], a["start_ms"], a["end_ms"]) == ("A", 0, T0, T0 + 2000)
        assert a["ended"] == "released" and a["heartbeats"] == 3
        assert (a["first_offset"], a["last_offset"]) == (0, 25)

    def test_taken_over_claim_ends_two_heartbeat_intervals_after_its_last_heartbeat(self) -> None:
        """A claim won from a stale holder ended where that holder's right ended."""
        b = audit(HANDOVER_THEN_FAILOVER)["claims"][1]
        assert (b["client_id"], b["token"], b["start_ms"]) == ("B", 5, T0 + 2100)
        assert b["ended"] == "taken_over" and b["successor_client_id"] == "C"
        assert b["end_ms"] == T0 + 2600 + 2 * HB and b["last_heartbeat_ms"] == T0 + 2600

    def test_claim_fresh_at_the_end_of_the_log_is_still_held(self) -> None:
        """The last claim has no end while its holder is not stale at the log's end."""
        c = audit(HANDOVER_THEN_FAILOVER)["claims"][2]
        assert (c["client_id"], c["token"], c["ended"], c["end_ms"]) == ("C", 7, "still_held", None)

    def test_claim_silent_at_the_end_of_the_whole_log_is_stale(self) -> None:
        """Staleness at the end is judged against the newest record of any partition."""
        other = CoordRecord(1, 0, T0 + 9000, record_key(hb("x", 0, part=9)), encode(hb("x", 0)))
        c = audit([*HANDOVER_THEN_FAILOVER, other])["claims"][2]
        assert (c["ended"], c["end_ms"]) == ("stale", T0 + 5500 + 2 * HB)

    def test_new_instance_of_the_holder_replaces_the_interval_under_a_new_token(self) -> None:
        """Restart recovery: the old instance's interval ends at the takeover heartbeat, whose
        offset is the new instance's token."""
        claims = audit(log((0, claim("A")), (400, hb("A", 5)), (800, hb("A", 7, inst="A-2"))))[
            "claims"
        ]
        assert [(c["instance_id"], c["token"], c["ended"]) for c in claims] == [
            ("A-1", 0, "replaced"),
            ("A-2", 2, "still_held"),
        ]
        assert claims[0]["end_ms"] == claims[1]["start_ms"] == T0 + 800
        assert claims[1]["first_offset"] == 5

    def test_rejected_records_change_no_interval(self) -> None:
        """A rival's claim, a foreign heartbeat and a foreign release leave A's claim alone."""
        tables = audit(
            log((0, claim("A")), (100, claim("B")), (200, hb("B", 9)), (300, release("B", 9)))
        )
        assert [c["client_id"] for c in tables["claims"]] == ["A"]
        assert [e["verdict"] for e in tables["events"]] == [
            "ClaimGranted", "ClaimRejected", "HeartbeatRejected", "ReleaseRejected",
        ]  # fmt: skip

    def test_member_claims_are_membership_not_data_claims(self) -> None:
        """A __member.<client> claim appears in membership only."""
        key = member_key(GROUP, "A")
        joined = ClaimingPartition(0, "A-1", "A", GROUP, key.topic, key.partition)
        alive = Heartbeat(0, "A-1", "A", GROUP, key.topic, key.partition, 0)
        tables = audit(log((0, joined), (300, alive), (400, claim("A"))))
        assert [(m["topic"], m["heartbeats"]) for m in tables["membership"]] == [(key.topic, 1)]
        assert [c["topic"] for c in tables["claims"]] == [TOPIC]
        assert tables["groups"][0]["members"] == 1 and tables["groups"][0]["partitions"] == 1


class TestFailovers:
    def test_handover_and_failover_durations(self) -> None:
        """Handover: release to claim; failover: last valid heartbeat to the winning claim."""
        rows = audit(HANDOVER_THEN_FAILOVER)["failovers"]
        got = [(r["kind"], r["old_client_id"], r["new_client_id"], r["duration_ms"]) for r in rows]
        assert got == [
            ("handover", "A", "B", 100),
            ("failover", "B", "C", 2400),
        ]  # fmt: skip
        assert rows[1]["old_last_seen_ms"] == T0 + 2600 and rows[1]["claimed_ms"] == T0 + 5000
        assert (rows[1]["old_token"], rows[1]["new_token"]) == (5, 7)

    def test_first_claim_is_no_failover(self) -> None:
        """Claiming a never-held partition is not a failover."""
        assert audit(log((0, claim("A"))))["failovers"] == []


class TestHeartbeatGaps:
    def test_longest_gap_and_gaps_past_the_interval(self) -> None:
        """Gaps are measured from the win; a gap >= HB counts as one past the interval."""
        gaps = audit(
            log((0, claim("A")), (400, hb("A", 1)), (1900, hb("A", 2)), (2300, hb("A", 3)))
        )
        row = gaps["heartbeat_gaps"][0]
        assert (row["heartbeats"], row["max_gap_ms"], row["max_gap_at_ms"]) == (3, 1500, T0 + 1900)
        assert row["gaps_over_interval"] == 1 and row["mean_gap_ms"] == 2300 / 3


class TestReservationsAndLag:
    def test_reservations_carry_the_batch_and_make_the_group_amo(self) -> None:
        """Each granted reservation is a row [start, end); the group is then AMO."""
        tables = audit(
            log(
                (0, claim("A")),
                (100, reserve("A", 50)),
                (200, hb("A", 50)),
                (300, reserve("A", 80)),
            )
        )
        got = [(r["start_offset"], r["end_offset"], r["count"]) for r in tables["reservations"]]
        assert got == [(None, 50, None), (50, 80, 30)]
        assert tables["groups"][0]["mode"] == "amo"
        assert tables["claims"][0]["reserved_offset"] == 80

    def test_lag_is_the_watermark_minus_the_committed_position(self) -> None:
        """Lag rows come from valid heartbeats; lag is filled in where the watermark is known."""
        rows = [
            ("g", "orders", 0, "A", 0, T0, 7, None, None),
            ("g", "other", 0, "A", 0, T0, 1, None, None),
        ]
        assert add_lag(rows, {("orders", 0): 10}) == [
            ("g", "orders", 0, "A", 0, T0, 7, 10, 3),
            ("g", "other", 0, "A", 0, T0, 1, None, None),
        ]  # fmt: skip


class TestGroupsAndEvents:
    def test_events_table_has_one_row_per_record_with_the_dump_verdicts(self) -> None:
        """Every record, malformed ones included, is one events row with its verdict."""
        garbage = CoordRecord(0, len(HANDOVER_THEN_FAILOVER), T0 + 6000, b"k", b"junk")
        tables = audit([*HANDOVER_THEN_FAILOVER, garbage])
        assert len(tables["events"]) == len(HANDOVER_THEN_FAILOVER) + 1
        assert tables["events"][-1]["verdict"] == "Malformed"
        assert tables["coordination"][0]["malformed"] == 1
        assert tables["coordination"][0]["records"] == len(HANDOVER_THEN_FAILOVER) + 1

    def test_group_parts_add_up_and_amo_wins(self) -> None:
        """Counts of one group's claims, failovers, handovers and pauses from several
        coordination partitions add; partitions and members are its distinct claim keys;
        AMO anywhere is AMO."""
        parts = [("g", "alo", 2, 1, 3, 1, 0, 0), ("g", "amo", 2, 1, 1, 0, 1, 0)]
        keys = [("g", "t", 0), ("g", "t", 1), ("g", "__member.A", 0)]
        keys += [("g", "t", 1), ("g", "t", 2), ("g", "__member.B", 0)]
        assert merge_groups(parts, keys) == [("g", "amo", 3, 2, 4, 1, 1, 0)]
        assert merge_groups(parts, keys, {"*": "alo"}) == [("g", "alo", 3, 2, 4, 1, 1, 0)]

    def test_a_moved_group_counts_each_partition_and_member_once(self) -> None:
        """A group moved to another placement claimed its 3 partitions, and its 2 members
        announced themselves, on two coordination partitions: still 3 partitions and 2
        members (its claims add up: 6), whether folded per partition or per claim (Spark)."""

        def life(coord: int, start: int) -> list[CoordRecord]:
            members = [claim(c, topic=member_key(GROUP, c).topic) for c in "AB"]
            msgs = [*members, *(claim("AB"[p % 2], p) for p in range(3))]
            return [record(m, i, T0 + start + 10 * i, coord) for i, m in enumerate(msgs)]

        records = [*life(0, 0), *life(1, 5000)]
        counts = [(g["partitions"], g["members"], g["claims"]) for g in audit(records)["groups"]]
        assert counts == [(3, 2, 6)]
        config = AuditConfig(FileInput(Path("-")), Path("-"), HB)
        per_claim = fold_by_claim(records, FoldSettings(RationalizerConfig(HB)))
        assert finish_small(per_claim, config)[0]["groups"] == [(GROUP, "alo", 3, 2, 6, 0, 0, 0)]

    def test_pausing_admin_intervals_are_marked(self) -> None:
        """A claim by the client that paused the group is by_admin (set-position)."""
        tables = audit(
            log((0, pause("marshal-admin", (T0 + 60_000) // 1000)), (10, claim("marshal-admin")))
        )
        assert tables["claims"][0]["by_admin"] is True


class TestWindow:
    def test_group_filter_keeps_only_that_group(self) -> None:
        """--group drops other groups' rows but folds their records all the same."""
        other = ClaimingPartition(0, "Z-1", "Z", "other", TOPIC, 1)
        tables = audit([*HANDOVER_THEN_FAILOVER, record(other, 9, T0 + 5600)], Window(group="g"))
        assert {c["group"] for c in tables["claims"]} == {"g"}
        assert {e["group"] for e in tables["events"]} == {"g"}

    def test_since_and_until_keep_what_overlaps_the_window(self) -> None:
        """Intervals overlapping [since, until] stay whole; events outside it go."""
        tables = audit(HANDOVER_THEN_FAILOVER, Window(since_ms=T0 + 2050, until_ms=T0 + 2700))
        assert [c["client_id"] for c in tables["claims"]] == ["B"]
        assert [f["kind"] for f in tables["failovers"]] == ["handover"]
        assert {e["log_time_ms"] for e in tables["events"]} == {T0 + 2100, T0 + 2600}


class TestArrowStreaming:
    def test_packed_rows_come_back_unchanged(self) -> None:
        """Rows packed as Arrow IPC unpack to the same tuples, nulls included."""
        rows = audit(HANDOVER_THEN_FAILOVER)
        for name in ("claims", "failovers", "events"):
            tuples = [tuple(r.values()) for r in rows[name]]
            assert arrow.rows_of(arrow.unpack(arrow.pack(name, tuples)), name) == tuples

    def test_streaming_fold_over_batches_matches_the_plain_fold(self) -> None:
        """fold_batches over small Arrow batches gives exactly fold_records' rows."""
        syn = generate(3000, Fleet(partitions=6, clients=3, coord_partitions=3, amo=True, seed=3))
        ordered = sorted(syn.records, key=lambda r: (r.partition, r.offset))
        settings = FoldSettings(RationalizerConfig(HB), batch_rows=100)
        batches = [arrow.record_batch(ordered[i : i + 97]) for i in range(0, len(ordered), 97)]
        streamed: dict[str, list[Any]] = {}
        for packed in fold_batches(batches, settings):
            for name, data in zip(
                packed.column("table").to_pylist(), packed.column("data").to_pylist(), strict=True
            ):
                streamed.setdefault(name, []).extend(arrow.rows_of(arrow.unpack(data), name))
        plain = fold_records(syn.records, settings)
        assert set(streamed) == set(plain)
        for name, rows in plain.items():
            assert sorted(streamed[name], key=repr) == sorted(rows, key=repr), name


class TestDocumentation:
    def test_readme_names_every_ledger_field(self) -> None:
        """docs/audit.md lists the ledger fields the audit reads, in order."""
        readme = (Path(__file__).parents[3] / "docs/audit.md").read_text()
        assert f"`{', '.join(LedgerRow._fields)}`" in " ".join(readme.split())

    def test_readme_documents_every_column_of_every_table(self) -> None:
        """docs/audit.md documents every column of every table as schema.py."""
        readme = (Path(__file__).parents[3] / "docs/audit.md").read_text()
        for name, cols in TABLES.items():
            assert f"`{name}`" in readme, name
            for column, kind, meaning in cols:
                assert f"| `{column}` | {kind} | {meaning} |" in readme, (name, column)
