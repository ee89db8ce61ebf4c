"""How `marshal-admin dump` renders one record and its verdict (pure part)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace

import pytest

from marshal_workers.admin import dump
from marshal_workers.admin.connection import MAX_REFOLDS, Connection, refolds
from marshal_workers.admin.dump import dump_entry, dump_line
from marshal_workers.common.errors import MarshalError
from marshal_workers.config.runconfig import RunConfig
from marshal_workers.fleet.groupcheck import own_settings
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import RationalizerConfig
from marshal_workers.protocol.wire import CoordRecord
from tests.support import HB, Log, claim, pause

T0 = 1_700_000_000_000


class TestDumpFormat:
    def test_json_entry_has_position_time_message_and_verdict(self) -> None:
        """A folded claim dumps its position, log time, key, text and verdict."""
        log = Log()
        event = log.at(T0, claim("A", 0))
        assert isinstance(event, ev.Event)
        entry = dump_entry(log.records[0], event)
        assert entry == {
            "partition": 0,
            "offset": 0,
            "log_time": "2023-11-14T22:13:20.000Z",
            "log_time_ms": T0,
            "key": "g/orders/0/claim",
            "message": "ClaimingPartition/1/0/A-1/A/g/orders/0",
            "verdict": "ClaimGranted",
            "reason": None,
        }

    def test_rejection_carries_its_reason(self) -> None:
        """A rejected record dumps the rejection's reason, in JSON and in the text line."""
        log = Log()
        log.at(T0, claim("A", 0))
        event = log.at(T0 + 1, claim("B", 0))
        assert isinstance(event, ev.Event)
        rec = log.records[1]
        assert dump_entry(rec, event)["reason"] == "held by A"
        assert dump_line(rec, event).endswith("-> ClaimRejected: held by A")

    def test_garbage_is_escaped_not_fatal(self) -> None:
        """Undecodable bytes are shown escaped, and the verdict says why it is malformed."""
        rec = CoordRecord(0, 0, T0, None, b"\xff\x00junk")
        event = Log().raw(rec)
        assert isinstance(event, ev.Event)
        entry = dump_entry(rec, event)
        assert entry["key"] is None
        assert entry["message"] == "\\xff\x00junk"
        assert entry["verdict"] == "Malformed"
        assert "UTF-8" in str(entry["reason"])
        assert json.loads(json.dumps(entry)) == entry


class TestPauseVerdicts:
    """`release-group --for 0` lifts a pause and is dumped as such."""

    def test_lifting_a_pause_is_not_labelled_paused(self) -> None:
        """A ReleaseGroup whose expire time has passed at its log time is PauseLifted."""
        log = Log(config=RationalizerConfig(HB, admin_client_ids=None))
        paused = log.at(T0, pause("ops", T0 // 1000 + 60))
        lifted = log.at(T0 + 5_000, pause("ops", (T0 + 5_000) // 1000))
        assert dump_entry(log.records[0], paused)["verdict"] == "GroupPaused"
        assert dump_entry(log.records[1], lifted)["verdict"] == "PauseLifted"
        assert "-> PauseLifted" in dump_line(log.records[1], lifted)


def test_a_refold_that_fails_part_way_changes_no_verdict(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A group recorded with HB 1 s is folded again for the whole-log dump; that read fails
    after one record: every record keeps the first fold's verdict, as the note says (the
    first took the refold's: two intervals in one group's lines; a review)."""
    settings = own_settings(RunConfig("h:h", Mode.ALO, ("t",), "g", "w1", heartbeat_interval=1.0))
    records = [CoordRecord(0, i, 0, b"g/t/%d" % i, b"x") for i in range(3)]
    first: list[tuple[CoordRecord, ev.Event]] = [
        (records[0], ev.GroupSettingsRecorded(0, 0, 0, settings)),
        *((r, ev.Malformed(0, r.offset, 0, "first fold", None)) for r in records[1:]),
    ]

    def failing(conn: Connection, timeout_s: float) -> Iterator[tuple[CoordRecord, ev.Event]]:
        yield records[0], first[0][1]
        yield records[1], ev.Malformed(0, 1, 0, "the refold", None)
        raise MarshalError("could not read to its end within 5s")

    monkeypatch.setattr(dump, "read_records", failing)
    out = dump.regrouped_verdicts(Connection("k:9092"), first, 5.0)
    assert out == first
    assert "groups g judged with the command's settings" in capsys.readouterr().err


def test_refolds_are_bounded_whatever_settings_records_say() -> None:
    """Whoever may write `__marshal` can record settings for a thousand made-up groups, each
    with its own interval: each distinct set was one more read of the whole log for every
    whole-log dump and topic view. At most `MAX_REFOLDS` sets are folded again (the ones most
    groups share), the rest named for a note and judged with the command's settings, as all
    were before: a degraded view, said so, never a slower one."""
    base = own_settings(RunConfig("h:h", Mode.ALO, ("t",), "g", "w1", heartbeat_interval=1.0))
    recorded = {
        f"g{i}": replace(base, group_id=f"g{i}", heartbeat_interval_ms=1000 + (i % 50))
        for i in range(1000)
    }
    recorded["real"] = replace(base, group_id="real", heartbeat_interval_ms=5000)
    recorded["real2"] = replace(base, group_id="real2", heartbeat_interval_ms=5000)
    sets, skipped = refolds(Connection("k:9092"), recorded)
    assert len(sets) == MAX_REFOLDS
    assert all(len(names) == 20 for _, names in sets)  # (50 sets of 20 made-up groups)
    assert "real" in skipped and len(skipped) == 1002 - 20 * MAX_REFOLDS
    few = {g: recorded[g] for g in ("g1", "g2", "real")}
    assert [len(names) for _, names in refolds(Connection("k:9092"), few)[0]] == [1, 1, 1]
    assert refolds(Connection("k:9092"), few)[1] == []  # (few sets: none left out)
