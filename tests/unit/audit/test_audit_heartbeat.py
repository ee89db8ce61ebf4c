"""The audit judges each group with the heartbeat interval its settings record in the log.

Without --heartbeat-interval the audit judged a group recorded at 2 s with its
default 10 s (wrong claim, failover and handover counts, exit 0); marshal-admin refuses the
same mismatch. Now the log decides, and a given interval that disagrees with it is refused.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from marshal_workers.audit.exitcodes import AuditUsageError
from marshal_workers.audit.local import run_local
from marshal_workers.audit.model import AuditConfig, FileInput
from marshal_workers.audit.schema import columns
from marshal_workers.audit.summary import summarize
from marshal_workers.audit.tables import Window
from marshal_workers.protocol.metadata import GroupSettings, encode_metadata, metadata_key
from marshal_workers.protocol.placement import placed
from marshal_workers.protocol.wire import (
    ClaimingPartition,
    CoordRecord,
    Heartbeat,
    Message,
    Partitioner,
    ReleaseGroup,
    encode,
    record_key,
)

T0 = 1_700_000_000_000
ADMINS = frozenset({"marshal-admin"})
FLAG = "--heartbeat-interval"


def settings(group: str, hb_ms: int) -> GroupSettings:
    return GroupSettings(0, "i", "a", group, hb_ms, Partitioner.SPEC, ADMINS)


def claim(client: str, group: str) -> Message:
    return ClaimingPartition(0, f"{client}-1", client, group, "orders", 0)


def beat(client: str, group: str, offset: int) -> Message:
    return Heartbeat(0, f"{client}-1", client, group, "orders", 0, offset)


def fleet_log(group: str, hb_ms: int, partition: int = 0) -> list[CoordRecord]:
    """Settings recorded at ``hb_ms``; A claims and beats, goes silent; B claims 5 s after
    A's last heartbeat: stale under 2 s (A's lease ended at 1 s + 4 s), fresh under 10 s."""
    s = settings(group, hb_ms)
    out = [CoordRecord(partition, 0, T0, metadata_key(s), encode_metadata(s))]
    for t, m in ((0, claim("A", group)), (1000, beat("A", group, 5)),
                 (6000, claim("B", group)), (6500, beat("B", group, 9))):  # fmt: skip
        out.append(CoordRecord(partition, len(out), T0 + t, record_key(m), encode(m)))
    return out


def audit(records: list[CoordRecord], **kw: Any) -> tuple[Any, dict[str, list[dict[str, Any]]]]:
    config = AuditConfig(FileInput(Path("-")), Path("-"), **kw)
    result, tables = run_local(records, config)
    named = {name: [dict(zip(columns(name), r, strict=True)) for r in rows]
             for name, rows in tables.items()}  # fmt: skip
    return result, named


class TestFromTheLog:
    def test_a_group_recorded_at_2s_is_judged_at_2s_without_the_flag(self) -> None:
        """No interval given (the default 10 s): the group's recorded 2 s decides, so B's
        claim 5 s after A's last heartbeat is a failover, and A's claim ended at 1 s + 2*2 s."""
        result, tables = audit(fleet_log("g", 2000))
        assert [(c["client_id"], c["ended"]) for c in tables["claims"]] == [
            ("A", "taken_over"), ("B", "still_held"),
        ]  # fmt: skip
        assert tables["claims"][0]["end_ms"] == T0 + 1000 + 2 * 2000
        summary = summarize(result)
        assert summary["failovers"] == 1
        assert summary["heartbeat_interval_ms"] == 2000
        assert summary["heartbeat_intervals_ms"] == {"g": 2000}

    def test_each_group_is_judged_with_its_own_interval(self) -> None:
        """Two groups on one log, recorded at 2 s and 10 s: B's late claim wins in the first
        and loses in the second, as each group's members decided."""
        records = fleet_log("fast", 2000) + fleet_log("slow", 10_000, partition=1)
        result, tables = audit(records)
        ended = {(c["group"], c["client_id"]): c["ended"] for c in tables["claims"]}
        assert ended == {("fast", "A"): "taken_over", ("fast", "B"): "still_held",
                         ("slow", "A"): "still_held"}  # fmt: skip
        rejected = [e for e in tables["events"] if e["verdict"] == "ClaimRejected"]
        assert [(e["group"], e["client_id"]) for e in rejected] == [("slow", "B")]
        assert summarize(result)["heartbeat_intervals_ms"] == {"fast": 2000, "slow": 10_000}

    def test_the_summary_names_no_default_that_judged_no_group(self) -> None:
        """Groups recorded at 2 s and 5 s: no group is judged with the default 10 s, so the
        summary's single interval is null (a review read "10 s" there), and the report's line
        names each group's."""
        records = fleet_log("fast", 2000) + fleet_log("other", 5000, partition=1)
        summary = summarize(audit(records)[0])
        assert summary["heartbeat_intervals_ms"] == {"fast": 2000, "other": 5000}
        assert summary["heartbeat_interval_ms"] is None

    def test_the_summary_names_the_default_a_group_without_settings_was_judged_with(
        self,
    ) -> None:
        """Groups recorded at 2 s and 5 s and one that recorded none (an older log's): the
        last is judged with the default, 10 s, which the summary names."""
        unrecorded = [replace(r, partition=2, offset=r.offset - 1)
                      for r in fleet_log("old", 2000)[1:]]  # fmt: skip
        records = fleet_log("fast", 2000) + fleet_log("other", 5000, partition=1) + unrecorded
        summary = summarize(audit(records)[0])
        assert summary["heartbeat_intervals_ms"] == {"fast": 2000, "other": 5000, "old": 10_000}
        assert summary["heartbeat_interval_ms"] == 10_000


class TestGivenInterval:
    def test_a_given_interval_that_disagrees_with_the_log_is_refused(self) -> None:
        """--heartbeat-interval 10 on a group recorded at 2 s: a usage error, one line."""
        with pytest.raises(AuditUsageError) as refused:
            audit(fleet_log("g", 2000), heartbeat_interval_ms=10_000,
                  heartbeat_given="--heartbeat-interval")  # fmt: skip
        message = str(refused.value)
        assert "\n" not in message
        assert "--heartbeat-interval" in message and "10s" in message and "2s" in message
        assert refused.value.exit_code == 2

    def test_a_given_interval_that_agrees_is_taken(self) -> None:
        """The same interval as the log's: the audit runs."""
        result, _ = audit(fleet_log("g", 2000), heartbeat_interval_ms=2000,
                          heartbeat_given="--heartbeat-interval")  # fmt: skip
        assert summarize(result)["failovers"] == 1

    def test_only_the_reported_group_must_agree(self) -> None:
        """With --group, the given interval is compared with that group's only."""
        records = fleet_log("fast", 2000) + fleet_log("slow", 10_000, partition=1)
        slow = Window(group="slow")
        result, _ = audit(records, heartbeat_interval_ms=10_000, heartbeat_given=FLAG, window=slow)
        assert summarize(result)["failovers"] == 0
        with pytest.raises(AuditUsageError):
            audit(records, heartbeat_interval_ms=10_000, heartbeat_given=FLAG)


class TestStreaming:
    def test_the_streaming_fold_judges_each_group_as_the_plain_fold(self) -> None:
        """fold_batches (Spark's path) with two recorded intervals gives fold_records' rows."""
        from marshal_workers.audit import arrow  # noqa: PLC0415
        from marshal_workers.audit.fold import FoldSettings, fold_batches, fold_records  # noqa: PLC0415
        from marshal_workers.audit.heartbeats import from_records  # noqa: PLC0415
        from marshal_workers.audit.placed import annotated_log  # noqa: PLC0415
        from marshal_workers.protocol.rationalizer import RationalizerConfig  # noqa: PLC0415

        records = fleet_log("fast", 2000) + fleet_log("slow", 10_000, partition=1)
        beats = from_records(annotated_log(records), None)
        assert beats.intervals() == (10_000, 2000)
        settings = FoldSettings(RationalizerConfig(beats.default_ms), heartbeats=beats)
        ordered = sorted(records, key=lambda r: (r.partition, r.offset))
        streamed: dict[str, list[Any]] = {}
        for packed in fold_batches([arrow.record_batch(ordered[:3]),
                                    arrow.record_batch(ordered[3:])], settings):  # fmt: skip
            for name, data in zip(packed.column("table").to_pylist(),
                                  packed.column("data").to_pylist(), strict=True):  # fmt: skip
                streamed.setdefault(name, []).extend(arrow.rows_of(arrow.unpack(data), name))
        plain = fold_records(records, settings)
        assert {k: sorted(v, key=repr) for k, v in streamed.items()} == {
            k: sorted(v, key=repr) for k, v in plain.items() if v
        }
        assert [r[0] for r in plain["failovers"]] == ["fast"]


class TestRefusedSettings:
    def test_a_settings_record_the_fold_refuses_decides_no_interval(self) -> None:
        """A placed group's first settings win on a partition: a second creator's (or a
        hostile writer's) differing record after them is refused by every member's fold, and
        stays in the log for good (placed keys survive compaction). The audit took its
        interval all the same: the group's newest became 10 s, claims open at the log's end
        were settled with it, and the right --heartbeat-interval 2 was refused."""
        group = "g"
        place = placed(group, 4, 1)
        won = replace(settings(group, 2000), placement=place)
        lost = replace(settings(group, 10_000), client_id="b", instance_id="b-1", placement=place)
        records = fleet_log(group, 2000, partition=place.first)
        records[0] = replace(records[0], key=metadata_key(won), value=encode_metadata(won))
        records.append(CoordRecord(place.first, len(records), T0 + 7000, metadata_key(lost),
                                   encode_metadata(lost)))  # fmt: skip
        result, tables = audit(records)
        refused = [e for e in tables["events"] if e["verdict"] == "Malformed"]
        assert len(refused) == 1 and "first settings written win" in refused[0]["reason"]
        summary = summarize(result)
        assert summary["heartbeat_intervals_ms"] == {group: 2000}
        assert summary["failovers"] == 1
        given, _ = audit(records, heartbeat_interval_ms=2000, heartbeat_given=FLAG)
        assert summarize(given)["failovers"] == 1

    def test_settings_stamped_before_a_pause_ended_that_the_log_time_passed_decide_nothing(
        self,
    ) -> None:
        """The group's admin changes its placed settings while its pause is in force by their
        stamp, but the partition's log time (a later record) is past the pause's end: the fold
        refuses them, so their interval is not the group's. (Folded at their own stamp, they
        were accepted here: the group's newest interval became 10 s and the right
        --heartbeat-interval 2 was refused.)"""
        group = "g"
        where = placed(group, 4, 1)
        first = replace(settings(group, 2000), client_id="marshal-admin", placement=where)
        changed = replace(first, heartbeat_interval_ms=10_000, unix_sec=1)
        pause = ReleaseGroup(0, "m-1", "marshal-admin", group, "", 0, T0 // 1000 + 3)
        records = fleet_log(group, 2000, partition=where.first)
        records[0] = replace(records[0], key=metadata_key(first), value=encode_metadata(first))
        for at, key, value in (
            (100, record_key(pause), encode(pause)),  # in force until 3 s
            (2000, metadata_key(changed), encode_metadata(changed)),  # by its stamp, under it
        ):
            records.append(CoordRecord(where.first, len(records), T0 + at, key, value))
        result, tables = audit(records)
        refused = [e for e in tables["events"] if e["verdict"] == "Malformed"]
        assert len(refused) == 1 and "no pause of the group in force" in refused[0]["reason"]
        assert summarize(result)["heartbeat_intervals_ms"] == {group: 2000}
        given, _ = audit(records, heartbeat_interval_ms=2000, heartbeat_given=FLAG)
        assert summarize(given)["failovers"] == 1


def test_a_refused_command_line_leaves_no_empty_out_directory(tmp_path: Path) -> None:
    """--ledger that does not exist: exit 2 before anything is read, and the --out directory
    it was to write is not left behind empty (a review found one after each usage error)."""
    from marshal_workers.audit.pipeline import run  # noqa: PLC0415

    out = tmp_path / "audit"
    config = AuditConfig(
        FileInput(tmp_path / "dump.jsonl"), out, ledgers=(tmp_path / "no-such-ledger",)
    )
    with pytest.raises(AuditUsageError):
        run(config)
    assert not out.exists()
