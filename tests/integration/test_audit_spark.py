"""marshal-audit on Spark (local[2]) against the single-process audit, on dump files.

One Spark session serves the whole module (starting one costs seconds); each test writes its
own inputs and output directory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from marshal_workers.admin.dump import dump_entry
from marshal_workers.audit import arrow, spark_jobs
from marshal_workers.audit.cli import main
from marshal_workers.audit.local import run_local
from marshal_workers.audit.model import AuditConfig, FileInput
from marshal_workers.audit.output import read_table
from marshal_workers.audit.pipeline import run
from marshal_workers.audit.schema import TABLES, columns
from marshal_workers.audit.session import SessionOptions, start_session
from marshal_workers.audit.summary import summarize
from marshal_workers.audit.synthetic import Fleet, Synthetic, generate
from marshal_workers.common.ledgerfile import OPTIONAL_FIELDS, LedgerRow
from marshal_workers.protocol.metadata import (
    GroupSettings,
    TopicRecord,
    encode_metadata,
    metadata_key,
)
from marshal_workers.protocol.placement import Placement
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.recordfailures import (
    Outcome,
    RecordFailed,
    encode_poison,
    poison_record_key,
)
from marshal_workers.protocol.wire import (
    MAX_LOG_TIME_MS,
    ClaimingPartition,
    CoordRecord,
    Heartbeat,
    Partitioner,
    ReleaseGroup,
    coordination_partition,
    decode,
    encode,
    record_key,
)
from tests.unit.audit.test_audit_claimfold import compacted

pytestmark = pytest.mark.spark
ADMIN = "marshal-admin"  # an admin client id of the audit's defaults
HB_MS = 1000
FLEET = Fleet(partitions=8, clients=3, coord_partitions=3, batch=4, seed=5)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = start_session(SessionOptions())
    try:
        yield session
    finally:
        session.stop()


def write_dump(records: list[CoordRecord], path: Path) -> Path:
    """The records as `marshal-admin dump --json` writes them (verdicts of a fresh fold)."""
    worlds: dict[int, World] = {}
    lines = []
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        world = worlds.setdefault(r.partition, World(RationalizerConfig(HB_MS), r.partition))
        lines.append(json.dumps(dump_entry(r, fold(world, r))))
    path.write_text("\n".join(lines) + "\n")
    return path


def write_ledger(rows: list[LedgerRow], directory: Path) -> Path:
    """The rows as the ledger plugin writes them (one file per pid); rows without group and
    instance id as older ledgers wrote them, without those keys."""
    directory.mkdir(parents=True, exist_ok=True)
    for pid in sorted({r.pid for r in rows}):
        text = "".join(json.dumps(_line(r)) + "\n" for r in rows if r.pid == pid)
        (directory / f"ledger-{pid}.jsonl").write_text(text)
    return directory


def _line(row: LedgerRow) -> dict[str, Any]:
    return {k: v for k, v in row._asdict().items() if v is not None or k not in OPTIONAL_FIELDS}


def zombie(syn: Synthetic) -> LedgerRow:
    """A write by the first holder of a partition, under its old token, after a later owner."""
    claims = [r for r in syn.ledger if r.partition == syn.ledger[0].partition]
    first = claims[0]
    later = [r for r in claims if r.token != first.token]
    assert later, "the synthetic fleet should hand partition over at least once"
    moment = later[-1].start + 0.0005
    return first._replace(offset=first.offset + 100_000, start=moment, end=moment + 0.0001)


def impostor(syn: Synthetic) -> LedgerRow:
    """A write by another instance of a holder's client, under its token, inside its claim
    (just after one of the holder's rows ended, so that it overlaps none)."""
    row = syn.ledger[len(syn.ledger) // 2]
    start = row.end + 0.00002
    return row._replace(
        offset=row.offset + 200_000, pid=9999, start=start, end=start + 0.00002,
        instance_id="impostor-i",
    )  # fmt: skip


@pytest.fixture(scope="module")
def fleet_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Synthetic, Path, Path]:
    syn = generate(2500, FLEET, with_ledger=True)
    root = tmp_path_factory.mktemp("audit-inputs")
    return (
        syn,
        write_dump(syn.records, root / "dump.jsonl"),
        write_ledger(syn.ledger, root / "ledger"),
    )


def sorted_rows(rows: list[Any]) -> list[Any]:
    return sorted(rows, key=repr)


class TestSparkMatchesLocal:
    def test_every_table_equals_the_single_process_audit(
        self, spark: Any, fleet_files: tuple[Synthetic, Path, Path], tmp_path: Path
    ) -> None:
        """Fold on Spark, settle, check: every Parquet table has exactly the local rows.

        The extra ledger holds a late write in an older ledger's format (no group, no
        instance id: still zombie work by its times) and a write by another instance of the
        holder's client inside the holder's interval (zombie work by its instance)."""
        syn, dump, ledger_dir = fleet_files
        extra = [zombie(syn)._replace(group=None, instance_id=None), impostor(syn)]
        faulty = [*syn.ledger, *extra]
        write_ledger(extra, ledger_dir.parent / "extra")
        config = AuditConfig(
            FileInput(dump), tmp_path / "out", HB_MS,
            ledgers=(ledger_dir, ledger_dir.parent / "extra"),
        )  # fmt: skip
        result = run(config, spark=spark)
        local, tables = run_local(syn.records, config, faulty)
        assert [v[0] for v in result.violations] == ["zombie_work", "zombie_work"]
        assert {v[5:8] for v in result.violations} == {r[3:6] for r in extra}
        assert result.check is not None and result.check.incomplete_lines == 0
        for name in TABLES:
            got = read_table(config.out, name)
            assert sorted_rows(got) == sorted_rows(tables[name]), name
        assert result.verdicts == local.verdicts
        assert result.check == local.check
        assert (config.out / "report.html").read_text().count("data:image/png;base64") >= 3

    def test_parquet_dump_gives_the_same_claims(
        self, spark: Any, fleet_files: tuple[Synthetic, Path, Path], tmp_path: Path
    ) -> None:
        """The dump's columns in Parquet are read like the JSON lines."""
        syn, dump, _ = fleet_files
        entries = [json.loads(line) for line in dump.read_text().splitlines()]
        parquet = tmp_path / "dump.parquet"
        pq.write_table(pa.Table.from_pylist(entries), parquet)
        config = AuditConfig(FileInput(parquet), tmp_path / "out", HB_MS, report=False)
        result = run(config, spark=spark)
        local, _ = run_local(syn.records, config)
        assert sorted_rows(result.tables["claims"]) == sorted_rows(local.tables["claims"])
        assert sorted_rows(result.tables["failovers"]) == sorted_rows(local.tables["failovers"])


class TestCommandLine:
    def test_clean_then_zombie_write(
        self,
        spark: Any,
        fleet_files: tuple[Synthetic, Path, Path],
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """--input DUMP --ledger DIR: exit 0 and violations 0; a zombie line: exit 1, named."""
        syn, dump, ledger_dir = fleet_files
        out = tmp_path / "out"
        argv = ["marshal-audit", "--input", str(dump), "--ledger", str(ledger_dir),
                "--out", str(out), "--json", "--heartbeat-interval", "1"]  # fmt: skip
        monkeypatch.setattr("sys.argv", argv)
        with pytest.raises(SystemExit) as clean:
            main()
        captured = capsys.readouterr()
        summary = json.loads(captured.out)
        assert clean.value.code == 0, captured.err
        assert summary["violations"] == 0 and summary["ledger"]["checked"] == len(syn.ledger)
        assert summary["claims"] > FLEET.partitions and summary["failovers"] > 0
        assert "folding" in captured.err  # progress lines go to stderr

        bad = zombie(syn)
        with (ledger_dir.parent / "ledger" / f"ledger-{bad.pid}.jsonl").open("a") as f:
            f.write(json.dumps(bad._asdict()) + "\n")
        try:
            with pytest.raises(SystemExit) as dirty:
                main()
        finally:
            write_ledger(syn.ledger, ledger_dir)  # restore for the other tests
        captured = capsys.readouterr()
        assert dirty.value.code == 1
        summary = json.loads(captured.out)
        assert summary["violations_by_kind"] == {"zombie_work": 1}
        named = f"{bad.topic}[{bad.partition}]@{bad.offset} by {bad.client_id} pid {bad.pid}"
        assert named in captured.err
        assert summary["violation_examples"][0]["offset"] == bad.offset

    def test_a_group_the_log_does_not_have_is_a_usage_error_not_a_pass(
        self,
        spark: Any,
        fleet_files: tuple[Synthetic, Path, Path],
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """--group with a name the log does not have (a typo: another case): exit 2 and one line
        naming it, not exit 0 with nothing audited (a review: ``"groups": []``,
        ``"violations": 0``, exit 0)."""
        _, dump, ledger_dir = fleet_files
        typo = FLEET.group.upper()  # the group is "shop": group names are case-sensitive
        argv = ["marshal-audit", "--input", str(dump), "--ledger", str(ledger_dir),
                "--out", str(tmp_path / "out"), "--json", "--heartbeat-interval", "1",
                "--group", typo]  # fmt: skip
        monkeypatch.setattr("sys.argv", argv)
        with pytest.raises(SystemExit) as exit_info:
            main()
        captured = capsys.readouterr()
        assert exit_info.value.code == 2, captured.err
        assert f"group {typo} has no claims" in captured.err
        assert captured.out == ""

    def test_missing_input_file_is_a_usage_error(
        self, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A dump path that does not exist: exit 2, one line."""
        argv = ["marshal-audit", "--input", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path)]
        monkeypatch.setattr("sys.argv", argv)
        with pytest.raises(SystemExit) as exit_info:
            main()
        assert exit_info.value.code == 2


class TestRecordedHeartbeatInterval:
    def test_the_logs_interval_decides_and_a_disagreeing_flag_is_refused(
        self, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:  # fmt: skip
        """On Spark: a group recorded at 2 s is judged at 2 s without the flag
        (B's claim 5 s after A's last heartbeat is a failover); --heartbeat-interval 10 is
        refused with one line and exit 2."""
        from tests.unit.audit.test_audit_heartbeat import fleet_log  # noqa: PLC0415

        dump = write_dump(fleet_log("g", 2000), tmp_path / "dump.jsonl")
        monkeypatch.delenv("MARSHAL_HEARTBEAT_INTERVAL", raising=False)
        argv = ["marshal-audit", "--input", str(dump), "--out", str(tmp_path / "out"), "--json"]
        monkeypatch.setattr("sys.argv", argv)
        with pytest.raises(SystemExit) as judged:
            main()
        captured = capsys.readouterr()
        assert judged.value.code == 0, captured.err
        summary = json.loads(captured.out)
        assert summary["failovers"] == 1 and summary["heartbeat_intervals_ms"] == {"g": 2000}
        assert summary["claims_ended"] == {"still_held": 1, "taken_over": 1}

        monkeypatch.setattr("sys.argv", [*argv, "--heartbeat-interval", "10"])
        with pytest.raises(SystemExit) as refused:
            main()
        captured = capsys.readouterr()
        assert refused.value.code == 2
        lines = [ln for ln in captured.err.splitlines() if "heartbeat" in ln and "10s" in ln]
        assert len(lines) == 1 and "2s" in lines[0], captured.err
        assert "Traceback" not in captured.err and captured.out == ""


class TestAmoLosses:
    def test_losses_and_what_the_ledger_handled_match_the_single_process_audit(
        self, spark: Any, tmp_path: Path
    ) -> None:
        """On Spark: an AMO fleet whose holders crash after reserving; the ledger
        shows the first record of one lost batch handled after all. Spark's amo_losses equal
        run_local's."""
        fleet = Fleet(partitions=6, clients=3, coord_partitions=3, amo=True, batch=5, seed=11,
                      lose_rate=0.01)  # fmt: skip
        syn = generate(3000, fleet, with_ledger=True)
        assert len(syn.lost) >= 3
        topic, partition, start, end = syn.lost[0]
        holder = next(r for r in syn.ledger if (r.topic, r.partition) == (topic, partition))
        partly = [holder._replace(offset=start, pid=9999)]  # handled (a zombie too: no matter)
        ledger = [*syn.ledger, *partly]
        config = AuditConfig(
            FileInput(write_dump(syn.records, tmp_path / "dump.jsonl")), tmp_path / "out",
            fleet.hb_ms, ledgers=(write_ledger(ledger, tmp_path / "ledger"),), report=False,
        )  # fmt: skip
        result = run(config, spark=spark)
        local, tables = run_local(syn.records, config, ledger)
        assert tables["amo_losses"], "the fleet should lose some batches"
        assert summarize(result)["amo_losses"] == summarize(local)["amo_losses"]
        assert sorted_rows(read_table(config.out, "amo_losses")) == sorted_rows(
            tables["amo_losses"]
        )
        cols = columns("amo_losses")
        t, p, s, e = (cols.index(c) for c in ("topic", "partition", "start_offset", "end_offset"))
        runs = [(r[s], r[e]) for r in tables["amo_losses"] if (r[t], r[p]) == (topic, partition)]
        assert (start + 1, end) in runs  # the one record the ledger shows handled is no loss

    def test_a_run_the_holder_went_on_past_is_dated_as_run_local_dates_it(
        self, spark: Any, tmp_path: Path
    ) -> None:
        """On Spark: A reserved [10, 20), went on to 30 and released much later; the ledger
        shows [10, 20) unhandled. The loss is ``abandoned`` and dated by its own reservations,
        read back from the reservations table Spark wrote, as run_local dates it."""
        from tests.support import GROUP, HB, TOPIC, claim, hb, record, release, reserve  # noqa: PLC0415

        t0 = 1_700_000_000_000
        steps = [(0, claim("A")), (50, hb("A", 0)), (100, reserve("A", 10)), (150, hb("A", 10)),
                 (200, reserve("A", 20)), (250, hb("A", 20)), (300, reserve("A", 30)),
                 (350, hb("A", 30)), (9400, release("A", 30))]  # fmt: skip
        records = [record(m, i, t0 + t) for i, (t, m) in enumerate(steps)]
        at = (t0 + 120) / 1000
        ledger = [LedgerRow(TOPIC, 0, o, "A", 1, 0, at, at + 0.001, GROUP, "A-1")
                  for o in (*range(10), *range(20, 30))]  # fmt: skip
        config = AuditConfig(
            FileInput(write_dump(records, tmp_path / "dump.jsonl")), tmp_path / "out", HB,
            ledgers=(write_ledger(ledger, tmp_path / "ledger"),), report=False,
        )  # fmt: skip
        result = run(config, spark=spark)
        _, tables = run_local(records, config, ledger)
        on_spark = result.tables["amo_losses"]
        assert sorted_rows(on_spark) == sorted_rows(tables["amo_losses"])
        (loss,) = (dict(zip(columns("amo_losses"), r, strict=True)) for r in on_spark)
        assert (loss["cause"], loss["reserved_ms"], loss["lost_ms"]) == (
            "abandoned", t0 + 200, t0 + 300,
        )  # fmt: skip


class TestGroupsWithoutLedgerRows:
    def test_a_group_the_ledger_has_no_row_of_is_named_as_run_local_names_it(
        self, spark: Any, tmp_path: Path
    ) -> None:
        """On Spark: two ALO groups on one partition, the ledger of one only (with a torn line,
        whose nulls must not pass for an older row naming no group). The other is named,
        not reported as never handled, as the single-process audit does."""
        from tests.unit.audit.test_audit_checks import ALO_LOG, TWO_GROUPS_LOG, row  # noqa: PLC0415

        theirs = [row(0, "Z", len(ALO_LOG), 2800, inst="Z-1", group="other")]
        ledgers = write_ledger(theirs, tmp_path / "ledger")
        with (ledgers / "ledger-torn.jsonl").open("w") as torn:
            torn.write('{"topic": "t", "partition": 0, "off')
        config = AuditConfig(
            FileInput(write_dump(TWO_GROUPS_LOG, tmp_path / "dump.jsonl")), tmp_path / "out",
            HB_MS, ledgers=(ledgers,), report=False,
        )  # fmt: skip
        result = run(config, spark=spark)
        local, _ = run_local(TWO_GROUPS_LOG, config, theirs)
        spark_summary, local_summary = summarize(result), summarize(local)
        assert spark_summary["ledger"]["groups_without_rows"] == ["g"]
        assert local_summary["ledger"]["groups_without_rows"] == ["g"]
        assert spark_summary["violations"] == local_summary["violations"] == 0


class TestSlices:
    def test_a_sliced_groups_violations_equal_the_single_process_audit(
        self, spark: Any, tmp_path: Path
    ) -> None:
        """On Spark: two key slices of one partition, a row of the wrong slice, a
        key out of order and an offset no slice handled. Spark reads key_hash and slice from
        the ledger files and finds what run_local finds, each row judged by its slice's claim."""
        from tests.unit.audit.test_audit_slices import K0, K1, key_ledger, two_slices  # noqa: PLC0415

        records = two_slices(K0, K1)
        ledger = key_ledger()  # row i: offset i
        ledger[0], ledger[4] = ledger[0]._replace(offset=4), ledger[4]._replace(offset=0)
        ledger[2] = ledger[2]._replace(key_hash=(ledger[2].key_hash or 0) + 1)  # wrong slice
        ledger = [r for r in ledger if r.offset != 3]  # never handled
        config = AuditConfig(
            FileInput(write_dump(records, tmp_path / "dump.jsonl")), tmp_path / "out", HB_MS,
            ledgers=(write_ledger(ledger, tmp_path / "ledger"),), report=False,
        )  # fmt: skip
        result = run(config, spark=spark)
        local, _ = run_local(records, config, ledger)
        assert sorted_rows(result.violations) == sorted_rows(local.violations)
        assert sorted(v[0] for v in local.violations) == ["alo_gap", "key_order", "wrong_slice"]
        assert sorted_rows(read_table(config.out, "violations")) == sorted_rows(local.violations)


def two_groups_compacted() -> list[CoordRecord]:
    """Two fleets (an ALO one, an AMO one) on three coordination partitions, with an admin's
    pause and a refused one, settings of two heartbeat intervals, a counted failure of a held
    claim, keyless, garbage and future-stamped records; then compacted twice (gaps)."""
    shop = generate(1500, Fleet(partitions=6, clients=3, coord_partitions=3, seed=3))
    bank = generate(1500, Fleet(partitions=4, clients=2, coord_partitions=3, seed=4, amo=True,
                                group="bank", topic="ledger", lose_rate=0.01))  # fmt: skip
    written = sorted([*shop.records, *bank.records], key=lambda r: r.timestamp_ms)
    beat = next(r for r in written if r.value is not None and r.value.startswith(b"Heartbeat"))
    held = decode(beat.value)
    assert isinstance(held, Heartbeat)
    t = written[len(written) // 3].timestamp_ms
    failed = RecordFailed(0, held.instance_id, held.client_id, held.group_id, held.topic,
                          held.partition, held.offset, 1, Outcome.RETRY, "boom")  # fmt: skip
    extras: list[tuple[int, int, bytes | None, bytes | None]] = [
        (coordination_partition(held.topic, held.partition, 3, Partitioner.SPEC), t,
         poison_record_key(failed), encode_poison(failed)),
        (1, t + 5, None, beat.value),
        (2, t + 7, b"junk", b"nonsense/1/2"),
        (0, MAX_LOG_TIME_MS + 9, b"x", b"Heartbeat/1/x"),
    ]  # fmt: skip
    for coord in range(3):
        for client, at in (("marshal-admin", t + 10), ("intruder", t + 20)):
            pause = ReleaseGroup(at // 1000, "p-1", client, "shop", "", 0, at // 1000 + 3)
            extras.append((coord, at, record_key(pause), encode(pause)))
        for hb, at in ((1000, t - 50), (2000, t + 4000)):
            meta = GroupSettings(0, "s-1", "bank-1", "bank", hb, Partitioner.SPEC, None)
            extras.append((coord, at, metadata_key(meta), encode_metadata(meta)))
    rows = [(r.partition, r.timestamp_ms, r.key, r.value) for r in written]
    rows = sorted([*rows, *extras], key=lambda r: (min(r[1], written[-1].timestamp_ms), r[0]))
    offsets = [0, 0, 0]
    log = []
    for coord, at, key, value in rows:
        log.append(CoordRecord(coord, offsets[coord], at, key, value))
        offsets[coord] += 1
    return compacted(compacted(log, len(log) // 5), len(log) // 10)


def on_spark_and_locally(
    records: list[CoordRecord], spark: Any, tmp_path: Path
) -> tuple[AuditConfig, Any, Any, dict[str, list[Any]]]:
    """The audit of ``records`` (as a dump file) on Spark and by run_local: the config, both
    results and run_local's tables."""
    config = AuditConfig(
        FileInput(write_dump(records, tmp_path / "dump.jsonl")), tmp_path / "out", HB_MS,
        report=False,
    )  # fmt: skip
    result = run(config, spark=spark)
    local, tables = run_local(records, config)
    return config, result, local, tables


class TestFoldPerClaim:
    def test_a_compacted_two_group_log_gives_the_partition_folds_tables(
        self, spark: Any, tmp_path: Path
    ) -> None:
        """On Spark, folded per claim: every table, verdict count and the report's figures
        equal run_local's (which folds each coordination partition whole) on a compacted log
        with pauses, settings of two intervals, poison, keyless and malformed records."""
        records = two_groups_compacted()
        config, result, local, tables = on_spark_and_locally(records, spark, tmp_path)
        verdicts = local.verdicts
        assert verdicts["Malformed"] >= 3 and verdicts["GroupPaused"] == 3
        assert verdicts["GroupPauseRejected"] == 3 and verdicts["Unverified"] > 0
        assert any(r[8] for r in local.tables["coordination"])  # gaps
        assert result.verdicts == verdicts
        for name in TABLES:
            if name in ("violations", "amo_losses"):
                continue
            assert sorted_rows(read_table(config.out, name)) == sorted_rows(tables[name]), name

    def test_placed_settings_stamped_behind_the_log_time_get_the_partition_folds_verdict(
        self, spark: Any, tmp_path: Path
    ) -> None:
        """A placed group's settings moved by its admin, stamped before the pause's end while
        the log time is past it (log time steps back): refused by the partition fold, and on
        Spark too, where each claim's fold takes them as context at their partition's log time
        (it judged them at the claim's own last log time: accepted, and the claim's later
        heartbeats called misplaced)."""

        def settings_at(offset: int, t: int, first: int) -> CoordRecord:
            meta = GroupSettings(t // 1000, "m-1", ADMIN, "g", HB_MS, Partitioner.SPEC, None,
                                 placement=Placement(3, first, 1))  # fmt: skip
            return CoordRecord(0, offset, t, metadata_key(meta), encode_metadata(meta))

        def message(offset: int, t: int, msg: Any) -> CoordRecord:
            return CoordRecord(0, offset, t, record_key(msg), encode(msg))

        pause = ReleaseGroup(1, "m-1", ADMIN, "g", "", 0, 5)  # until 5 s, by an admin
        pin = TopicRecord(0, "a-1", "a", 3)  # the pinned count: placements are checked
        records = [
            CoordRecord(0, 0, 900, metadata_key(pin), encode_metadata(pin)),
            settings_at(1, 1_000, 0),
            message(2, 1_000, pause),
            message(3, 1_100, ClaimingPartition(0, "a-1", "a", "g", "t", 0)),
            message(4, 9_000, ClaimingPartition(0, "b-1", "b", "g", "t", 1)),
            settings_at(5, 2_000, 1),  # moved, stamped under the pause's end: refused
            message(6, 9_100, Heartbeat(0, "a-1", "a", "g", "t", 0, 6)),
        ]
        config, result, local, tables = on_spark_and_locally(records, spark, tmp_path)
        assert local.verdicts["GroupPaused"] == 1
        assert local.verdicts["Malformed"] == 1  # the moved settings, and nothing else
        assert result.verdicts == local.verdicts
        for name in ("claims", "events", "coordination", "groups"):
            assert sorted_rows(read_table(config.out, name)) == sorted_rows(tables[name]), name

    def test_a_group_on_one_coordination_partition_folds_in_every_task(
        self, spark: Any, tmp_path: Path
    ) -> None:
        """Every claim of the fleet on one coordination partition: the fold's input is spread
        over all four Spark partitions (by claim), not one (by coordination partition)."""
        syn = generate(2000, Fleet(partitions=16, clients=3, coord_partitions=1, seed=9))
        frame = spark.read.parquet(str(_records_parquet(syn.records, tmp_path / "r.parquet")))
        from pyspark.sql import functions as f  # noqa: PLC0415

        spread = spark_jobs.fold_input(spark_jobs.annotated(frame), 4)
        per_task = spread.groupBy(f.spark_partition_id()).count().collect()
        assert len(per_task) == 4
        assert sum(r["count"] for r in per_task) == len(syn.records)


def _records_parquet(records: list[CoordRecord], path: Path) -> Path:
    pq.write_table(pa.Table.from_batches([arrow.record_batch(records)]), path)
    return path
