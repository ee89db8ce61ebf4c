"""SQLite sink: the reference plugin that shows why fencing tokens matter.

Use it as ``--handler sqlite`` (the entry point) or
``--handler marshal_workers.plugins.sqlite_sink:SqliteSink``,
with ``MARSHAL_SQLITE_PATH`` naming the database file (created if missing; every child of every
worker on the host may share it).

The problem. A worker can be paused at any moment (SIGSTOP, a GC pause, swap, a VM migration)
and resume later, unaware that time passed. Meanwhile its claim went stale and another worker
took the partition over. The paused one's lease ends its process as soon as it runs again, but
a write it had already decided on can still land first. Leases alone cannot stop that; only the
sink can, if every write carries the claim's fencing token and the sink remembers the newest
token it has seen.

The defence. Each batch is written in one ``BEGIN IMMEDIATE`` transaction (the database's write
lock is taken first, so check and write cannot interleave with another process) that:

1. reads the highest fencing token stored for the (topic, partition) in ``fences``;
2. refuses the batch if the writer's token is older: rolls back, counts it in ``refused`` and
   raises `FencedWrite` (nothing of the batch is stored);
3. otherwise records the writer's token as the partition's newest, upserts the rows into
   ``records`` (a newer owner redoing a record, as at-least-once allows, overwrites it), and
   commits.

Tokens are the coordination-log offsets of winning claims, so they grow with every new owner of
a partition. `FencedWrite` is a `StopProcessing`: the child stops at once, without retries or
the dead-letter policy (its claim is gone; the new owner handles the records).

The database runs in WAL mode with a 30 s busy timeout, so concurrent children (processes) are
safe. A limit to know: a worker restarted with the same client id takes its claims over with the
same token (restart recovery), so the sink cannot tell its old instance from its new one.

Tables: ``records(topic, partition, offset, key, value, timestamp, token, client_id)`` with the
primary key (topic, partition, offset), and ``fences(topic, partition, token)``.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from marshal_workers.handler import Context, Record, StopProcessing

PATH_ENV = "MARSHAL_SQLITE_PATH"
BUSY_TIMEOUT_S = 30.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    topic TEXT NOT NULL,
    "partition" INTEGER NOT NULL,
    "offset" INTEGER NOT NULL,
    key BLOB,
    value BLOB,
    timestamp INTEGER,
    token INTEGER NOT NULL,
    client_id TEXT NOT NULL,
    PRIMARY KEY (topic, "partition", "offset")
);
CREATE TABLE IF NOT EXISTS fences (
    topic TEXT NOT NULL,
    "partition" INTEGER NOT NULL,
    token INTEGER NOT NULL,
    PRIMARY KEY (topic, "partition")
);
"""

UPSERT_RECORD = """
INSERT INTO records (topic, "partition", "offset", key, value, timestamp, token, client_id)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (topic, "partition", "offset") DO UPDATE SET
    key = excluded.key, value = excluded.value, timestamp = excluded.timestamp,
    token = excluded.token, client_id = excluded.client_id
"""

UPSERT_FENCE = """
INSERT INTO fences (topic, "partition", token) VALUES (?, ?, ?)
ON CONFLICT (topic, "partition") DO UPDATE SET token = excluded.token
"""


class FencedWrite(StopProcessing):
    """A write from an older owner of the partition than the sink has already seen."""

    def __init__(self, topic: str, partition: int, token: int, newest: int) -> None:
        super().__init__(
            f"write to {topic}/{partition} with fencing token {token} refused: "
            f"token {newest} already wrote (a newer owner has the partition)"
        )
        self.token = token
        self.newest = newest


def connect(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL, the schema created."""
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.executescript(SCHEMA)
    return conn


class SqliteSink:
    """Stores records per (topic, partition), refusing writes from an older fencing token."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = path
        self.conn: sqlite3.Connection | None = None
        self.written = 0  # records stored by this sink
        self.refused = 0  # records refused as fenced

    def setup(self, ctx: Context | None = None) -> None:
        """Open the database (``path``, else ``$MARSHAL_SQLITE_PATH``)."""
        path = self.path or os.environ.get(PATH_ENV)
        if not path:
            raise RuntimeError(f"the sqlite sink needs ${PATH_ENV}")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.conn = connect(path)

    def handle_batch(self, records: Sequence[Record], ctx: Context) -> None:
        """Store the batch under the claim's token, in one transaction (see the module doc)."""
        self.write(records, ctx.fencing_token, ctx.client_id, ctx.log)

    def write(self, records: Sequence[Record], token: int, client_id: str, log: Any = None) -> None:
        """Store ``records`` (all of one topic-partition) if ``token`` is not older than the
        newest stored for it; else store nothing and raise `FencedWrite`."""
        if not records:
            return
        assert self.conn is not None, "setup was not called"
        topic, partition = records[0].topic, records[0].partition
        cur = self.conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            row = cur.execute(
                'SELECT token FROM fences WHERE topic = ? AND "partition" = ?', (topic, partition)
            ).fetchone()
            if row is not None and row[0] > token:
                raise FencedWrite(topic, partition, token, row[0])
            if row is None or row[0] < token:
                cur.execute(UPSERT_FENCE, (topic, partition, token))
            cur.executemany(
                UPSERT_RECORD,
                [
                    (topic, partition, r.offset, r.key, r.value, r.timestamp, token, client_id)
                    for r in records
                ],
            )
            cur.execute("COMMIT")
        except BaseException as exc:
            cur.execute("ROLLBACK")
            if isinstance(exc, FencedWrite):
                self.refused += len(records)
                if log is not None:
                    log.warning("fenced_write_refused", token=token, newest=exc.newest)
            raise
        self.written += len(records)

    def teardown(self, ctx: Context | None = None, reason: str = "stop") -> None:
        """Close the database."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def stored_rows(path: str | os.PathLike[str]) -> list[tuple[str, int, int, int, bytes | None]]:
    """Every stored record as (topic, partition, offset, token, value), in insertion order."""
    with contextlib.closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)) as conn:
        rows = conn.execute(
            'SELECT topic, "partition", "offset", token, value FROM records ORDER BY rowid'
        ).fetchall()
    return [(str(t), int(p), int(o), int(k), v) for t, p, o, k, v in rows]


def fence_token(path: str | os.PathLike[str], topic: str, partition: int) -> int | None:
    """The newest fencing token stored for a partition, or None."""
    with contextlib.closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)) as conn:
        row = conn.execute(
            'SELECT token FROM fences WHERE topic = ? AND "partition" = ?', (topic, partition)
        ).fetchone()
    return None if row is None else int(row[0])
