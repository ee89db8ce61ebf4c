"""AMO losses made visible: every reserved range nobody handled to its end.

At most once, a holder reserves offsets [start, end) in the log (ClaimingMessages) before it
handles them, and commits end with a heartbeat or release once handled. Whoever holds the
partition next resumes at the reservation's end, so a range reserved and never committed is
lost: the audit reports it, per group and partition, with the cause the log shows.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from marshal_workers.audit.local import run_local
from marshal_workers.audit.model import AuditConfig, FileInput
from marshal_workers.audit.schema import columns
from marshal_workers.audit.summary import summarize
from marshal_workers.audit.synthetic import Fleet, generate
from marshal_workers.protocol.wire import CoordRecord, Message
from tests.support import GROUP, HB, TOPIC, claim, hb, pause, record, release, reserve

T0 = 1_700_000_000_000


def log(*entries: tuple[int, Message]) -> list[CoordRecord]:
    """Records of one coordination partition: (ms after T0, message), in offset order."""
    return [record(m, i, T0 + t) for i, (t, m) in enumerate(entries)]


def audit(
    records: list[CoordRecord], hb_ms: int = HB
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    config = AuditConfig(FileInput(Path("-")), Path("-"), hb_ms, modes={"*": "amo"})
    result, tables = run_local(records, config)
    losses = [dict(zip(columns("amo_losses"), r, strict=True)) for r in tables["amo_losses"]]
    return summarize(result), losses


def lost(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["client_id"], r["start_offset"], r["end_offset"], r["count"], r["cause"])
            for r in rows]  # fmt: skip


def ledger_losses(records: list[CoordRecord], *handled: int) -> list[dict[str, Any]]:
    """The amo_losses of a local audit whose ledger shows A handled ``handled`` of
    partition 0."""
    from marshal_workers.common.ledgerfile import LedgerRow  # noqa: PLC0415

    at = (T0 + 120) / 1000
    ledger = [LedgerRow(TOPIC, 0, o, "A", 1, 0, at, at + 0.001, GROUP, "A-1") for o in handled]
    config = AuditConfig(FileInput(Path("-")), Path("-"), HB)
    _, tables = run_local(records, config, ledger)
    return [dict(zip(columns("amo_losses"), r, strict=True)) for r in tables["amo_losses"]]


class TestCauses:
    def test_a_holder_whose_lease_expired_and_was_taken_over_lost_its_reserved_batch(self) -> None:
        """A reserves [0, 10), then [10, 20) (asked ahead while it handles the first), commits
        nothing more and goes silent; B claims after 2*HB and resumes at 20: both runs are at
        risk, [0, 20), taken over by B."""
        summary, rows = audit(log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (200, hb("A", 10)),
            (300, reserve("A", 20)),
            (3000, claim("B")), (3100, reserve("B", 30)), (3200, hb("B", 30)),
        ))  # fmt: skip
        assert lost(rows) == [("A", 0, 20, 20, "taken_over")]
        assert rows[0]["lost_ms"] == T0 + 200 + 2 * HB and rows[0]["successor_client_id"] == "B"
        assert (rows[0]["group"], rows[0]["topic"], rows[0]["partition"]) == (GROUP, TOPIC, 0)
        assert "B" in rows[0]["detail"]
        assert summary["amo_losses"] == {"ranges": 1, "records": 20,
                                         "by_cause": {"taken_over": 1}}  # fmt: skip

    def test_a_holder_that_claimed_again_after_its_lease_is_not_named_as_another(self) -> None:
        """A froze past its lease and claimed the partition again itself: the detail says so,
        not "A's lease expired and A claimed the partition" (a review)."""
        _, rows = audit(log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (200, hb("A", 10)),
            (3000, claim("A", inst="A-2")),
        ))  # fmt: skip
        assert lost(rows) == [("A", 0, 10, 10, "taken_over")]
        assert "claimed the partition again itself" in rows[0]["detail"]

    def test_only_the_last_two_reservations_of_a_crashed_holder_are_at_risk(self) -> None:
        """A child asks for one run ahead of the one it handles, so asking for a third shows
        it handled the first: of [0, 10), [10, 20), [20, 30) only [10, 30) is at risk."""
        _, rows = audit(log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
            (200, reserve("A", 20)), (250, hb("A", 20)), (300, reserve("A", 30)),
            (3000, claim("B")),
        ))  # fmt: skip
        assert lost(rows) == [("A", 10, 30, 20, "taken_over")]

    def test_a_holder_silent_at_the_end_of_the_log_lost_its_batch_to_its_lease(self) -> None:
        """Nobody claimed after the crash, but the lease expired before the log's end."""
        _, rows = audit(log(
            (0, claim("A")), (100, reserve("A", 5)),
            (5000, claim("B", part=1)),  # the log goes on on another partition
        ))  # fmt: skip
        assert lost(rows) == [("A", None, 5, None, "lease_expired")]

    def test_a_holder_still_within_its_lease_has_lost_nothing_yet(self) -> None:
        """A reservation not yet committed while the holder is fresh is work in progress."""
        _, rows = audit(log((0, claim("A")), (100, reserve("A", 5)), (500, hb("A", 0))))
        assert rows == []

    def test_a_commit_refused_after_the_lease_ended_is_a_refusal(self) -> None:
        """A handled its batch but its heartbeat came after B took over and was refused."""
        _, rows = audit(log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (200, hb("A", 10)),
            (300, reserve("A", 20)),
            (3000, claim("B")), (3100, hb("A", 20)),
        ))  # fmt: skip
        assert lost(rows) == [("A", 0, 20, 20, "refused")]
        assert "refused" in rows[0]["detail"]

    def test_a_release_below_the_reservation_while_the_group_is_paused(self) -> None:
        """The group is paused; A releases at 10 with [10, 20) reserved: released under a
        pause (the next owner resumes at 20)."""
        _, rows = audit(log(
            (0, claim("A")), (100, reserve("A", 10)), (200, hb("A", 10)),
            (300, reserve("A", 20)),
            (400, pause("marshal-admin", (T0 + 60_000) // 1000)),
            (500, release("A", 10)),
        ))  # fmt: skip
        assert lost(rows) == [("A", 10, 20, 10, "released_under_pause")]

    def test_a_release_at_the_reservations_end_loses_nothing(self) -> None:
        """A clean hand-over: the release commits the whole reservation."""
        summary, rows = audit(log(
            (0, claim("A")), (100, reserve("A", 10)), (200, release("A", 10)),
            (300, claim("B")), (400, reserve("B", 20)), (500, hb("B", 20)),
        ))  # fmt: skip
        assert rows == []
        assert summary["amo_losses"] == {"ranges": 0, "records": 0, "by_cause": {}}

    def test_a_restarted_holder_lost_what_its_old_instance_reserved(self) -> None:
        """A new instance of A takes over by heartbeat (restart recovery) at the reservation's
        end: the old instance's unhandled range is lost, replaced."""
        _, rows = audit(log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (200, hb("A", 10)),
            (300, reserve("A", 20)), (900, hb("A", 20, inst="A-2")),
        ))  # fmt: skip
        assert lost(rows) == [("A", 0, 20, 20, "replaced")]
        assert rows[0]["instance_id"] == "A-1"

    def test_a_restarted_instance_that_reserved_nothing_adds_no_loss(self) -> None:
        """A-2 takes over from A-1 (whose runs are lost, replaced) and dies before reserving:
        the range A-1 reserved is reported once, not again as A-2's, start unknown."""
        summary, rows = audit(log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
            (200, reserve("A", 20)), (900, hb("A", 10, inst="A-2")),
            (950, hb("A", 20, inst="A-2")), (5000, claim("B")),
        ))  # fmt: skip
        assert lost(rows) == [("A", 0, 20, 20, "replaced")]
        assert summary["amo_losses"]["ranges"] == 1


class TestSyntheticFleet:
    FLEET = Fleet(partitions=8, clients=3, coord_partitions=3, amo=True, batch=5, seed=11)

    def audit_with_ledger(self, fleet: Fleet) -> tuple[Any, list[dict[str, Any]], Any]:
        syn = generate(6000, fleet, with_ledger=True)
        config = AuditConfig(FileInput(Path("-")), Path("-"), fleet.hb_ms)
        result, tables = run_local(syn.records, config, syn.ledger)
        rows = [dict(zip(columns("amo_losses"), r, strict=True)) for r in tables["amo_losses"]]
        return summarize(result), rows, syn

    def test_a_clean_run_reports_no_loss(self) -> None:
        """Every reserved batch handled (the ledger says so), holders failing between
        batches: 0. Without a ledger and without crashes: 0 too."""
        summary, rows, _ = self.audit_with_ledger(self.FLEET)
        assert summary["failovers"] > 0 and summary["reservations"] > 0
        assert rows == [] and summary["amo_losses"]["records"] == 0
        calm = replace(self.FLEET, failure_rate=0.0)
        summary, rows = audit(generate(6000, calm).records)
        assert summary["handovers"] > 0 and rows == []

    def test_without_a_ledger_a_crashed_holders_last_batch_is_at_risk(self) -> None:
        """The log cannot tell whether a holder that stopped without releasing handled its
        last batch: the batch is reported, handled unknown (null), its cause the takeover."""
        summary, rows = audit(generate(6000, self.FLEET).records)
        assert rows and {r["cause"] for r in rows} <= {"taken_over", "lease_expired"}
        assert all(r["handled"] is None for r in rows)
        assert summary["amo_losses"]["ranges"] == len(rows)
        # the detail says what is known: at risk, not lost (it said "nobody handled it" of
        # records a ledger then showed handled; a review)
        for r in rows:
            assert "nobody handled it" not in r["detail"], r["detail"]
            assert "at risk" in r["detail"] and "no ledger" in r["detail"], r["detail"]

    def test_every_crash_after_a_reservation_is_reported_with_its_cause(self) -> None:
        """Holders that crash after reserving a batch (the generator lists what they lost):
        with the ledger, exactly those ranges are reported, taken over or lost to the lease."""
        summary, rows, syn = self.audit_with_ledger(replace(self.FLEET, lose_rate=0.01))
        assert len(syn.lost) > 10, "the generator should crash some holders after a reservation"
        got = {(r["topic"], r["partition"], r["start_offset"], r["end_offset"]): r["cause"]
               for r in rows}  # fmt: skip
        assert set(got) <= set(syn.lost)
        assert set(got.values()) <= {"taken_over", "lease_expired"}
        assert len(got) >= len(syn.lost) - self.FLEET.partitions  # a crash at the very end
        assert summary["amo_losses"]["records"] == sum(e - s for _, _, s, e in got)


class TestWithTheLedger:
    """The ledger says which reserved records were handled after all (a holder that handled
    its batch and stopped before committing it lost nothing)."""

    def _audit(self, handled: list[int]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        from marshal_workers.common.ledgerfile import LedgerRow  # noqa: PLC0415

        records = log(
            (0, claim("A")), (100, reserve("A", 10)), (200, hb("A", 10)),
            (300, reserve("A", 20)),
            (3000, claim("B")), (3100, reserve("B", 30)), (3200, hb("B", 30)),
        )  # fmt: skip
        at = (T0 + 350) / 1000
        ledger = [LedgerRow(TOPIC, 0, o, "A", 1, 0, at, at + 0.001, GROUP, "A-1")
                  for o in (*range(10), *handled)]  # fmt: skip
        b_at = (T0 + 3150) / 1000
        ledger += [LedgerRow(TOPIC, 0, o, "B", 2, 4, b_at, b_at + 0.001, GROUP, "B-1")
                   for o in range(20, 30)]  # fmt: skip
        config = AuditConfig(FileInput(Path("-")), Path("-"), HB, modes={"*": "amo"})
        result, tables = run_local(records, config, ledger)
        assert result.violations == []
        rows = [dict(zip(columns("amo_losses"), r, strict=True)) for r in tables["amo_losses"]]
        return summarize(result), rows

    def test_records_the_holder_handled_before_it_stopped_are_not_lost(self) -> None:
        """A handled 10..14 of [10, 20) before going silent: [15, 20) lost, not [10, 20)."""
        summary, rows = self._audit(handled=[10, 11, 12, 13, 14])
        assert [(r["start_offset"], r["end_offset"], r["count"], r["handled"]) for r in rows] == [
            (15, 20, 5, 0)
        ]
        assert summary["amo_losses"] == {"ranges": 1, "records": 5,
                                         "by_cause": {"taken_over": 1}}  # fmt: skip

    def test_a_range_handled_to_its_end_is_no_loss(self) -> None:
        """A handled all of [10, 20) and crashed before committing: nothing was lost."""
        summary, rows = self._audit(handled=list(range(10, 20)))
        assert rows == [] and summary["amo_losses"]["records"] == 0

    def test_without_a_ledger_the_log_decides(self) -> None:
        """No ledger: handled is unknown (null) and the whole at-risk span counts."""
        _, rows = audit(log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (200, hb("A", 10)),
            (300, reserve("A", 20)), (3000, claim("B")),
        ))  # fmt: skip
        assert [(r["count"], r["handled"]) for r in rows] == [(20, None)]

    def test_a_run_across_the_at_risk_span_is_cut_there(self) -> None:
        """A crashed after reserving [0, 10), [10, 20), [20, 30); the ledger shows 0..4 only.
        5..9 lay before the at-risk span (A went on past it: abandoned), 10..29 in it (lost to
        the takeover): two rows, each with its own cause, not one named by where it began."""

        records = log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
            (200, reserve("A", 20)), (250, hb("A", 20)), (300, reserve("A", 30)),
            (3000, claim("B")),
        )  # fmt: skip
        rows = ledger_losses(records, *range(5))
        assert lost(rows) == [("A", 5, 10, 5, "abandoned"), ("A", 10, 30, 20, "taken_over")]

    def test_a_group_the_ledger_has_no_row_of_shows_what_the_log_puts_at_risk(self) -> None:
        """The ledger given holds another group's rows only (or none that parse): this AMO
        group's reservations are not all lost (a review: 4,930 records "abandoned", every
        record the group reserved); they are judged from the log alone, as without a ledger,
        and the group is named among the groups without rows."""
        from marshal_workers.common.ledgerfile import LedgerRow  # noqa: PLC0415

        records = log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
            (200, reserve("A", 20)), (250, hb("A", 20)), (300, reserve("A", 30)),
            (3000, claim("B")),
        )  # fmt: skip
        at = (T0 + 120) / 1000
        theirs = [LedgerRow("elsewhere", 0, 0, "Z", 1, 0, at, at + 0.001, "other", "Z-1")]
        config = AuditConfig(FileInput(Path("-")), Path("-"), HB)
        result, tables = run_local(records, config, theirs)
        rows = [dict(zip(columns("amo_losses"), r, strict=True)) for r in tables["amo_losses"]]
        assert [(*lost([r])[0], r["handled"]) for r in rows] == [
            ("A", 10, 30, 20, "taken_over", None)
        ]
        assert summarize(result)["ledger"]["groups_without_rows"] == [GROUP]

    def test_a_batch_skipped_while_the_holder_went_on_was_abandoned_when_it_went_on(self) -> None:
        """A reserved [10, 20) and went on reserving and committing up to 30 and released; the
        ledger shows 10..19 never handled: the child it was reserved for ended first (a
        handler timed out, say) or its member refused it. Neither a crash nor a refused commit:
        ``abandoned``, reserved when [10, 20) was and lost when A reserved past it, not at its
        release long after (a review read a handler timeout dated by the member's later stop,
        as ``refused``)."""

        records = log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
            (200, reserve("A", 20)), (250, hb("A", 20)), (300, reserve("A", 30)),
            (350, hb("A", 30)), (9400, release("A", 30)),
        )  # fmt: skip
        rows = ledger_losses(records, *range(10), *range(20, 30))
        assert lost(rows) == [("A", 10, 20, 10, "abandoned")]
        assert (rows[0]["reserved_ms"], rows[0]["lost_ms"]) == (T0 + 200, T0 + 300)
        assert "moved on past it" in rows[0]["detail"] and "amo_records_lost" in rows[0]["detail"]
        assert rows[0]["successor_client_id"] is None  # A itself passed it over

    def test_an_abandoned_last_run_is_dated_no_later_than_the_release(self) -> None:
        """A's child timed out on 29, the last reserved record; nothing followed until A
        released at 30 long after: the log cannot say when the child ended, so the loss is
        dated by the release, the latest it can have been (a review read "went on past it"
        for a run nothing followed)."""

        records = log(
            (0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
            (200, reserve("A", 20)), (250, hb("A", 20)), (300, reserve("A", 30)),
            (350, hb("A", 30)), (9400, release("A", 30)),
        )  # fmt: skip
        rows = ledger_losses(records, *range(29))
        assert lost(rows) == [("A", 29, 30, 1, "abandoned")]
        assert (rows[0]["reserved_ms"], rows[0]["lost_ms"]) == (T0 + 300, T0 + 9400)
        assert "moved on past it (reserving or releasing beyond it)" in rows[0]["detail"]
        _, no_ledger = audit(records)
        assert no_ledger == []  # released at its reservation's end: the log sees no risk
