"""Slices in the ledger checks: whose claim a row worked under, which offsets a slice must
have handled, and the checks that only sliced groups need (pure; `protocol.slicing`).

Under ordering ``key`` or ``unordered`` a data partition is cut into N slices, each claimed
under a claim key of its own (topic field ``orders+key.3of8``). The claim intervals carry that
topic field; a ledger row carries the data topic and its ``slice`` (``key.3of8``), so the row's
claim topic is the two joined (`claim_topic`). What the audit can tell per slice:

- **which records a slice takes** (`takes`): ``unordered``, offset mod N, from the offset
  alone; ``key``, crc32(key) mod N, from the row's ``key_hash`` (the ledger plugin writes it;
  null for a record without a key, which the child cuts by offset mod N, but also in a ledger
  that does not write it, so such a row is not judged). A row of a slice that does not take
  its record is **wrong_slice**: the one invariant that keeps two slices' workers off one
  record.
- **offset_overlap** (`offset_overlaps`): one offset handled by two processes of different
  claims whose work overlapped in time: two holders of one record at once, across slices.
  (Two processes of one claim at once are an ``overlap``, as on a whole partition.)
- **key_order** (`key_order`, ordering ``key``): one key's records handled out of offset order
  by one process, or by two processes at once. A later holder handling a key again from its
  resume position is an at-least-once redelivery, not a break of order. Keys are compared by
  their crc32, so two keys with one hash are one key here (they share a slice and its one
  holder, so a sound run still shows them in order). Records an operator resolved (poison:
  retried or skipped) are left out: their order is the operator's.
- **which offsets a slice committed** (`lanes`, for the ALO gaps): a claim's committed range
  [first, last) holds every offset for a whole partition, every N-th for an ``unordered``
  stripe; for ``key`` slices the log does not say which offsets a slice takes (it names no
  keys, and the ledger names keys only of records handled), so an offset is known to be owed
  only once *every* key slice of the cut has committed past it.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, NamedTuple

from marshal_workers.audit.schema import columns
from marshal_workers.common.ledgerfile import LedgerRow
from marshal_workers.protocol.slicing import Ordering, Slice, split_topic


class Span(NamedTuple):
    """A claim interval as the checks need it (from a settled ``claims`` row)."""

    group: str
    topic: str
    partition: int
    client_id: str
    instance_id: str
    token: int
    coord_partition: int
    start_ms: int
    end_ms: int | None
    ended: str
    first_offset: int | None
    last_offset: int | None
    by_admin: bool

    def as_json(self) -> dict[str, object]:
        """The interval as evidence."""
        return self._asdict()


Range = tuple[int, int, list[Span]]  # [lo, hi) and the claim intervals that committed it
Row = tuple[Any, ...]
_C: Final = {name: i for i, name in enumerate(columns("claims"))}


def claim_topic(row: LedgerRow) -> str:
    """The topic field of the claim a ledger row was handled under."""
    return row.topic if row.slice is None else f"{row.topic}+{row.slice}"


def slice_of(row: LedgerRow) -> Slice | None:
    """The slice a row names (None: a whole partition, or a name no cut makes)."""
    return None if row.slice is None else _parse(row.slice)


@functools.lru_cache(maxsize=4096)
def _parse(name: str) -> Slice | None:
    return split_topic(f"t+{name}")[1]


def takes(part: Slice, row: LedgerRow) -> bool:
    """Whether ``part`` takes the row's record (`slicing.Slice.takes`, from the key's hash)."""
    return part.takes_hashed(row.offset, row.key_hash)


def wrong_slice(rows: Iterable[LedgerRow]) -> list[tuple[LedgerRow, Slice]]:
    """Rows of a slice that does not take their record. A ``key`` slice's row without a
    ``key_hash`` is not judged: its record may have no key, or its ledger not write the hash
    (the field is optional), and guessing by offset would accuse every keyed record."""
    out: list[tuple[LedgerRow, Slice]] = []
    for row in rows:
        part = slice_of(row)
        if part is None or (part.ordering is Ordering.KEY and row.key_hash is None):
            continue
        if not takes(part, row):
            out.append((row, part))
    return out


def _process(row: LedgerRow) -> tuple[str, int]:
    return row.client_id, row.pid


def _concurrent(a: LedgerRow, b: LedgerRow, tolerance_s: float) -> bool:
    """Whether two rows' handling overlapped by more than the tolerance."""
    return min(a.end, b.end) - max(a.start, b.start) > tolerance_s


def offset_overlaps(
    rows: Iterable[LedgerRow], tolerance_s: float
) -> list[tuple[LedgerRow, LedgerRow]]:
    """Pairs (earlier start, later start) of rows of one offset, of different claims and
    processes, whose handling overlapped."""
    by_offset: dict[int, list[LedgerRow]] = defaultdict(list)
    for row in rows:
        by_offset[row.offset].append(row)
    out: list[tuple[LedgerRow, LedgerRow]] = []
    for found in by_offset.values():
        if len(found) < 2:
            continue
        found.sort(key=lambda r: r.start)
        for i, a in enumerate(found):
            for b in found[i + 1 :]:
                other = claim_topic(a) != claim_topic(b) and _process(a) != _process(b)
                if other and _concurrent(a, b, tolerance_s):
                    out.append((a, b))
    return out


def key_order(
    rows: Iterable[LedgerRow], tolerance_s: float, resolved: frozenset[int] = frozenset()
) -> list[tuple[LedgerRow, LedgerRow, str]]:
    """Rows (row, the earlier row it breaks order with, why) of ``key`` slices whose key was
    handled out of order by one process, or by two processes at once (rows by start)."""
    by_key: dict[int, list[LedgerRow]] = defaultdict(list)
    for row in rows:
        part = slice_of(row)
        keyed = part is not None and part.ordering is Ordering.KEY and row.key_hash is not None
        if keyed and row.offset not in resolved and row.key_hash is not None:
            by_key[row.key_hash].append(row)
    out: list[tuple[LedgerRow, LedgerRow, str]] = []
    for found in by_key.values():
        found.sort(key=lambda r: (r.start, r.offset))
        last: dict[tuple[str, int, int], LedgerRow] = {}
        active: list[LedgerRow] = []
        for row in found:
            active = [a for a in active if a.end - tolerance_s > row.start]
            rival = next((a for a in active if _process(a) != _process(row)), None)
            if rival is not None:
                out.append((row, rival, "two processes at once"))
            holder = (row.client_id, row.pid, row.token)
            before = last.get(holder)
            if before is not None and before.offset > row.offset:
                out.append((row, before, "after a later offset of the key, by one process"))
            last[holder] = row
            active.append(row)
    return out


class Lane(NamedTuple):
    """Offsets one claim topic (or, for ``key`` slices, one whole cut) committed."""

    name: str | None  # the slice's name, ``key.*ofN`` for a key cut, None: whole partition
    ranges: list[Range]
    owed: Callable[[int], bool]  # whether the lane owes the offset (its slice takes it)


def merge(spans: Sequence[Span]) -> list[Range]:
    """Committed ranges [first_offset, last_offset) merged where they touch or overlap."""
    out: list[Range] = []
    for s in sorted(spans, key=lambda s: (s.first_offset, s.last_offset)):
        lo, hi = s.first_offset, s.last_offset
        assert lo is not None and hi is not None
        if out and lo <= out[-1][1]:
            plo, phi, pspans = out[-1]
            out[-1] = (plo, max(phi, hi), [*pspans, s])
        else:
            out.append((lo, hi, [s]))
    return out


def _intersect(a: list[Range], b: list[Range]) -> list[Range]:
    """Where two sorted lists of disjoint ranges overlap."""
    out: list[Range] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi, [*a[i][2], *b[j][2]]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _every(_offset: int) -> bool:
    return True


def lanes(committed: Sequence[Span]) -> list[Lane]:
    """The ALO lanes of one group's committed claim intervals on one data partition."""
    by_topic: dict[str, list[Span]] = defaultdict(list)
    for s in committed:
        by_topic[s.topic].append(s)
    out: list[Lane] = []
    key_cuts: dict[int, dict[int, list[Range]]] = defaultdict(dict)
    for topic, spans in sorted(by_topic.items()):
        part = split_topic(topic)[1]
        if part is None:
            out.append(Lane(None, merge(spans), _every))
        elif part.ordering is Ordering.KEY:
            key_cuts[part.count][part.index] = merge(spans)
        else:
            out.append(Lane(part.name, merge(spans), _stripe(part)))
    for count, by_index in sorted(key_cuts.items()):
        if len(by_index) < count:
            continue  # a slice never committed: no offset is known to be owed
        ranges = by_index[0]
        for index in range(1, count):
            ranges = _intersect(ranges, by_index[index])
        out.append(Lane(f"key.*of{count}", ranges, _every))
    return out


def _stripe(part: Slice) -> Callable[[int], bool]:
    def owed(offset: int) -> bool:
        return offset % part.count == part.index

    return owed


SLICE_COLUMNS: Final = (
    "group", "topic", "partition", "slice", "claims", "holders", "last_holder", "position",
    "ended",
)  # fmt: skip
"""`slice_summary`'s columns: per slice, its claim intervals, every client that held it, the
latest holder, its last committed position and how its latest interval ended."""


def slice_summary(claims: Iterable[Row]) -> list[Row]:
    """One row per slice of a partition that was claimed (settled ``claims`` rows; whole
    partitions are left out), a partition's slices together, by index."""
    by_slice: dict[tuple[str, str, int, Slice], list[Row]] = defaultdict(list)
    for row in claims:
        data, part = split_topic(str(row[_C["topic"]]))
        if part is not None:
            by_slice[(str(row[_C["group"]]), data, int(row[_C["partition"]]), part)].append(row)
    out: list[Row] = []
    order = sorted(
        by_slice, key=lambda k: (k[0], k[1], k[2], k[3].ordering, k[3].count, k[3].index)
    )
    for group, topic, partition, part in order:
        rows = sorted(by_slice[(group, topic, partition, part)], key=lambda r: r[_C["start_ms"]])
        last = rows[-1]
        positions = [r[_C["last_offset"]] for r in rows if r[_C["last_offset"]] is not None]
        holders = ", ".join(sorted({str(r[_C["client_id"]]) for r in rows}))
        out.append((
            group, topic, partition, part.name, len(rows), holders, last[_C["client_id"]],
            positions[-1] if positions else None, last[_C["ended"]],
        ))  # fmt: skip
    return out
