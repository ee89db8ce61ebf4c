"""The ledger file format: one JSON line per record a handler processed (the `ledger` plugin
writes it, `marshal-admin demo`, the audit and the tests read it), and the checks on its
rows: duplicates, overlaps in time between processes, gaps. Pure but for reading the files.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final, NamedTuple

DIR_ENV = "MARSHAL_LEDGER_DIR"  # the directory the ledger plugin writes its files in


class LedgerRow(NamedTuple):
    """One processed record: the one row type of the ledger, for the plugin that writes it and
    for every reader (`read_ledger`, `marshal-admin demo`, the audit, the tests).

    ``group``, ``instance_id``, ``slice`` and ``key_hash`` are None in rows of older ledgers,
    which did not write them (the readers fill them in), so readers never test for a field;
    every other field is required (a line without one is an incomplete row)."""

    topic: str
    partition: int
    offset: int
    client_id: str
    pid: int
    token: int
    start: float
    end: float
    group: str | None = None
    instance_id: str | None = None
    slice: str | None = None  # the claim's slice of the partition (`protocol.slicing`), None: all
    key_hash: int | None = None  # `slicing.key_hash` of the record's key, None: no key

    def line(self) -> str:
        """The row as its ledger line (a JSON object, without the newline)."""
        return json.dumps(self._asdict())


OPTIONAL_FIELDS: Final = ("group", "instance_id", "slice", "key_hash")
"""Ledger fields older ledgers lack: their absence does not make a line incomplete."""
REQUIRED_FIELDS: Final = tuple(f for f in LedgerRow._fields if f not in OPTIONAL_FIELDS)

Coordinates = tuple[str, int, int]  # topic, partition, offset


def read_ledger(directory: str | os.PathLike[str]) -> list[LedgerRow]:
    """Every row of every ledger file in ``directory``, by (topic, partition, offset, start).

    A last line without its newline (a process killed mid-write) is skipped. Rows of older
    ledgers, written without ``group``, ``instance_id``, ``slice`` or ``key_hash``, get ``None``.
    """
    rows: list[LedgerRow] = []
    for path in sorted(Path(directory).glob("ledger-*.jsonl")):
        text = path.read_text()
        complete = text if text.endswith("\n") else text[: text.rfind("\n") + 1]
        rows.extend(_row(line) for line in complete.splitlines() if line)
    rows.sort(key=lambda r: (r.topic, r.partition, r.offset, r.start))
    return rows


def _row(line: str) -> LedgerRow:
    """One ledger line, with the fields older ledgers lack set to None."""
    obj = json.loads(line)
    return LedgerRow(**{name: obj.get(name) for name in LedgerRow._fields})


def find_duplicates(rows: Iterable[LedgerRow]) -> dict[Coordinates, list[LedgerRow]]:
    """Records processed more than once, with every row that processed them."""
    seen: dict[Coordinates, list[LedgerRow]] = defaultdict(list)
    for row in rows:
        seen[(row.topic, row.partition, row.offset)].append(row)
    return {coords: found for coords, found in seen.items() if len(found) > 1}


def find_overlaps(rows: Iterable[LedgerRow]) -> list[tuple[LedgerRow, LedgerRow]]:
    """Pairs of rows of one claim (a partition, or one slice of it), from different processes,
    whose work overlapped in time.

    Each pair is (earlier start, later start). Rows of one process never overlap (a child
    handles one record at a time), so any pair here is two owners at once. Slices of one
    partition are separate claims: their workers run side by side by design.
    """
    by_partition: dict[tuple[str, int, str | None], list[LedgerRow]] = defaultdict(list)
    for row in rows:
        by_partition[(row.topic, row.partition, row.slice)].append(row)
    overlaps: list[tuple[LedgerRow, LedgerRow]] = []
    for partition_rows in by_partition.values():
        partition_rows.sort(key=lambda r: r.start)
        active: list[LedgerRow] = []  # rows that may still overlap a later start
        for row in partition_rows:
            active = [a for a in active if a.end > row.start]
            overlaps.extend((a, row) for a in active if a.pid != row.pid)
            active.append(row)
    return overlaps


def find_gaps(
    rows: Iterable[LedgerRow], expected: Mapping[tuple[str, int], range]
) -> list[Coordinates]:
    """Expected records (``expected[(topic, partition)]`` = the offsets) that no row processed."""
    done: set[Coordinates] = {(r.topic, r.partition, r.offset) for r in rows}
    return [
        (topic, partition, offset)
        for (topic, partition), offsets in sorted(expected.items())
        for offset in offsets
        if (topic, partition, offset) not in done
    ]


def find_stale_claims(
    rows: Iterable[LedgerRow], client_id: str, since: float
) -> list[tuple[str, int, str | None, int]]:
    """Claims (topic, partition, slice, token) under which ``client_id`` handled a record that
    started after ``since`` although the claim is no newer than one already in use on that
    partition (or slice) before ``since``.

    A fencing token is an offset of its claim's coordination partition, so the claims of two
    data partitions can carry the same number; a claim is its partition, slice and token. A
    claim won after ``since`` is written after every claim in use before it, on the same
    coordination partition, so its token is larger: a row under a smaller or equal token is a
    claim the client held before (or somebody else's).
    """

    def claim(r: LedgerRow) -> tuple[str, int, str | None]:
        return (r.topic, r.partition, r.slice)

    rows = list(rows)
    newest_before: dict[tuple[str, int, str | None], int] = {}
    for r in rows:
        if r.start <= since:
            newest_before[claim(r)] = max(newest_before.get(claim(r), -1), r.token)
    return sorted(
        {
            (*claim(r), r.token)
            for r in rows
            if r.client_id == client_id
            and r.start > since
            and r.token <= newest_before.get(claim(r), -1)
        },
        key=lambda c: (c[0], c[1], c[2] or "", c[3]),
    )
