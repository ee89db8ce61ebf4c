"""The ledger: a reference handler that writes down every record it processed, for verification.

Use it as ``--handler ledger`` (the entry point, ``marshal_workers.plugins.ledger:handle``).
For each record it appends one JSON line

    {"topic", "partition", "offset", "client_id", "pid", "token", "start", "end",
     "group", "instance_id", "slice", "key_hash"}

to ``$MARSHAL_LEDGER_DIR/ledger-<pid>.jsonl`` (one file per process, opened with O_APPEND, one
``write`` per line, so a line is on disk before the next record starts). ``start`` and ``end``
are ``time.time()`` around the (optional) simulated work; ``token`` is the claim's fencing token;
``group`` and ``instance_id`` are the consumer group and the supervisor instance the claim
belongs to, so that marshal-audit can tell two instances of one client (restart recovery)
apart under one token, and attribute a row to its group without guessing from the claims;
``slice`` names the slice of the partition the claim covers (``key.3of8``; null for a whole
partition: `marshal_workers.protocol.slicing`); ``key_hash`` is the record key's crc32, the hash
a ``key`` cut slices by (null for a record without a key), so that marshal-audit can check that
each record was its slice's and that each key was handled in order.
A record whose handling fails or never finishes leaves no line.

The file format, `read_ledger` and the checks below live in `marshal_workers.common.ledgerfile`
(the demo and the audit read ledgers too).

Environment (read once per process):

- ``MARSHAL_LEDGER_DIR`` (required): where the files go (created if missing).
- ``MARSHAL_LEDGER_DELAY_MS``: simulated work per record, in milliseconds.
- ``MARSHAL_LEDGER_HANG_AT_OFFSET``: hang forever (a sleep loop) on that offset, to test the
  killing of a hung child.
- ``MARSHAL_LEDGER_FAIL_AT_OFFSET``: raise `SimulatedError` on that offset.

Checks for tests and chaos runs (`marshal_workers.common.ledgerfile`), over `read_ledger(dir)`:

- `find_duplicates(rows)`: records processed more than once (normal in ALO after a failure,
  never in AMO);
- `find_overlaps(rows)`: two processes working on the same partition at the same time (what
  fencing must prevent, in either mode);
- `find_gaps(rows, expected)`: expected records never processed (never in ALO).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from marshal_workers.common.ledgerfile import DIR_ENV, LedgerRow
from marshal_workers.handler import Context, Record
from marshal_workers.protocol.slicing import key_hash

DELAY_ENV = "MARSHAL_LEDGER_DELAY_MS"
HANG_ENV = "MARSHAL_LEDGER_HANG_AT_OFFSET"
FAIL_ENV = "MARSHAL_LEDGER_FAIL_AT_OFFSET"


class SimulatedError(Exception):
    """Raised on ``MARSHAL_LEDGER_FAIL_AT_OFFSET``, to test handler failures."""


class _Settings:
    """The environment, read once per process, and the open ledger file."""

    def __init__(self) -> None:
        directory = os.environ.get(DIR_ENV)
        if not directory:
            raise RuntimeError(f"the ledger handler needs ${DIR_ENV}")
        Path(directory).mkdir(parents=True, exist_ok=True)
        self.pid = os.getpid()
        path = Path(directory) / f"ledger-{self.pid}.jsonl"
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.delay_s = float(os.environ.get(DELAY_ENV, "0")) / 1000
        self.hang_at = _optional_int(os.environ.get(HANG_ENV))
        self.fail_at = _optional_int(os.environ.get(FAIL_ENV))


def _optional_int(text: str | None) -> int | None:
    return int(text) if text else None


_settings: _Settings | None = None


def _current() -> _Settings:
    global _settings  # noqa: PLW0603 (one ledger file per process)
    if _settings is None or _settings.pid != os.getpid():
        _settings = _Settings()
    return _settings


def handle(record: Record, ctx: Context) -> None:
    """Simulate the work, then append the record's ledger line."""
    settings = _current()
    start = time.time()
    if settings.hang_at == record.offset:
        while True:
            time.sleep(0.1)
    if settings.delay_s:
        time.sleep(settings.delay_s)
    if settings.fail_at == record.offset:
        raise SimulatedError(f"failing on purpose at offset {record.offset}")
    row = LedgerRow(
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        client_id=ctx.client_id,
        pid=settings.pid,
        token=ctx.fencing_token,
        start=start,
        end=time.time(),
        group=ctx.group_id,
        instance_id=ctx.instance_id,
        slice=ctx.slice,
        key_hash=None if record.key is None else key_hash(record.key),
    )
    os.write(settings.fd, (row.line() + "\n").encode())
