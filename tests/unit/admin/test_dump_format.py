"""How `marshal-admin dump` renders one record and its verdict (pure part)."""

from __future__ import annotations

import json

from marshal_workers.admin.dump import dump_entry, dump_line
from marshal_workers.protocol import events as ev
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
