"""Every event the fold can emit has a row in the audit's tables; poison history is reported.

A log holding a poison record's history (RecordFailed, PoisonResolved) crashed the
audit (the events table knew only claim verdicts) or, with ``--group``, left the history out.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from marshal_workers.audit.local import run_local
from marshal_workers.audit.model import AuditConfig, FileInput
from marshal_workers.audit.schema import columns
from marshal_workers.audit.summary import summarize
from marshal_workers.audit.tables import Window
from marshal_workers.protocol import events as ev
from marshal_workers.protocol import rationalizer  # noqa: F401 (imports every event module)
from marshal_workers.protocol.metadata import (
    GroupSettings,
    TopicRecord,
    encode_metadata,
    metadata_key,
)
from marshal_workers.protocol.recordfailures import (
    Action,
    Outcome,
    PoisonResolved,
    RecordFailed,
    encode_poison,
    poison_key,
)
from marshal_workers.protocol.wire import ClaimKey, CoordRecord, Partitioner
from tests.support import GROUP, HB, TOPIC, claim, hb, pause, record, release, reserve

T0 = 1_700_000_000_000
KEY = ClaimKey(GROUP, TOPIC, 0)


def leaf_events() -> set[type]:
    """The concrete event classes the audit's fold can emit: every subclass of Event that has
    none of its own, but `OtherGroup` (only a reader that folds one group emits it; the audit
    folds every group).

    ``dataclass(slots=True)`` replaces each class it decorates, and the replaced one lingers
    among its base's subclasses: only the class its module names counts."""

    def current(kind: type) -> bool:
        return getattr(sys.modules[kind.__module__], kind.__name__, None) is kind

    found: set[type] = set()
    todo: list[type] = [ev.Event]
    while todo:
        kind = todo.pop()
        subs = [k for k in kind.__subclasses__() if current(k)]
        if not subs:
            found.add(kind)
        todo.extend(subs)
    return found - {ev.OtherGroup}


def failed(client: str, offset: int, outcome: Outcome) -> RecordFailed:
    return RecordFailed(0, f"{client}-1", client, GROUP, TOPIC, 0, offset, 1, outcome, "boom")


def resolved(client: str, offset: int, action: Action) -> PoisonResolved:
    return PoisonResolved(0, f"{client}-1", client, GROUP, TOPIC, 0, offset, action)


def every_verdict_log() -> list[CoordRecord]:
    """One coordination partition whose fold emits every kind of event at least once."""
    settings = GroupSettings(0, "i", "a", GROUP, HB, Partitioner.SPEC, frozenset({"marshal-admin"}))
    raw: list[tuple[bytes | None, bytes]] = []

    def meta(m: TopicRecord | GroupSettings) -> None:
        raw.append((metadata_key(m), encode_metadata(m)))

    def poison(m: RecordFailed | PoisonResolved) -> None:
        raw.append((poison_key(KEY), encode_poison(m)))

    meta(TopicRecord(0, "i", "marshal-admin", 1))  # TopicRecorded
    meta(settings)  # GroupSettingsRecorded
    msgs: list[Any] = [claim("A"), claim("B"), hb("A", 0), hb("B", 0), reserve("A", 10),
                       reserve("B", 20)]  # fmt: skip
    out = [CoordRecord(0, i, T0 + i, k, v) for i, (k, v) in enumerate(raw)]
    for m in msgs:
        out.append(record(m, len(out), T0 + len(out)))
    steps: list[RecordFailed | PoisonResolved] = [
        failed("A", 3, Outcome.RETRY),  # PoisonNoted
        failed("A", 3, Outcome.PARKED),  # PoisonNoted: parked
        resolved("marshal-admin", 3, Action.RETRY),  # PoisonCleared: retried
        failed("A", 3, Outcome.PARKED),  # parked again
        resolved("nobody", 3, Action.SKIP),  # PoisonRejected: not an admin
        resolved("marshal-admin", 3, Action.SKIP),  # PoisonCleared: skipped
    ]
    for m in steps:
        out.append(CoordRecord(0, len(out), T0 + len(out), poison_key(KEY), encode_poison(m)))
    for m in (release("B", 11), release("A", 11), pause("nobody", T0 // 1000),
              pause("marshal-admin", T0 // 1000)):  # fmt: skip
        out.append(record(m, len(out), T0 + len(out)))
    out.append(CoordRecord(0, len(out), T0 + len(out), b"k", b"junk"))  # Malformed
    gap = len(out) + 1  # an offset gap: the next claim's history may be compacted
    out.append(record(hb("C", 5, part=1), gap, T0 + gap))  # Unverified
    return out


def audit(records: list[CoordRecord], window: Window | None = None) -> tuple[Any, dict[str, Any]]:
    config = AuditConfig(FileInput(Path("-")), Path("-"), HB, window=window or Window())
    result, tables = run_local(records, config)
    named = {name: [dict(zip(columns(name), r, strict=True)) for r in rows]
             for name, rows in tables.items()}  # fmt: skip
    return result, named


class TestEveryEventHasARow:
    def test_the_test_log_makes_the_fold_emit_every_event_class(self) -> None:
        """The log below covers every concrete event class (so the next test covers all)."""
        _, tables = audit(every_verdict_log())
        assert {e["verdict"] for e in tables["events"]} == {k.__name__ for k in leaf_events()}

    def test_every_event_class_has_a_row_builder(self) -> None:
        """The events table names a builder for every concrete event class: none falls through
        to a builder written for another shape of event."""
        from marshal_workers.audit.events_table import ROW_BUILDERS  # noqa: PLC0415

        assert set(ROW_BUILDERS) == leaf_events()

    def test_every_record_is_one_events_row_with_its_verdict(self) -> None:
        """An unfiltered audit of a log with poison history runs, one events row per record."""
        records = every_verdict_log()
        _, tables = audit(records)
        assert len(tables["events"]) == len(records)
        kinds = ("RecordFailed", "PoisonResolved")
        poison = [e for e in tables["events"] if e["message_type"] in kinds]
        assert [e["verdict"] for e in poison] == [
            "PoisonNoted", "PoisonNoted", "PoisonCleared", "PoisonNoted", "PoisonRejected",
            "PoisonCleared",
        ]  # fmt: skip
        assert {(e["group"], e["topic"], e["partition"], e["offset"]) for e in poison} == {
            (GROUP, TOPIC, 0, 3)
        }
        assert poison[4]["reason"] == "nobody is not an admin client"


class TestPoisonHistory:
    def test_parked_retried_and_skipped_records_are_a_table_and_in_the_summary(self) -> None:
        """Each accepted poison record is a `poison` row saying what became of the record;
        the summary counts the records parked, retried and skipped."""
        result, tables = audit(every_verdict_log())
        got = [(p["offset"], p["action"], p["failures"], p["client_id"]) for p in tables["poison"]]
        assert got == [
            (3, "failed", 1, "A"), (3, "parked", 2, "A"), (3, "retried", 0, "marshal-admin"),
            (3, "parked", 1, "A"), (3, "skipped", 1, "marshal-admin"),
        ]  # fmt: skip
        assert tables["poison"][0]["error"] == "boom"
        summary = summarize(result)
        assert summary["poison"] == {
            "records": 1, "failures": 3, "parked": 1, "retried": 1, "skipped": 1,
            "parked_at_end": 0,
        }  # fmt: skip

    def test_group_filter_keeps_the_groups_poison_history(self) -> None:
        """--group reports the group's poison records too (they were silently dropped)."""
        _, tables = audit(every_verdict_log(), Window(group=GROUP))
        assert len(tables["poison"]) == 5
        verdicts = {e["verdict"] for e in tables["events"]}
        assert {"PoisonNoted", "PoisonCleared", "PoisonRejected"} <= verdicts
        _, other = audit(every_verdict_log(), Window(group="other"))
        assert other["poison"] == []


class TestSkippedRecordsAreNotGaps:
    def _log(self, skip: bool) -> list[CoordRecord]:
        msgs: list[Any] = [claim("A"), hb("A", 0)]
        out = [record(m, i, T0 + 100 * i) for i, m in enumerate(msgs)]
        poison: list[RecordFailed | PoisonResolved] = [failed("A", 3, Outcome.PARKED)]
        if skip:
            poison.append(resolved("marshal-admin", 3, Action.SKIP))
        for m in poison:
            out.append(CoordRecord(0, len(out), T0 + 100 * len(out), poison_key(KEY),
                                   encode_poison(m)))  # fmt: skip
        out.append(record(hb("A", 10), len(out), T0 + 100 * len(out)))
        return out

    def _violations(self, records: list[CoordRecord]) -> list[str]:
        from marshal_workers.common.ledgerfile import LedgerRow  # noqa: PLC0415

        ledger = [
            LedgerRow(TOPIC, 0, o, "A", 1, 0, (T0 + 150) / 1000, (T0 + 160) / 1000, GROUP, "A-1")
            for o in range(10)
            if o != 3
        ]
        config = AuditConfig(FileInput(Path("-")), Path("-"), HB)
        result, _ = run_local(records, config, ledger)
        return [str(v[0]) for v in result.violations]

    def test_a_record_an_operator_skipped_is_no_alo_gap(self) -> None:
        """ALO: the one record skipped with skip-record was not handled on purpose: no gap;
        the same record unhandled without the skip is one."""
        assert self._violations(self._log(skip=True)) == []
        assert self._violations(self._log(skip=False)) == ["alo_gap"]
