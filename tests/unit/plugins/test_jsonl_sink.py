"""The JSON-lines sink plugin (no broker)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from marshal_workers.child.plugin import Plugin
from marshal_workers.handler import Context, Record
from marshal_workers.plugins.jsonl_sink import DIR_ENV, JsonlSink, path_for, read_lines
from marshal_workers.protocol.modes import Mode


def context(partition: int = 1) -> Context:
    return Context(
        client_id="c",
        instance_id="c-1",
        group_id="g",
        topic="orders",
        partition=partition,
        fencing_token=11,
        mode=Mode.ALO,
        log=None,
        pid=1,
        lease_remaining=lambda: 10.0,
    )


@pytest.fixture
def out_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "out"
    monkeypatch.setenv(DIR_ENV, str(directory))
    return directory


class TestJsonlSink:
    def test_setup_handle_teardown_appends_one_line_per_record(self, out_dir: Path) -> None:
        """Loaded as the child loads it, it writes <topic>-<partition>.jsonl, one line each."""
        plugin = Plugin(JsonlSink)
        ctx = context()
        plugin.setup(ctx)
        for offset in range(3):
            plugin.handle(Record("orders", 1, offset, b"k", b'{"n": 1}', 1000 + offset, ()), ctx)
        plugin.teardown(ctx, "stop")
        rows = read_lines(path_for(out_dir, "orders", 1))
        assert [r["offset"] for r in rows] == [0, 1, 2]
        assert rows[0] == {
            "topic": "orders",
            "partition": 1,
            "offset": 0,
            "timestamp": 1000,
            "key": "k",
            "value": '{"n": 1}',
            "headers": [],
            "token": 11,
        }

    def test_each_line_is_on_disk_when_handle_returns(self, out_dir: Path) -> None:
        """A handled record's line is flushed before the next record (no teardown needed)."""
        sink = JsonlSink()
        sink.setup(context())
        sink.handle(Record("orders", 1, 7, None, b"v", None, ()), context())
        assert [r["offset"] for r in read_lines(path_for(out_dir, "orders", 1))] == [7]
        sink.teardown(context(), "stop")

    def test_binary_is_base64_and_nulls_stay_null(self, out_dir: Path) -> None:
        """Non-UTF-8 keys, values and header values are kept as base64; None stays null."""
        sink = JsonlSink()
        sink.setup(context())
        blob = b"\xff\x00\xfe"
        record = Record("orders", 1, 0, None, blob, None, (("h", blob), ("t", b"x"), ("n", None)))
        sink.handle(record, context())
        sink.teardown(context(), "stop")
        (row,) = read_lines(path_for(out_dir, "orders", 1))
        assert row["key"] is None
        assert base64.b64decode(row["value_b64"]) == blob
        assert row["headers"] == [
            ["h", None, base64.b64encode(blob).decode()],
            ["t", "x"],
            ["n", None],
        ]

    def test_restart_appends(self, out_dir: Path) -> None:
        """A second child of the same partition appends to the file."""
        for offset in (0, 1):
            sink = JsonlSink()
            sink.setup(context())
            sink.handle(Record("orders", 1, offset, None, b"v", None, ()), context())
            sink.teardown(context(), "stop")
        assert [r["offset"] for r in read_lines(path_for(out_dir, "orders", 1))] == [0, 1]

    def test_without_a_directory_setup_fails(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """No $MARSHAL_JSONL_DIR: setup fails (the child exits: setup failed)."""
        monkeypatch.delenv(DIR_ENV, raising=False)
        with pytest.raises(RuntimeError, match=DIR_ENV):
            JsonlSink().setup(context())
