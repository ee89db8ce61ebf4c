"""The ledger: a reference handler that writes down every record it processed, for verification.

Use it as ``--handler plugins.ledger:handle``. For each record it appends one JSON line

    {"topic", "partition", "offset", "client_id", "pid", "token", "start", "end",
     "group", "instance_id"}

to ``$MARSHAL_LEDGER_DIR/ledger-<pid>.jsonl`` (one file per process, opened with O_APPEND, one
``write`` per line, so a line is on disk before the next record starts). ``start`` and ``end``
are ``time.time()`` around the (optional) simulated work; ``token`` is the claim's fencing token;
``group`` and ``instance_id`` are the consumer group and the supervisor instance the claim
belongs to, so that marshal-audit can tell two instances of one client (restart recovery)
apart under one token, and attribute a row to its group without guessing from the claims.
A record whose handling fails or never finishes leaves no line.

Ledgers written before ``group`` and ``instance_id`` existed are still read: `read_ledger`
gives such rows ``None`` for both, so every `LedgerRow` has every key.

Environment (read once per process):

- ``MARSHAL_LEDGER_DIR`` (required): where the files go (created if missing).
- ``MARSHAL_LEDGER_DELAY_MS``: simulated work per record, in milliseconds.
- ``MARSHAL_LEDGER_HANG_AT_OFFSET``: hang forever (a sleep loop) on that offset, to test the
  killing of a hung child.
- ``MARSHAL_LEDGER_FAIL_AT_OFFSET``: raise `SimulatedError` on that offset.

Checks for tests and chaos runs, over the rows of `read_ledger(dir)`:

- `find_duplicates(rows)`: records processed more than once (normal in ALO after a failure,
  never in AMO);
- `find_overlaps(rows)`: two processes working on the same partition at the same time (what
  fencing must prevent, in either mode);
- `find_gaps(rows, expected)`: expected records never processed (never in ALO).
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TypedDict

from marshal_workers.handler import Context, Record

DIR_ENV = "MARSHAL_LEDGER_DIR"
DELAY_ENV = "MARSHAL_LEDGER_DELAY_MS"
HANG_ENV = "MARSHAL_LEDGER_HANG_AT_OFFSET"
FAIL_ENV = "MARSHAL_LEDGER_FAIL_AT_OFFSET"


class LedgerRow(TypedDict):
    """One processed record.

    ``group`` and ``instance_id`` are ``None`` only in rows of older ledger files, which did
    not write them (`read_ledger` fills them in), so readers never need ``.get``.
    """

    topic: str
    partition: int
    offset: int
    client_id: str
    pid: int
    token: int
    start: float
    end: float
    group: str | None
    instance_id: str | None


Coordinates = tuple[str, int, int]  # topic, partition, offset


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
    row: LedgerRow = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "client_id": ctx.client_id,
        "pid": settings.pid,
        "token": ctx.fencing_token,
        "start": start,
        "end": time.time(),
        "group": ctx.group_id,
        "instance_id": ctx.instance_id,
    }
    os.write(settings.fd, (json.dumps(row) + "\n").encode())


def read_ledger(directory: str | os.PathLike[str]) -> list[LedgerRow]:
    """Every row of every ledger file in ``directory``, by (topic, partition, offset, start).

    A last line without its newline (a process killed mid-write) is skipped. Rows of older
    ledgers, written without ``group`` and ``instance_id``, get ``None`` for them.
    """
    rows: list[LedgerRow] = []
    for path in sorted(Path(directory).glob("ledger-*.jsonl")):
        text = path.read_text()
        complete = text if text.endswith("\n") else text[: text.rfind("\n") + 1]
        rows.extend(_row(line) for line in complete.splitlines() if line)
    rows.sort(key=lambda r: (r["topic"], r["partition"], r["offset"], r["start"]))
    return rows


def _row(line: str) -> LedgerRow:
    """One ledger line, with the fields older ledgers lack set to None."""
    row: LedgerRow = json.loads(line)
    row.setdefault("group", None)
    row.setdefault("instance_id", None)
    return row


def find_duplicates(rows: Iterable[LedgerRow]) -> dict[Coordinates, list[LedgerRow]]:
    """Records processed more than once, with every row that processed them."""
    seen: dict[Coordinates, list[LedgerRow]] = defaultdict(list)
    for row in rows:
        seen[(row["topic"], row["partition"], row["offset"])].append(row)
    return {coords: found for coords, found in seen.items() if len(found) > 1}


def find_overlaps(rows: Iterable[LedgerRow]) -> list[tuple[LedgerRow, LedgerRow]]:
    """Pairs of rows of one partition, from different processes, whose work overlapped in time.

    Each pair is (earlier start, later start). Rows of one process never overlap (a child
    handles one record at a time), so any pair here is two owners at once.
    """
    by_partition: dict[tuple[str, int], list[LedgerRow]] = defaultdict(list)
    for row in rows:
        by_partition[(row["topic"], row["partition"])].append(row)
    overlaps: list[tuple[LedgerRow, LedgerRow]] = []
    for partition_rows in by_partition.values():
        partition_rows.sort(key=lambda r: r["start"])
        active: list[LedgerRow] = []  # rows that may still overlap a later start
        for row in partition_rows:
            active = [a for a in active if a["end"] > row["start"]]
            overlaps.extend((a, row) for a in active if a["pid"] != row["pid"])
            active.append(row)
    return overlaps


def find_gaps(
    rows: Iterable[LedgerRow], expected: Mapping[tuple[str, int], range]
) -> list[Coordinates]:
    """Expected records (``expected[(topic, partition)]`` = the offsets) that no row processed."""
    done: set[Coordinates] = {(r["topic"], r["partition"], r["offset"]) for r in rows}
    return [
        (topic, partition, offset)
        for (topic, partition), offsets in sorted(expected.items())
        for offset in offsets
        if (topic, partition, offset) not in done
    ]
