"""The SQLite sink refuses writes from an older fencing token (no broker).

The scenario that fencing tokens exist for: owner 1 (token 5) writes, freezes, owner 2 (token 9)
takes the partition over and writes, owner 1 resumes and tries to write: refused, nothing of it
stored. Once with two sinks in this process, once with two real processes on one database file.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import structlog

from marshal_workers.child.plugin import Plugin
from marshal_workers.handler import Context, StopProcessing
from marshal_workers.plugins.sqlite_sink import FencedWrite, SqliteSink, fence_token, stored_rows
from marshal_workers.protocol.modes import Mode
from tests.unit.plugins.sqlite_writer import EXIT_FENCED, PARTITION, TOPIC, record

REPO = Path(__file__).resolve().parents[3]


def context(token: int, partition: int = PARTITION) -> Context:
    """The context of an owner of the test partition holding ``token``."""
    return Context(
        client_id=f"owner-{token}",
        instance_id=f"i{token}",
        group_id="g",
        topic=TOPIC,
        partition=partition,
        fencing_token=token,
        mode=Mode.ALO,
        log=structlog.get_logger(),
        pid=1,
        lease_remaining=lambda: 10.0,
    )


def sink_at(path: Path) -> SqliteSink:
    sink = SqliteSink(path)
    sink.setup()
    return sink


class TestFencing:
    def test_frozen_then_resumed_old_owner_is_refused(self, tmp_path: Path) -> None:
        """Owner 1 (token 5) writes; owner 2 (token 9) takes over and writes; owner 1 resumes:
        refused with FencedWrite, counted, and nothing of its write is stored."""
        db = tmp_path / "sink.db"
        old, new = sink_at(db), sink_at(db)
        old.handle_batch([record(0), record(1)], context(5))
        new.handle_batch([record(2)], context(9))
        with pytest.raises(FencedWrite, match="token 5 refused: token 9"):
            old.handle_batch([record(3), record(4)], context(5))
        assert old.refused == 2
        assert [(o, t) for _, _, o, t, _ in stored_rows(db)] == [(0, 5), (1, 5), (2, 9)]
        assert fence_token(db, TOPIC, PARTITION) == 9

    def test_a_refused_write_stops_the_child_without_retries(self) -> None:
        """FencedWrite is a StopProcessing: the error policy neither retries nor dead-letters it."""
        assert issubclass(FencedWrite, StopProcessing)

    def test_the_same_or_a_newer_token_writes(self, tmp_path: Path) -> None:
        """An owner keeps writing under its token; a newer one raises the fence."""
        db = tmp_path / "sink.db"
        sink = sink_at(db)
        sink.handle_batch([record(0)], context(5))
        sink.handle_batch([record(1)], context(5))
        sink.handle_batch([record(2)], context(7))
        assert fence_token(db, TOPIC, PARTITION) == 7
        assert sink.written == 3 and sink.refused == 0

    def test_partitions_are_fenced_apart(self, tmp_path: Path) -> None:
        """A newer token on one partition does not fence another partition."""
        db = tmp_path / "sink.db"
        sink = sink_at(db)
        sink.handle_batch([record(0, partition=0)], context(9, partition=0))
        sink.handle_batch([record(0, partition=1)], context(5, partition=1))
        assert fence_token(db, TOPIC, 0) == 9
        assert fence_token(db, TOPIC, 1) == 5

    def test_a_newer_owner_redoing_a_record_overwrites_it(self, tmp_path: Path) -> None:
        """At least once: the new owner rewriting an offset replaces the row, once."""
        db = tmp_path / "sink.db"
        sink = sink_at(db)
        sink.handle_batch([record(0)], context(5))
        sink.handle_batch([record(0)], context(9))
        assert [(o, t) for _, _, o, t, _ in stored_rows(db)] == [(0, 9)]


class TestPluginShape:
    def test_loads_as_a_batch_plugin_with_lifecycle(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """As the child loads it: the class, $MARSHAL_SQLITE_PATH, setup, batch, teardown."""
        db = tmp_path / "env.db"
        monkeypatch.setenv("MARSHAL_SQLITE_PATH", str(db))
        plugin = Plugin(SqliteSink)
        ctx = context(3)
        plugin.setup(ctx)
        assert plugin.handle_batch is not None
        plugin.handle_batch([record(0), record(1)], ctx)
        plugin.teardown(ctx, "stop")
        assert [o for _, _, o, _, _ in stored_rows(db)] == [0, 1]

    def test_without_a_path_setup_fails(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """No path and no $MARSHAL_SQLITE_PATH: setup fails (the child exits: setup failed)."""
        monkeypatch.delenv("MARSHAL_SQLITE_PATH", raising=False)
        with pytest.raises(RuntimeError, match="MARSHAL_SQLITE_PATH"):
            SqliteSink().setup(context(1))


def start_writer(db: Path, token: int, first: int, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.unit.plugins.sqlite_writer",
            str(db),
            str(token),
            str(first),
            str(count),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )


class TestTwoProcesses:
    def test_a_sigstopped_owner_resumed_after_a_takeover_writes_nothing(
        self, tmp_path: Path
    ) -> None:
        """Process A (token 5) writes until SIGSTOP; process B (token 9) writes; A gets SIGCONT:
        its next write is refused, and every row A stored precedes every row of B."""
        db = tmp_path / "shared.db"
        sink_at(db).teardown()  # the schema exists before either process starts
        a = start_writer(db, 5, 0, 100_000)
        b: subprocess.Popen[str] | None = None
        try:
            assert a.stdout is not None
            for _ in range(3):
                a.stdout.readline()  # three writes committed
            a.send_signal(signal.SIGSTOP)
            b = start_writer(db, 9, 1_000_000, 5)
            # b finishes at once, unless a froze inside its transaction (holding the lock)
            with contextlib.suppress(subprocess.TimeoutExpired):
                b.wait(3)
            a.send_signal(signal.SIGCONT)
            assert b.wait(30) == 0
            assert a.wait(30) == EXIT_FENCED
            assert "fenced" in a.stdout.read()
        finally:
            for proc in (a, b):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                    proc.wait(10)
        rows = stored_rows(db)  # in insertion order
        tokens = [t for _, _, _, t, _ in rows]
        first_new = tokens.index(9)
        assert set(tokens[:first_new]) == {5}
        assert set(tokens[first_new:]) == {9}, "the resumed old owner wrote after the new one"
        assert [o for _, _, o, t, _ in rows if t == 9] == list(range(1_000_000, 1_000_005))
        assert fence_token(db, TOPIC, PARTITION) == 9
