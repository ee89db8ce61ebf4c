"""The ledger against the claim intervals: did the processes obey the log? (pure)

A ledger row says a process (client id, pid) handled one record of a data partition with a
fencing token, between ``start`` and ``end`` (its host's clock, seconds). The checks, per
data partition and consumer group:

- **zombie_work**: no interval of the row's client with the row's token covers
  [start, end]: the work began before the claim was won or ended after the holder's right
  ended (release, or last valid heartbeat + 2*HB). Log times are whole milliseconds, so an
  interval covers up to its end + 1 ms. A token that no claim of that client carries is zombie
  work too, unless the coordination log had gaps (compaction): then the claim may simply be
  gone from the log, and the row is counted as *unverifiable* instead. A row that names its
  ``instance_id`` is covered only by that instance's intervals: under one token, a restarted
  client's new instance holds the claim from its takeover heartbeat on, and the old instance
  only until then (``replaced``), so either working in the other's time is zombie work. Rows
  of older ledgers, without an instance id, are covered by any instance of their client.
- **overlap**: rows of two processes of one group whose handling overlapped in time.
- **amo_duplicate** (AMO groups): an offset handled more than once, unless the pausing admin
  held the partition in between (``set-position`` rewound it on purpose).
- **alo_gap** (ALO groups): an offset below a committed position that no row handled. Each
  interval committed [its first heartbeated position, its last committed position); the
  pausing admin's intervals (set-position) are left out, and so are the records an operator
  skipped (`marshal-admin skip-record` on a poison record: not handled, on purpose; the
  ``poison`` table shows them). A group the ledger has no row of at all (a whole-topic audit
  given only some groups' ledgers) is not checked: its gaps would be every offset it committed,
  which says only that its ledger was not given. It is named instead (``unledgered``, the
  summary's ``groups_without_rows``). Where a row names no group (an older ledger), it may be
  any group's, and every group is checked. An AMO group without a row is named too: its
  losses are the log's at-risk ranges (`amo.log_losses`), not every record it reserved.

``tolerance_s`` widens every comparison of a ledger time with a log time or with another
host's time, for ledgers written on hosts whose clocks differ from the broker's.
The window (``--since``/``--until``) selects the rows checked for zombie work, overlaps and
duplicates; every row counts as handled for the ALO check.

Each row is checked within one group, against that group's claims only: the group the row
names. A token is an offset of the claim's coordination partition, and once groups are placed
each group's claims live on its own home partition, so two groups consuming one data partition
may hold it under the same token (even with the same client id): a token alone does not tell
whose claim a row was handled under, and a row matched to another group's claim could pass
for covered work. Older ledgers name no group: such a row is taken for the group of its
client's claims with its token, else of any claim with its token, else the partition's, but
only where exactly one group is there to take; where two are, it belongs to no group (and
``--group`` never reports it), and it is covered by any of their claims.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from marshal_workers.audit import slices
from marshal_workers.audit.amo import log_losses, sliced_ledger_losses
from marshal_workers.audit.schema import columns
from marshal_workers.audit.slices import Span, claim_topic
from marshal_workers.audit.tables import Row, Window
from marshal_workers.common.ledgerfile import LedgerRow
from marshal_workers.protocol.groupstatus import iso_ms
from marshal_workers.protocol.slicing import Ordering, data_topic

_C = {name: i for i, name in enumerate(columns("claims"))}
_P = {name: i for i, name in enumerate(columns("poison"))}


def span_of(row: Row) -> Span:
    """The Span of a settled ``claims`` row."""
    return Span(*(row[_C[name]] for name in Span._fields))


@dataclass(frozen=True, slots=True)
class ClaimIndex:
    """Claim intervals by data partition, group modes, and which log had gaps.

    Every slice of a data partition is under the data topic's key: a span's own ``topic`` is
    its claim's topic field, which names the slice (`audit.slices`)."""

    spans: Mapping[tuple[str, int], Sequence[Span]]
    modes: Mapping[str, str]
    gapped_coord_partitions: frozenset[int]
    skipped: Mapping[tuple[str, str, int], frozenset[int]] = field(default_factory=dict)
    poisoned: Mapping[tuple[str, int], frozenset[int]] = field(default_factory=dict)
    reserved: Mapping[tuple[str, int], Sequence[Row]] = field(default_factory=dict)
    # the groups the ledger has rows of (None: unknown, or a row names no group: any group)
    ledgered_groups: frozenset[str] | None = None

    def with_ledger_groups(self, groups: Iterable[str | None]) -> ClaimIndex:
        """This index, knowing the groups the ledger's rows name (a None among them: an older
        row, which may be any group's)."""
        named = set(groups)
        if None in named:
            return replace(self, ledgered_groups=None)
        return replace(self, ledgered_groups=frozenset(g for g in named if g is not None))

    @classmethod
    def build(
        cls,
        claims: Iterable[Row],
        modes: Mapping[str, str],
        gapped: Iterable[int],
        poison: Iterable[Row] = (),
        reserved: Iterable[Row] = (),
    ) -> ClaimIndex:
        """Index settled ``claims`` rows; ``gapped``: coordination partitions with gaps;
        ``poison`` rows: the records an operator skipped, per (group, topic, partition);
        ``reserved``: the settled ``amo_reserved`` rows."""
        spans: dict[tuple[str, int], list[Span]] = defaultdict(list)
        for row in claims:
            s = span_of(row)
            spans[(data_topic(s.topic), s.partition)].append(s)
        skipped: dict[tuple[str, str, int], set[int]] = defaultdict(set)
        poisoned: dict[tuple[str, int], set[int]] = defaultdict(set)
        action, offset = _P["action"], _P["offset"]
        for row in poison:
            topic = data_topic(str(row[1]))
            poisoned[(topic, int(row[2]))].add(int(row[offset]))
            if row[action] == "skipped":
                skipped[(str(row[0]), topic, int(row[2]))].add(int(row[offset]))
        frozen = {k: frozenset(v) for k, v in skipped.items()}
        amo: dict[tuple[str, int], list[Row]] = defaultdict(list)
        for row in reserved:  # `amo_reserved` rows: AMO losses are what no ledger row handled
            amo[(data_topic(str(row[1])), int(row[2]))].append(row)
        bad = {k: frozenset(v) for k, v in poisoned.items()}
        return cls(dict(spans), dict(modes), frozenset(gapped), frozen, bad, dict(amo))


@dataclass(slots=True)
class CheckStats:
    """What the checks looked at (violations are returned as rows)."""

    ledger_rows: int = 0
    incomplete_lines: int = 0
    checked: int = 0
    unverifiable: int = 0
    alo_redeliveries: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    amo_losses: list[list[Any]] = field(default_factory=list, compare=False)  # `amo` rows
    unledgered: list[str] = field(default_factory=list)  # groups without a ledger row

    def add(self, other: CheckStats) -> None:
        """Add another partition's counts to these."""
        self.ledger_rows += other.ledger_rows
        self.incomplete_lines += other.incomplete_lines
        self.checked += other.checked
        self.unverifiable += other.unverifiable
        self.alo_redeliveries += other.alo_redeliveries
        for kind, n in other.by_kind.items():
            self.by_kind[kind] = self.by_kind.get(kind, 0) + n
        self.amo_losses.extend(other.amo_losses)
        self.unledgered = sorted({*self.unledgered, *other.unledgered})


def _violation(
    kind: str, group: str | None, row: LedgerRow, detail: str, evidence: dict[str, object]
) -> Row:
    text = json.dumps(evidence, sort_keys=True)
    return (kind, group, row.topic, row.partition, row.offset, row.client_id, row.pid,
            row.token, row.start, row.end, detail, text, row.slice)  # fmt: skip


def _iso_s(seconds: float) -> str | None:
    """A ledger time (Unix seconds) as ISO-8601 UTC with milliseconds."""
    return iso_ms(round(seconds * 1000))


def _who(row: LedgerRow) -> str:
    where = "" if row.slice is None else f" (slice {row.slice})"
    return f"{row.topic}[{row.partition}]@{row.offset}{where} by {row.client_id} pid {row.pid}"


def _owner(row: LedgerRow, spans: Sequence[Span], clients: Sequence[Span]) -> str:
    """Whose the row's token is, when no interval of the row's instance carries it."""
    if clients:
        held = ", ".join(sorted({s.instance_id for s in clients}))
        return (
            f"is {row.client_id}'s claim on this partition, held by instance {held}, "
            f"never by instance {row.instance_id}"
        )
    if spans:
        return f"is {spans[0].client_id}'s claim on this partition"
    return "matches no claim on this partition"


class _Partition:
    """The checks of one data partition."""

    def __init__(
        self, topic: str, partition: int, index: ClaimIndex, tolerance_s: float, window: Window
    ) -> None:
        self.topic, self.partition, self.tol, self.window = topic, partition, tolerance_s, window
        self.spans = index.spans.get((topic, partition), ())
        self.ledgered = index.ledgered_groups
        # A token is one claim's only within its group and claim key: placed groups' tokens
        # are offsets of different coordination partitions, and slices of a partition may
        # share one. Each group is also indexed under None: a row naming none sees them all.
        self.by_token: dict[tuple[str | None, str, int], list[Span]] = defaultdict(list)
        coords: dict[tuple[str | None, str], set[int]] = defaultdict(set)
        for s in self.spans:
            for group in (s.group, None):
                self.by_token[(group, s.topic, s.token)].append(s)
                coords[(group, s.topic)].add(s.coord_partition)
        self.gapped_coords = index.gapped_coord_partitions
        self.coords = dict(coords)
        self.skipped = {
            g: offsets for (g, t, p), offsets in index.skipped.items()
            if (t, p) == (topic, partition)
        }  # fmt: skip
        self.poisoned = index.poisoned.get((topic, partition), frozenset())
        self.violations: list[Row] = []
        self.stats = CheckStats()

    def _gapped(self, group: str | None, claim: str) -> bool:
        """Whether the coordination log of ``group``'s ``claim`` (a topic field) had gaps
        (group None: any group's)."""
        coord = self.coords.get((group, claim), set())
        return bool(coord & self.gapped_coords) or (not coord and bool(self.gapped_coords))

    def _in_window(self, row: LedgerRow) -> bool:
        return self.window.wants_time(int(row.start * 1000))

    def _group_of(self, row: LedgerRow) -> str | None:
        """The row's group: the one it names, else (an older ledger) the only group its
        client's claims with its token, any claim with its token, or the partition's claims
        have; None where two groups would do (see the module doc)."""
        if row.group is not None:
            return row.group
        tokens = self.by_token.get((None, claim_topic(row), row.token), [])
        clients = {s.group for s in tokens if s.client_id == row.client_id}
        for groups in (clients, {s.group for s in tokens}, {s.group for s in self.spans}):
            if groups:
                return groups.pop() if len(groups) == 1 else None
        return None

    def zombie(self, row: LedgerRow) -> str | None:
        """Check one row against its group's claims; return the row's group (None if nothing
        tells it)."""
        group = self._group_of(row)
        spans = self.by_token.get((group, claim_topic(row), row.token), [])
        clients = [s for s in spans if s.client_id == row.client_id]
        if not (self._in_window(row) and self.window.wants_group(group)):
            return group
        self.stats.checked += 1
        mine = [s for s in clients if row.instance_id in (None, s.instance_id)]
        if not mine:
            if not spans and self._gapped(group, claim_topic(row)):
                self.stats.unverifiable += 1
                return group
            detail = f"{_who(row)}: token {row.token} {_owner(row, spans, clients)}"
            self._add("zombie_work", group, row, detail, spans)
            return group
        start_ms = min(s.start_ms for s in mine)
        ends = [s.end_ms for s in mine]
        end_ms = None if None in ends else max(e for e in ends if e is not None)
        early = row.start < start_ms / 1000 - self.tol
        late = end_ms is not None and row.end > (end_ms + 1) / 1000 + self.tol
        if early or late:
            until = "still held" if end_ms is None else f"until {iso_ms(end_ms)}"
            whose = "" if row.instance_id is None else f" (instance {row.instance_id})"
            detail = (
                f"{_who(row)}: handled {_iso_s(row.start)} to {_iso_s(row.end)} but claim "
                f"token {row.token}{whose} was valid from {iso_ms(start_ms)} {until}"
            )
            self._add("zombie_work", group, row, detail, mine)
        return group

    def _add(
        self,
        kind: str,
        group: str | None,
        row: LedgerRow,
        detail: str,
        spans: Sequence[Span],
        rows: Sequence[LedgerRow] = (),
    ) -> None:
        evidence: dict[str, object] = {
            "ledger": [r._asdict() for r in (rows or [row])],
            "claims": [s.as_json() for s in spans],
        }
        self.violations.append(_violation(kind, group, row, detail, evidence))
        self.stats.by_kind[kind] = self.stats.by_kind.get(kind, 0) + 1

    def overlaps(self, group: str | None, rows: Sequence[LedgerRow]) -> None:
        """Rows of one claim (a partition or one slice of it) from different processes whose
        handling overlapped (rows sorted by start)."""
        active: list[LedgerRow] = []
        for row in rows:
            active = [a for a in active if a.end - self.tol > row.start]
            if self._in_window(row):
                for a in active:
                    if (a.client_id, a.pid) != (row.client_id, row.pid):
                        overlap = min(a.end, row.end) - row.start
                        where = "partition" if row.slice is None else "slice"
                        detail = (
                            f"{_who(row)} overlapped {a.client_id} pid {a.pid} (offset "
                            f"{a.offset}) by {overlap:.3f}s on one {where}"
                        )
                        self._add(
                            "overlap", group, row, detail, self._spans_of(group, a, row), (a, row)
                        )
            active.append(row)

    def _spans_of(self, group: str | None, *rows: LedgerRow) -> list[Span]:
        """The claims of ``group`` (None: any group's) the rows were handled under."""
        claims = {(claim_topic(r), r.token) for r in rows}
        return [s for s in self.spans if (s.topic, s.token) in claims and group in (None, s.group)]

    def sliced(self, group: str | None, rows: Sequence[LedgerRow], key: bool) -> None:
        """The checks of slices (`audit.slices`): wrong_slice, offset_overlap, key_order."""
        for row, part in slices.wrong_slice(rows):
            if self._in_window(row):
                detail = f"{_who(row)}: slice {part.name} does not take this record ({_why(row)})"
                self._add("wrong_slice", group, row, detail, self._spans_of(group, row))
        for a, b in slices.offset_overlaps(rows, self.tol):
            if self._in_window(b):
                overlap = min(a.end, b.end) - b.start
                detail = (
                    f"{_who(b)} overlapped {a.client_id} pid {a.pid} (slice {a.slice}) on the "
                    f"same offset by {overlap:.3f}s: two holders of one record at once"
                )
                self._add("offset_overlap", group, b, detail, self._spans_of(group, a, b), (a, b))
        if not key:
            return
        for row, before, why in slices.key_order(rows, self.tol, self.poisoned):
            if self._in_window(row):
                detail = (
                    f"{_who(row)}: key (crc32 {row.key_hash}) handled {why}: offset "
                    f"{before.offset} by {before.client_id} pid {before.pid}"
                )
                self._add("key_order", group, row, detail, self._spans_of(group, before, row),
                          (before, row))  # fmt: skip

    def duplicates(self, group: str | None, rows: Sequence[LedgerRow], amo: bool) -> None:
        """AMO: offsets handled more than once; ALO: count them as redeliveries."""
        seen: dict[int, list[LedgerRow]] = defaultdict(list)
        for row in rows:
            seen[row.offset].append(row)
        for offset, found in sorted(seen.items()):
            if len(found) < 2:
                continue
            if not amo:
                self.stats.alo_redeliveries += len(found) - 1
                continue
            again = [b for a, b in itertools.pairwise(found) if not self._rewound(group, a, b)]
            if not again:
                continue
            later = again[0]
            if not self._in_window(later):
                continue
            detail = f"{_who(later)}: offset {offset} handled {len(found)} times in an AMO group"
            self._add("amo_duplicate", group, later, detail, self._spans_of(group, *found), found)

    def _rewound(self, group: str | None, first: LedgerRow, second: LedgerRow) -> bool:
        """Whether the pausing admin held the partition between two handlings (set-position)."""
        return any(
            s.by_admin and s.group == group and first.start <= s.start_ms / 1000 <= second.start
            for s in self.spans
        )

    def gaps(self, group: str, rows: Sequence[LedgerRow]) -> None:
        """ALO: offsets below a committed position that no row handled (per slice: the
        offsets its claims committed that it takes, `slices.lanes`)."""
        committed = [
            s for s in self.spans
            if s.group == group and not s.by_admin and s.first_offset is not None
            and s.last_offset is not None and s.last_offset > s.first_offset
        ]  # fmt: skip
        if not committed:
            return
        if self.ledgered is not None and group not in self.ledgered:  # (module doc)
            self.stats.unledgered = sorted({*self.stats.unledgered, group})
            return
        handled = {r.offset for r in rows} | self.skipped.get(group, frozenset())
        for lane in slices.lanes(committed):
            for lo, hi, spans in lane.ranges:
                run: list[int] = []  # the lane's missing offsets in a row: first, last, count
                for offset in range(lo, hi):
                    if not lane.owed(offset):
                        continue
                    if offset not in handled:
                        run = [run[0], offset, run[2] + 1] if run else [offset, offset, 1]
                    elif run:
                        self._gap(group, lane, run, hi, spans)
                        run = []
                if run:
                    self._gap(group, lane, run, hi, spans)

    def _gap(
        self, group: str, lane: slices.Lane, run: list[int], committed: int, spans: list[Span]
    ) -> None:
        first, last, count = run
        below = f"the committed position {committed}"
        if lane.name is not None and lane.name.startswith("key."):  # a whole key cut
            below = f"every key slice's committed position ({lane.name}: all at {committed}+)"
        elif lane.name is not None:
            below = f"{below} of slice {lane.name}"
        detail = (
            f"{self.topic}[{self.partition}]: offsets {first}..{last} ({count}) below "
            f"{below} were never handled (ALO group {group})"
        )
        evidence = json.dumps({"ledger": [], "claims": [s.as_json() for s in spans]})
        self.violations.append(
            ("alo_gap", group, self.topic, self.partition, first,
             None, None, None, None, None, detail, evidence, lane.name)
        )  # fmt: skip
        self.stats.by_kind["alo_gap"] = self.stats.by_kind.get("alo_gap", 0) + 1


def _why(row: LedgerRow) -> str:
    """What decided a row's slice: its key's hash, or its offset."""
    part = slices.slice_of(row)
    if part is not None and part.ordering is Ordering.KEY and row.key_hash is not None:
        return f"key crc32 {row.key_hash} mod {part.count} = {row.key_hash % part.count}"
    count = part.count if part is not None else 1
    return f"offset {row.offset} mod {count} = {row.offset % count}"


def unledgered_note(groups: Sequence[str]) -> str:
    """The line of an audit whose ledger has no row of these groups."""
    return (
        f"no ledger row of group(s) {', '.join(groups)}: ALO not checked for gaps, AMO losses "
        "only as the log shows them at risk (give every member's ledger of a group to check it)"
    )


def check_partition(
    topic: str,
    partition: int,
    rows: Sequence[LedgerRow],
    index: ClaimIndex,
    tolerance_s: float = 0.0,
    window: Window | None = None,
) -> tuple[list[Row], CheckStats]:
    """Every check on the ledger rows of one data partition (sorted by start)."""
    p = _Partition(topic, partition, index, tolerance_s, window or Window())
    p.stats.ledger_rows = len(rows)
    by_group: dict[str | None, list[LedgerRow]] = defaultdict(list)
    for row in rows:
        group = p.zombie(row)
        if p.window.wants_group(group):
            by_group[group].append(row)
    for group, group_rows in by_group.items():
        amo = index.modes.get(group or "", "alo") == "amo"
        by_claim: dict[str, list[LedgerRow]] = defaultdict(list)
        for row in group_rows:
            by_claim[claim_topic(row)].append(row)
        for claim_rows in by_claim.values():
            p.overlaps(group, claim_rows)
        cut = {slices.slice_of(r) for r in group_rows} - {None}
        if cut:
            p.sliced(group, group_rows, any(c.ordering is Ordering.KEY for c in cut if c))
        p.duplicates(group, group_rows, amo)
        if group is not None and not amo:
            p.gaps(group, group_rows)
    for group in {s.group for s in p.spans} - set(by_group):
        if p.window.wants_group(group) and index.modes.get(group, "alo") == "alo":
            p.gaps(group, [])
    reserved = index.reserved.get((topic, partition), ())
    if reserved:
        # A group the ledger has no row of is judged from the log alone, as without a ledger:
        # checked against rows it has none of, every record it reserved would pass for lost.
        known = index.ledgered_groups
        theirs = [r for r in reserved if known is not None and r[0] not in known]
        mine = [r for r in reserved if known is None or r[0] in known]
        handled = {(r.group, r.offset) for r in rows}
        losses = [*sliced_ledger_losses(mine, handled), *log_losses(theirs)]
        p.stats.amo_losses = [list(loss) for loss in losses if p.window.wants_group(loss[0])]
        unledgered = {str(r[0]) for r in theirs if p.window.wants_group(r[0])}
        if unledgered:
            p.stats.unledgered = sorted({*p.stats.unledgered, *unledgered})
    return p.violations, p.stats


def check_unledgered(
    index: ClaimIndex, ledgered: Iterable[tuple[str, int]], window: Window | None = None
) -> tuple[list[Row], CheckStats]:
    """The ALO check on claimed partitions that have no ledger row at all."""
    seen = set(ledgered)
    violations: list[Row] = []
    stats = CheckStats()
    for topic, partition in sorted(set(index.spans) - seen):
        found, part_stats = check_partition(topic, partition, [], index, 0.0, window)
        violations.extend(found)
        stats.add(part_stats)
    return violations, stats


def check_ledger(
    rows: Iterable[LedgerRow],
    index: ClaimIndex,
    tolerance_s: float = 0.0,
    window: Window | None = None,
) -> tuple[list[Row], CheckStats]:
    """Every check on a whole ledger (the single-process path; Spark runs `check_partition`)."""
    by_partition: dict[tuple[str, int], list[LedgerRow]] = defaultdict(list)
    for row in rows:
        by_partition[(row.topic, row.partition)].append(row)
    index = index.with_ledger_groups(r.group for rs in by_partition.values() for r in rs)
    violations: list[Row] = []
    stats = CheckStats()
    for (topic, partition), part_rows in sorted(by_partition.items()):
        part_rows.sort(key=lambda r: (r.start, r.offset))
        found, part_stats = check_partition(topic, partition, part_rows, index, tolerance_s, window)
        violations.extend(found)
        stats.add(part_stats)
    found, part_stats = check_unledgered(index, by_partition, window)
    violations.extend(found)
    stats.add(part_stats)
    return violations, stats
