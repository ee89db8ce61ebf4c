"""Ledger checks with injected faults: each is found, and a clean ledger has none (pure)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from marshal_workers.audit.cli import main, parse_modes, parse_time
from marshal_workers.audit.exitcodes import AuditUsageError
from marshal_workers.audit.ledger import (
    entries_of,
    is_complete,
    ledger_files,
    parse_line,
    read_entries,
)
from marshal_workers.audit.local import run_local
from marshal_workers.audit.model import AuditConfig, FileInput
from marshal_workers.audit.schema import columns
from marshal_workers.audit.session import error_line
from marshal_workers.audit.summary import summarize
from marshal_workers.audit.synthetic import Fleet, generate
from marshal_workers.audit.tables import Window
from marshal_workers.common.ledgerfile import OPTIONAL_FIELDS, LedgerRow
from marshal_workers.protocol.wire import ClaimingPartition, CoordRecord, Message
from tests.support import HB, TOPIC, claim, hb, pause, record, release, reserve

T0 = 1_700_000_000_000
S0 = T0 / 1000


def log(*entries: tuple[int, Message]) -> list[CoordRecord]:
    """Records of one coordination partition: (ms after T0, message), in offset order."""
    return [record(m, i, T0 + t) for i, (t, m) in enumerate(entries)]


def row(
    offset: int,
    client: str,
    token: int,
    start_ms: int,
    *,
    pid: int = 0,
    dur: int = 10,
    inst: str | None = None,
    group: str | None = None,
) -> LedgerRow:
    """A ledger row of partition 0 handled from T0 + start_ms for ``dur`` ms.

    Without ``inst`` and ``group`` it is a row of an older ledger, which named neither."""
    pid = pid or {"A": 101, "B": 202}.get(client, 303)
    start, end = S0 + start_ms / 1000, S0 + (start_ms + dur) / 1000
    return LedgerRow(TOPIC, 0, offset, client, pid, token, start, end, group, inst)


# A holds partition 0 (token 0) from 0 to its release at 2000, committing 0..3;
# B claims at 2100 (token 4) and commits 3..5; the log ends at 2600 with B still holding.
LEDGER_SCHEMA = pa.schema(
    [(f, pa.string()) for f in ("topic", "client_id")]
    + [(f, pa.int64()) for f in ("partition", "offset", "pid", "token")]
    + [(f, pa.float64()) for f in ("start", "end")]
    + [(f, pa.string()) for f in ("group", "instance_id", "slice")]
    + [("key_hash", pa.int64())]
)
"""The ledger columns as Spark hands them to the checks (order aside; `ledger.LEDGER_DDL`)."""

ALO_LOG = log(
    (0, claim("A")),
    (500, hb("A", 0)),
    (1500, hb("A", 3)),
    (2000, release("A", 3)),
    (2100, claim("B")),
    (2300, hb("B", 3)),
    (2600, hb("B", 5)),
)
ALO_CLEAN = [
    row(0, "A", 0, 600), row(1, "A", 0, 700), row(2, "A", 0, 800),
    row(3, "B", 4, 2350), row(4, "B", 4, 2400),
]  # fmt: skip

# The same shape in AMO: reservations before handling.
AMO_LOG = log(
    (0, claim("A")),
    (400, reserve("A", 2)),
    (450, hb("A", 2)),
    (2000, release("A", 2)),
    (2100, claim("B")),
    (2200, reserve("B", 4)),
    (2250, hb("B", 4)),
)
AMO_CLEAN = [row(0, "A", 0, 460), row(1, "A", 0, 480), row(2, "B", 4, 2260), row(3, "B", 4, 2280)]


def check(records: list[CoordRecord], ledger: list[LedgerRow], **kw: Any) -> list[dict[str, Any]]:
    """The violations of a local audit as dicts."""
    config = AuditConfig(FileInput(Path("-")), Path("-"), HB, **kw)
    result, _ = run_local(records, config, ledger)
    return [dict(zip(columns("violations"), v, strict=True)) for v in result.violations]


def kinds(violations: list[dict[str, Any]]) -> list[str]:
    return [v["kind"] for v in violations]


class TestCleanRuns:
    def test_clean_alo_ledger_has_no_violation(self) -> None:
        """Every record handled once, inside its claim: nothing to report."""
        assert check(ALO_LOG, ALO_CLEAN) == []

    def test_clean_amo_ledger_has_no_violation(self) -> None:
        """Reserved batches handled once each, inside their claims: nothing to report."""
        assert check(AMO_LOG, AMO_CLEAN) == []

    @pytest.mark.parametrize("amo", [False, True])
    def test_clean_synthetic_fleet_has_no_violation(self, amo: bool) -> None:
        """A generated fleet with handovers and failovers, and its obedient ledger, is clean."""
        syn = generate(4000, Fleet(amo=amo, seed=11), with_ledger=True)
        config = AuditConfig(FileInput(Path("-")), Path("-"), 1000)
        result, _ = run_local(syn.records, config, syn.ledger, num_partitions=4)
        summary = summarize(result)
        assert summary["violations"] == 0
        assert summary["failovers"] > 0 and summary["handovers"] > 0
        assert summary["ledger"]["checked"] == len(syn.ledger)


class TestZombieWork:
    def test_write_after_the_release_is_zombie_work(self) -> None:
        """A handles a record after it released the partition: the record is named."""
        found = check(ALO_LOG, [*ALO_CLEAN, row(5, "A", 0, 2050)])
        assert kinds(found) == ["zombie_work"]
        v = found[0]
        assert (v["topic"], v["partition"], v["offset"], v["client_id"], v["token"]) == (
            TOPIC,
            0,
            5,
            "A",
            0,
        )
        evidence = json.loads(v["evidence"])
        assert evidence["claims"][0]["ended"] == "released"
        assert "orders[0]@5 by A" in v["detail"]

    def test_write_before_the_claim_is_zombie_work(self) -> None:
        """B handles with its token before its claim was won."""
        assert kinds(check(ALO_LOG, [*ALO_CLEAN, row(3, "B", 4, 2050)])) == ["zombie_work"]

    def test_unknown_token_or_someone_elses_token_is_zombie_work(self) -> None:
        """A token no claim has, or another client's token, proves nothing: zombie work."""
        found = check(ALO_LOG, [*ALO_CLEAN, row(9, "C", 77, 2500), row(9, "C", 4, 2500)])
        assert kinds(found) == ["zombie_work", "zombie_work"]
        assert {("matches no claim" in v["detail"]) for v in found} == {True, False}

    def test_after_a_taken_over_claim_lost_its_right(self) -> None:
        """A stale holder working after last heartbeat + 2*HB is a zombie."""
        records = log((0, claim("A")), (500, hb("A", 0)), (4000, claim("B")), (4100, hb("B", 0)))
        assert check(records, [row(0, "A", 0, 2400)]) == []  # 500 + 2*HB = 2500: still its right
        assert kinds(check(records, [row(0, "A", 0, 2600)])) == ["zombie_work"]

    def test_clock_tolerance_forgives_small_skew(self) -> None:
        """A row 200 ms past the release is zombie work, unless the tolerance covers it."""
        late = [*ALO_CLEAN, row(5, "A", 0, 1990, dur=210)]
        assert kinds(check(ALO_LOG, late)) == ["zombie_work"]
        assert check(ALO_LOG, late, tolerance_s=0.5) == []

    def test_still_held_claim_covers_work_after_the_log_ends(self) -> None:
        """Work after the newest record, under a claim still held, is not zombie work."""
        assert check(ALO_LOG, [*ALO_CLEAN, row(5, "B", 4, 9000)]) == []

    def test_compacted_log_makes_an_unknown_token_unverifiable(self) -> None:
        """With gaps in the log, a token with no known claim is counted, not reported."""
        gapped = [r for r in ALO_LOG if r.offset != 1]
        config = AuditConfig(FileInput(Path("-")), Path("-"), HB)
        result, _ = run_local(gapped[1:], config, [row(0, "Z", 0, 100)])
        assert result.violations == [] and result.check is not None
        assert result.check.unverifiable == 1


# Restart recovery: A-1 wins partition 0 (token 0) and commits 2; A restarts and its new
# instance A-2 takes the claim over by heartbeat at 1000 (offset 2: its new token), commits 4,
# releases.
RESTART_LOG = log(
    (0, claim("A")),
    (500, hb("A", 2)),
    (1000, hb("A", 2, inst="A-2")),
    (1500, hb("A", 4, inst="A-2")),
    (2000, release("A", 4, inst="A-2")),
)
RESTART_CLEAN = [
    row(0, "A", 0, 100, inst="A-1", group="g"), row(1, "A", 0, 200, inst="A-1", group="g"),
    row(2, "A", 2, 1100, pid=102, inst="A-2", group="g"),
    row(3, "A", 2, 1200, pid=102, inst="A-2", group="g"),
]  # fmt: skip


class TestInstances:
    def test_clean_restart_ledger_has_no_violation(self) -> None:
        """Each instance handled only inside its own interval, each under its own token."""
        assert check(RESTART_LOG, RESTART_CLEAN) == []

    @pytest.mark.parametrize(("inst", "found"), [("A-1", []), ("A-9", ["zombie_work"])])
    def test_another_instance_under_the_clients_token_is_zombie_work(
        self, inst: str, found: list[str]
    ) -> None:
        """While A-1 holds token 0, a row by instance A-9 of client A under that token is
        zombie work, the same row by A-1 is not (before instance ids, both passed)."""
        ledger = [*ALO_CLEAN[:1], row(1, "A", 0, 700, inst=inst), *ALO_CLEAN[2:]]
        violations = check(ALO_LOG, ledger)
        assert kinds(violations) == found
        if found:
            assert "held by instance A-1, never by instance A-9" in violations[0]["detail"]
            assert json.loads(violations[0]["evidence"])["ledger"][0]["instance_id"] == "A-9"

    def test_old_instance_after_its_replacement_is_zombie_work(self) -> None:
        """A-1 still handling after A-2 took the claim over (the old process lived on)."""
        late = row(4, "A", 0, 1300, inst="A-1", group="g")
        found = check(RESTART_LOG, [*RESTART_CLEAN, late])
        assert kinds(found) == ["zombie_work"]
        assert "(instance A-1) was valid from" in found[0]["detail"]
        assert [c["ended"] for c in json.loads(found[0]["evidence"])["claims"]] == ["replaced"]

    def test_new_instance_before_its_takeover_is_zombie_work(self) -> None:
        """A-2 handling before its takeover heartbeat was in the log: not yet its claim."""
        early = row(2, "A", 0, 800, pid=102, inst="A-2", group="g")
        assert kinds(check(RESTART_LOG, [*RESTART_CLEAN[:2], early, *RESTART_CLEAN[3:]])) == [
            "zombie_work"
        ]

    def test_old_rows_without_instance_keep_the_clients_whole_claim(self) -> None:
        """Rows of an older ledger (no instance id) are covered by every instance of their
        client under the row's token: the same timings raise nothing. The takeover ends the old
        token, so a row under it after the takeover is zombie work."""
        old = [r._replace(instance_id=None, group=None) for r in RESTART_CLEAN]
        swapped = [old[0], old[1]._replace(start=S0 + 1.3, end=S0 + 1.31, token=2), *old[2:]]
        assert check(RESTART_LOG, swapped) == []
        late = [old[0], old[1]._replace(start=S0 + 1.3, end=S0 + 1.31), *old[2:]]
        assert kinds(check(RESTART_LOG, late)) == ["zombie_work"]
        assert kinds(check(RESTART_LOG, [*old, row(4, "A", 0, 2100)])) == ["zombie_work"]

    def test_old_ledger_lines_read_with_no_instance_and_pass(self, tmp_path: Path) -> None:
        """Lines written before group and instance_id existed are complete rows with None."""
        lines = [
            json.dumps({k: v for k, v in r._asdict().items() if k not in OPTIONAL_FIELDS})
            for r in RESTART_CLEAN
        ]
        (tmp_path / "ledger-1.jsonl").write_text("\n".join(lines) + "\n")
        rows, bad = read_entries(ledger_files([tmp_path]))
        assert bad == 0 and {(r.group, r.instance_id) for r in rows} == {(None, None)}
        assert check(RESTART_LOG, rows) == []


# ALO_LOG (group g), then Z of group "other" claims the same partition 0 (token 7).
TWO_GROUPS_LOG = [
    *ALO_LOG,
    record(ClaimingPartition(0, "Z-1", "Z", "other", TOPIC, 0), len(ALO_LOG), T0 + 2700),
]


class TestGroupAttribution:
    """Rows no claim explains, on a partition two groups consume (g and other)."""

    def test_a_row_naming_its_group_is_reported_under_it(self) -> None:
        """With --group g, an unexplained row that names g is reported as g's zombie work."""
        stray = row(5, "Q", 99, 2800, inst="Q-1", group="g")
        found = check(TWO_GROUPS_LOG, [*ALO_CLEAN, stray], window=Window(group="g"))
        assert [(v["kind"], v["group"], v["client_id"]) for v in found] == [
            ("zombie_work", "g", "Q")
        ]
        assert check(TWO_GROUPS_LOG, [*ALO_CLEAN, stray._replace(group="other")],
                     window=Window(group="g")) == []  # fmt: skip

    def test_an_old_row_without_group_is_still_attributed_to_none(self) -> None:
        """An older row names no group: unattributed, as before, so --group g skips it."""
        stray = row(5, "Q", 99, 2800)
        assert check(TWO_GROUPS_LOG, [*ALO_CLEAN, stray], window=Window(group="g")) == []
        assert [v["group"] for v in check(TWO_GROUPS_LOG, [*ALO_CLEAN, stray])] == [None]

    def test_the_group_a_row_names_decides_its_claims(self) -> None:
        """A row that names its group is checked against that group's claims only, never
        taken for another group's (the plugin writes both from one claim, so a row naming
        another group than the claim that covers it was not handled under that claim)."""
        named = [r._replace(group="other") for r in ALO_CLEAN]
        assert set(kinds(check(TWO_GROUPS_LOG, named, window=Window(group="other")))) == {
            "zombie_work"
        }
        # g's rows are none of these: g has no ledger row at all, so its handling is not shown
        # (not checked, and said: `TestGroupsWithoutLedgerRows`); one row of g elsewhere, and
        # what g committed here unhandled is a gap
        assert kinds(check(TWO_GROUPS_LOG, named, window=Window(group="g"))) == []
        g_elsewhere = LedgerRow("elsewhere", 0, 0, "A", 101, 0, S0, S0, "g", "A-1")
        found = check(TWO_GROUPS_LOG, [*named, g_elsewhere], window=Window(group="g"))
        assert "alo_gap" in kinds(found)


def placed(group: str, coord: int, *entries: tuple[int, Message]) -> list[CoordRecord]:
    """Records of ``group`` alone on coordination partition ``coord`` (its home once placed):
    (ms after T0, message), in offset order, so its first claim's token is 0."""
    return [
        record(replace(m, group_id=group), i, T0 + t, coord) for i, (t, m) in enumerate(entries)
    ]


# Groups g3 and g5 both consume partition 0, each placed on its own coordination partition,
# and client A of each wins it at offset 0 there: one token, 0, for both. g3 holds it from 0
# to its release at 2000 (commits 0..3), g5 from 1000 to its release at 3000 (commits 0..3).
SAME_TOKEN_LOG = [
    *placed("g3", 0, (0, claim("A")), (500, hb("A", 0)), (1500, hb("A", 3)),
            (2000, release("A", 3))),
    *placed("g5", 1, (1000, claim("A")), (1500, hb("A", 0)), (2500, hb("A", 3)),
            (3000, release("A", 3))),
]  # fmt: skip
G3_ROWS = [row(o, "A", 0, 600 + 100 * o, pid=31, group="g3") for o in range(3)]
G5_ROWS = [row(o, "A", 0, 1600 + 100 * o, pid=51, group="g5") for o in range(3)]


class TestPlacedGroups:
    """Two groups whose claims on one data partition carry the same token (placed groups)."""

    def test_each_groups_rows_are_checked_against_its_own_claims(self) -> None:
        """Both groups handled every record inside their own claims: no overlap between
        them, no gap, no redelivery, with or without --group."""
        ledger = [*G3_ROWS, *G5_ROWS]
        assert check(SAME_TOKEN_LOG, ledger) == []
        assert check(SAME_TOKEN_LOG, ledger, window=Window(group="g5")) == []
        assert check(SAME_TOKEN_LOG, ledger, window=Window(group="g3")) == []
        config = AuditConfig(FileInput(Path("-")), Path("-"), HB)
        result, _ = run_local(SAME_TOKEN_LOG, config, ledger)
        assert result.check is not None and result.check.alo_redeliveries == 0

    def test_work_outside_its_groups_claim_is_zombie_work_inside_anothers(self) -> None:
        """g5's row at 500 ms is before g5 won the partition (1000) though inside g3's claim
        with the same token and client id: g5's zombie work, shown with g5's claim only."""
        early = row(3, "A", 0, 500, pid=51, group="g5")
        found = check(SAME_TOKEN_LOG, [*G3_ROWS, *G5_ROWS, early])
        assert [(v["kind"], v["group"], v["offset"]) for v in found] == [("zombie_work", "g5", 3)]
        claims = json.loads(found[0]["evidence"])["claims"]
        assert [c["group"] for c in claims] == ["g5"]

    def test_an_old_row_is_left_unattributed_when_two_groups_explain_it(self) -> None:
        """A row of an older ledger names no group: two groups' claims of its client carry
        its token, so neither is guessed (--group never reports it)."""
        old = row(3, "A", 0, 1700, pid=77)
        found = check(SAME_TOKEN_LOG, [*G3_ROWS, *G5_ROWS, old])
        assert found == []
        assert check(SAME_TOKEN_LOG, [*G3_ROWS, *G5_ROWS, old], window=Window(group="g5")) == []


class TestOverlapsDuplicatesGaps:
    def test_two_processes_at_once_overlap(self) -> None:
        """A second process of the holder handling concurrently is an overlap."""
        found = check(ALO_LOG, [*ALO_CLEAN, row(1, "A", 0, 705, pid=999)])
        assert kinds(found) == ["overlap"]
        assert [r["pid"] for r in json.loads(found[0]["evidence"])["ledger"]] == [101, 999]

    def test_amo_offset_handled_twice_is_a_duplicate(self) -> None:
        """In an AMO group an offset handled twice is reported with both rows."""
        found = check(AMO_LOG, [*AMO_CLEAN, row(2, "B", 4, 2290)])
        assert kinds(found) == ["amo_duplicate"]
        assert found[0]["offset"] == 2 and len(json.loads(found[0]["evidence"])["ledger"]) == 2

    def test_amo_rewind_by_set_position_is_not_a_duplicate(self) -> None:
        """The pausing admin set the position back between two handlings: allowed."""
        admin = "marshal-admin"
        records = log(
            (0, claim("A")), (400, reserve("A", 2)), (450, hb("A", 2)), (2000, release("A", 2)),
            (2050, pause(admin, (T0 + 60_000) // 1000)),
            (2060, claim(admin)), (2070, hb(admin, 0)), (2080, release(admin, 0)),
            (2090, pause(admin, T0 // 1000)),  # a pause that ended in the past lifts it
            (2100, claim("B")), (2200, reserve("B", 2)), (2250, hb("B", 2)),
        )  # fmt: skip
        again = [row(0, "B", 9, 2260), row(1, "B", 9, 2280)]
        assert check(records, [*AMO_CLEAN[:2], *again]) == []

    def test_alo_redelivery_is_not_a_violation(self) -> None:
        """In an ALO group handling an offset again is allowed (and counted)."""
        config = AuditConfig(FileInput(Path("-")), Path("-"), HB)
        result, _ = run_local(ALO_LOG, config, [*ALO_CLEAN, row(2, "B", 4, 2450)])
        assert result.violations == [] and result.check is not None
        assert result.check.alo_redeliveries == 1

    def test_alo_offset_below_a_commit_never_handled_is_a_gap(self) -> None:
        """Offset 1 was committed past but never handled: one gap, named by its range."""
        found = check(ALO_LOG, [r for r in ALO_CLEAN if r.offset != 1])
        assert kinds(found) == ["alo_gap"]
        assert found[0]["offset"] == 1 and "offsets 1..1 (1)" in found[0]["detail"]

    def test_partition_without_any_ledger_row_has_gaps(self) -> None:
        """A committed ALO partition missing from the ledger entirely is reported."""
        found = check(ALO_LOG, [LedgerRow("elsewhere", 0, 0, "A", 1, 0, S0, S0)])
        assert kinds(found) == ["zombie_work", "alo_gap"]

    def test_group_filter_does_not_take_another_groups_work_for_zombie_work(self) -> None:
        """With --group g, rows handled under another group's claim are not reported."""
        theirs = ClaimingPartition(0, "Z-1", "Z", "other", TOPIC, 0)
        records = [*ALO_LOG, record(theirs, len(ALO_LOG), T0 + 2700)]
        ledger = [*ALO_CLEAN, row(0, "Z", len(ALO_LOG), 2800)]
        assert check(records, ledger, window=Window(group="g")) == []
        assert check(records, ledger) == []

    def test_amo_lost_records_are_not_gaps(self) -> None:
        """AMO may lose records: nothing handled is no violation."""
        assert check(AMO_LOG, AMO_CLEAN[:1]) == []


class TestGroupsWithoutLedgerRows:
    """A whole-topic audit given the ledgers of some groups: another ALO group, of which the
    ledger has no row, is not checked for gaps, and the audit says so (it reported every
    offset the group committed as never handled; a review of a six-group fleet)."""

    def _audit(self, ledger: list[LedgerRow]) -> tuple[list[dict[str, Any]], Any]:
        config = AuditConfig(FileInput(Path("-")), Path("-"), HB)
        result, _ = run_local(TWO_GROUPS_LOG, config, ledger)
        found = [dict(zip(columns("violations"), v, strict=True)) for v in result.violations]
        return found, result

    def test_a_group_with_no_ledger_row_is_named_not_reported(self) -> None:
        """Only "other"'s rows: g committed 0..5 on partition 0, none of it in the ledger."""
        theirs = [row(0, "Z", len(ALO_LOG), 2800, inst="Z-1", group="other")]
        found, result = self._audit(theirs)
        assert found == []
        assert result.check is not None and result.check.unledgered == ["g"]
        summary = summarize(result)
        assert summary["ledger"]["groups_without_rows"] == ["g"]
        assert summary["violations"] == 0

    def test_a_group_with_rows_elsewhere_is_checked_here(self) -> None:
        """g's ledger rows name g on another partition: its gaps here are real."""
        mine = [LedgerRow("elsewhere", 0, 0, "A", 101, 0, S0, S0, "g", "A-1")]
        theirs = [row(0, "Z", len(ALO_LOG), 2800, inst="Z-1", group="other")]
        found, result = self._audit([*mine, *theirs])
        assert "alo_gap" in kinds(found)
        assert result.check is not None and result.check.unledgered == []

    def test_an_older_ledger_without_groups_checks_every_group(self) -> None:
        """A row that names no group (an older ledger) may be any group's: every group is
        checked, as before."""
        found, result = self._audit([row(0, "Z", len(ALO_LOG), 2800)])
        assert "alo_gap" in kinds(found)
        assert result.check is not None and result.check.unledgered == []


class TestLedgerFiles:
    def test_incomplete_last_line_is_counted_and_skipped(self, tmp_path: Path) -> None:
        """A process killed mid-write leaves half a line: skipped, counted, never fatal."""
        good = json.dumps(ALO_CLEAN[0]._asdict())
        (tmp_path / "ledger-1.jsonl").write_text(good + "\n" + good[:20])
        (tmp_path / "notes.txt").write_text("ignored")
        rows, bad = read_entries(ledger_files([tmp_path]))
        assert rows == [ALO_CLEAN[0]] and bad == 1
        assert parse_line("{}") is None

    def test_spark_rows_without_the_optional_fields_are_complete(self) -> None:
        """Spark reads the ledger with a schema: an older row's missing group and instance
        are nulls and the row is checked; a row missing a required field is incomplete."""
        old = ALO_CLEAN[0]._asdict()
        torn = {**old, "token": None}
        batch = pa.RecordBatch.from_pylist([old, torn], schema=LEDGER_SCHEMA)
        entries = list(entries_of(batch))
        assert entries[0] == ALO_CLEAN[0] and entries[0].instance_id is None
        assert [is_complete(e) for e in entries] == [True, False]

    def test_missing_ledger_path_is_a_usage_error(self, tmp_path: Path) -> None:
        """--ledger pointing nowhere is exit code 2, not a crash."""
        with pytest.raises(AuditUsageError):
            ledger_files([tmp_path / "nope"])

    def test_a_ledger_directory_without_a_ledger_file_is_a_usage_error(
        self, tmp_path: Path
    ) -> None:
        """A --ledger directory whose ledger files are all in subdirectories (only its own
        *.jsonl are read) yields no file: a usage error, not every ALO record missing."""
        good = json.dumps(ALO_CLEAN[0]._asdict())
        (tmp_path / "host-1").mkdir()
        (tmp_path / "host-1" / "ledger-1.jsonl").write_text(good + "\n")
        with pytest.raises(AuditUsageError, match="no ledger file"):
            ledger_files([tmp_path])
        assert ledger_files([tmp_path / "host-1"]) == [tmp_path / "host-1" / "ledger-1.jsonl"]
        with pytest.raises(AuditUsageError, match="no ledger file"):
            ledger_files([tmp_path / "host-1", tmp_path])  # each path must yield one


class TestCommandLine:
    def test_times_are_iso_or_unix_seconds(self) -> None:
        """--since/--until take ISO-8601 (UTC if naive) or Unix seconds."""
        assert parse_time("1700000000.5", "--since") == T0 + 500
        assert parse_time("2023-11-14T22:13:20Z", "--since") == T0
        assert parse_time("2023-11-14T22:13:20", "--since") == T0
        with pytest.raises(AuditUsageError):
            parse_time("yesterday", "--since")

    def test_modes_apply_to_a_group_or_all(self) -> None:
        """--mode amo applies to every group; --mode g=alo to one."""
        assert parse_modes(("amo", "g=alo")) == {"*": "amo", "g": "alo"}
        with pytest.raises(AuditUsageError):
            parse_modes(("maybe",))

    @pytest.mark.parametrize(
        "argv",
        [
            ["--out", "x"],  # no input at all
            ["--input", "d.jsonl", "--bootstrap-servers", "h:1", "--out", "x"],  # both
            ["--input", "d.jsonl"],  # no --out
            ["--input", "d.jsonl", "--out", "x", "--since", "soon"],
        ],
    )
    def test_usage_errors_exit_2(
        self, argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Wrong options end with exit code 2 and one line, before Spark starts."""
        monkeypatch.delenv("MARSHAL_BOOTSTRAP_SERVERS", raising=False)
        monkeypatch.setattr("sys.argv", ["marshal-audit", *argv])
        with pytest.raises(SystemExit) as exit_info:
            main()
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err and "Traceback" not in err[-1]

    def test_a_ledger_directory_without_a_ledger_file_exits_2(
        self,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """--ledger DIR with no *.jsonl in it: exit 2 and one line naming it, before Spark."""
        (tmp_path / "ledger" / "host-1").mkdir(parents=True)
        (tmp_path / "ledger" / "host-1" / "ledger-1.jsonl").write_text("{}\n")
        argv = ["--input", str(tmp_path / "dump.jsonl"), "--out", str(tmp_path / "out"),
                "--ledger", str(tmp_path / "ledger")]  # fmt: skip
        monkeypatch.setattr("sys.argv", ["marshal-audit", *argv])
        with pytest.raises(SystemExit) as exit_info:
            main()
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(tmp_path / "ledger") in err[0], err

    @pytest.mark.parametrize(
        ("argv", "env", "expected"),
        [
            ([], None, frozenset({"marshal-admin"})),
            (["--admin-client-id", "ops-1,ops-2", "--admin-client-id", "ops-3"], None,
             frozenset({"ops-1", "ops-2", "ops-3"})),
            ([], "ops-1,ops-2", frozenset({"ops-1", "ops-2"})),
            (["--admin-client-id", "*"], None, None),
        ],
    )  # fmt: skip
    def test_admin_ids_are_the_admin_commands_option(
        self,
        argv: list[str],
        env: str | None,
        expected: frozenset[str] | None,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """--admin-client-id as marshal-admin takes it: repeated, comma lists, the env var."""
        seen: list[AuditConfig] = []

        def fake_run(config: AuditConfig, progress: object) -> None:
            seen.append(config)
            raise AuditUsageError("stop here")

        monkeypatch.setattr("marshal_workers.audit.pipeline.run", fake_run)
        if env is None:
            monkeypatch.delenv("MARSHAL_ADMIN_CLIENT_IDS", raising=False)
        else:
            monkeypatch.setenv("MARSHAL_ADMIN_CLIENT_IDS", env)
        monkeypatch.setattr(
            "sys.argv", ["marshal-audit", "--input", "d.jsonl", "--out", "x", *argv]
        )
        with pytest.raises(SystemExit):
            main()
        assert [c.admin_client_ids for c in seen] == [expected]


class TestSparkErrors:
    def test_the_root_cause_is_the_line_shown(self) -> None:
        """A Py4J error shows its last "Caused by", else its first exception line."""
        py4j = (
            "An error occurred while calling o100.load.\n"
            ": org.apache.spark.SparkException: Job aborted\n"
            "\tat org.apache.spark.Foo(Foo.scala:1)\n"
            "Caused by: java.net.ConnectException: Connection refused\n"
        )
        assert (
            error_line(RuntimeError(py4j))
            == "Caused by: java.net.ConnectException: Connection refused"
        )
        first = "An error occurred while calling o100.load.\n: org.apache.spark.SparkException: x"
        assert error_line(RuntimeError(first)) == ": org.apache.spark.SparkException: x"
        assert error_line(RuntimeError("one line")) == "one line"
        assert error_line(RuntimeError("")) == "RuntimeError"
        assert "out of memory" in error_line(RuntimeError("x\njava.lang.OutOfMemoryError: heap"))
