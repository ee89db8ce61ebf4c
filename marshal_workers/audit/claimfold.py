"""The fold per claim: each claim's records folded apart, with what its partition's fold knew.

Theory of operation
-------------------
`rationalizer.fold` takes a coordination partition's records in offset order, and its state
is almost all per claim (``claims``, ``poison``, the ``keys`` cache) or per group (``pauses``,
``group_settings``). What crosses claims is the partition's: the clamped log time, the next
offset, and the gap bookkeeping (``gap_seen``, ``gap_time``, the claims folded since the
newest gap). So the records of one claim, with its group's pauses and settings on that
partition, give exactly the events the partition fold gives them, provided each record comes
with three facts about the whole partition there (`placed.annotate`; Spark computes the same
in the JVM, `spark_jobs.annotated`):

- its log time: the running greatest valid timestamp (`rationalizer._advance`'s clamp);
- the newest record at or before it that follows a gap (an offset past the previous one + 1,
  or a first offset above 0), and the log time there;
- whether it is *behind* (its offset repeats the previous one's: refused).

The driver (`ClaimFold`) sets the world's next offset and log time from them, so no false gap
is seen and the clamp is the partition's, and when a gap came since its own previous record it
calls `rationalizer.note_gap` with the newest gap's time. The partition fold marked the claim
(if folded since the gap before) uncertain at the *first* of those gaps, and marks it again
with the newest gap's time at its next claim record (`_behind_gap(state, world.gap_time)` in
`rationalizer.fold`); ``last_activity`` is a maximum, so both folds agree from that record on.
The only records that read a claim without that second mark are its poison records, and they
read only that it is uncertain (`recordfailures`' uncertain rule reads no time), which both
folds say. So every event is the same, though an uncertain claim's ``last_activity`` may be
later here between a poison record and the claim's next record.

Where each record goes (`route`, on the value's '/'-separated fields, as Spark does with SQL):

- a claim message or a poison record (type in field 0; group, topic, partition in 5-7): the
  fold of ``(coordination partition, group, topic, partition)``;
- a pause (``ReleaseGroup``) or group settings (``GroupSettings``, group in field 5): the
  group's own fold ``(partition, group)``, which alone reports them, and *as context* every
  claim fold of that group on that partition: folded for the state they set, never reported
  (they are few, a handful per pause or change, so each fold gets them all, `Context`). They
  travel annotated, and each is folded at its partition's log time there: whether a placed
  group's changed settings are accepted depends on the writer's pause being in force at that
  log time, and a settings record stamped before the clamp (log time stepping back) was once
  judged at the claim's own last log time, under a pause that had ended (accepted here,
  refused by the partition fold: every later record of the claim misplaced). Gaps are not
  noted at a context record: the next own record learns of them;
- anything else (the pinned count, unknown types, garbage): ``(partition,)``.

A record whose fields are not what routing reads is malformed wherever it goes, and whether a
record is malformed never depends on the fold's state, so such a record may go anywhere. The
fold per claim then reports every record exactly once, with the partition fold's verdict;
``tests/unit/audit/test_audit_claimfold.py`` holds it to that on compacted logs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

from marshal_workers.audit import arrow
from marshal_workers.audit.fold import FoldSettings, Worlds
from marshal_workers.audit.placed import Placed, annotate, place
from marshal_workers.audit.tables import Row, Tables
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.rationalizer import note_gap
from marshal_workers.protocol.wire import CoordRecord

CLAIM_TYPES: Final = (
    "Heartbeat", "ClaimingPartition", "ReleasingPartition", "ClaimingMessages",
    "RecordFailed", "PoisonResolved",
)  # fmt: skip
"""Record types about one claim: group, topic and partition in fields 5, 6 and 7."""
GROUP_TYPES: Final = ("ReleaseGroup", "GroupSettings")
"""Record types about one group (field 5) that every claim of the group reads."""

_CLAIM_KINDS: Final = frozenset(t.encode() for t in CLAIM_TYPES)
_GROUP_KINDS: Final = frozenset(t.encode() for t in GROUP_TYPES)

Route = tuple[str | None, str | None, int | None]  # group, topic, partition
FoldKey = tuple[int, str | None, str | None, int | None]  # coordination partition + `Route`


def route(value: bytes | None) -> Route:
    """Which fold a record value goes to: (group, topic, partition) for a claim's record,
    (group, None, None) for a group's, (None, None, None) for the rest."""
    if value is None:
        return None, None, None
    fields = value.split(b"/", 8)
    kind = fields[0]
    if kind in _CLAIM_KINDS and len(fields) >= 8:
        part = fields[7]
        if part.isdigit() and len(part) <= 18:
            return _text(fields[5]), _text(fields[6]), int(part)
    elif kind in _GROUP_KINDS and len(fields) >= 6:
        return _text(fields[5]), None, None
    return None, None, None


def _text(field: bytes) -> str:
    return field.decode("utf-8", "replace")


Context = Mapping[tuple[int, str], Sequence[Placed]]
"""Each group's own records (pauses, settings) per coordination partition, in offset order,
annotated (`annotate`): few (a handful per pause or change), so they travel to every fold in
full."""


def is_group_record(value: bytes | None) -> bool:
    """Whether a record value is (meant to be) a group's: a pause or settings."""
    return value is not None and value.startswith((b"ReleaseGroup/", b"GroupSettings/"))


def context_of(placed: Iterable[Placed]) -> Context:
    """The groups' records among annotated records (of any partitions), by coordination
    partition and group."""
    out: dict[tuple[int, str], list[Placed]] = {}
    for p in placed:
        group, topic, _ = route(p.record.value)
        if group is not None and topic is None:
            out.setdefault((p.record.partition, group), []).append(p)
    for ps in out.values():
        ps.sort(key=lambda p: p.record.offset)  # (stable: copies of an offset keep their order)
    return out


def folds(records: Iterable[CoordRecord]) -> tuple[dict[FoldKey, list[Placed]], Context]:
    """Every fold's own records in offset order, and the groups' records each claim's fold
    also takes: what Spark builds with its window and shuffle (for tests and one process)."""
    records = list(records)
    by_partition: dict[int, list[CoordRecord]] = {}
    for r in records:
        by_partition.setdefault(r.partition, []).append(r)
    out: dict[FoldKey, list[Placed]] = {}
    groups: list[Placed] = []
    for partition, rs in sorted(by_partition.items()):
        for placed in annotate(sorted(rs, key=lambda r: r.offset)):
            group, topic, part = route(placed.record.value)
            out.setdefault((partition, group, topic, part), []).append(placed)
            if group is not None and topic is None:
                groups.append(placed)
    return out, context_of(groups)


class ClaimFold:
    """One fold on one coordination partition: of a claim (with its group's records as
    context), of a group's own records, or of the rest (see module doc)."""

    def __init__(self, settings: FoldSettings, key: FoldKey, context: Context) -> None:
        partition, group, topic, _ = key
        self.worlds = Worlds(settings, partition)
        self.tables = Tables(partition, settings.config.heartbeat_interval_ms, settings.window)
        self.tables.log_gap = False
        self._worlds = list(self.worlds.worlds.values())
        self._last_offset = -1  # of the last own record folded
        self._context: Sequence[Placed] = ()
        if topic is not None and group is not None:
            self._context = context.get((partition, group), ())
        self._next = 0  # the next context record to fold

    def fold(self, placed: Placed) -> ev.Event:
        """Fold this fold's next own record (in offset order), after the context records in
        front of it: its event, which the tables take."""
        record = placed.record
        offset = record.offset
        ahead, i = self._context, self._next
        while i < len(ahead) and ahead[i].record.offset < offset:
            self._fold_context(ahead[i])
            i += 1
        self._next = i
        # The world as the partition fold has it just before this record (see module doc).
        gap, gap_time = placed.gap_offset, placed.gap_time
        new_gap = gap is not None and gap > self._last_offset  # a gap since the last record
        next_offset = offset + 1 if placed.behind else offset
        for world in self._worlds:
            world.next_offset, world.log_time = next_offset, placed.log_time
            if new_gap:
                assert gap_time is not None
                note_gap(world, gap_time)
        self._last_offset = offset
        tables = self.tables
        hb, event = self.worlds.verdict(record)
        if not self.worlds.single:  # as `Worlds.fold`: the interval of the record's group
            tables.hb = hb
        if gap is not None:
            tables.log_gap = True
        tables.add(event)
        return event

    def _fold_context(self, placed: Placed) -> None:
        """A group's record, for the state it sets: at its offset and its partition's log time
        there (no gap seen here: the next own record learns of the gaps), its verdict taken by
        the tables as context."""
        for world in self._worlds:
            place(world, placed)
        hb, event = self.worlds.verdict(placed.record)
        if not self.worlds.single:
            self.tables.hb = hb
        self.tables.context(event)

    def finish(self) -> dict[str, list[Row]]:
        """Every row of this fold (the context records after its last own one folded too)."""
        for placed in self._context[self._next :]:
            self._fold_context(placed)
        self._next = len(self._context)
        self.tables.finish()
        return self.tables.take()


def fold_by_claim(records: Iterable[CoordRecord], settings: FoldSettings) -> dict[str, list[Row]]:
    """Fold records of any partitions per claim and build every table (parts of the
    ``coordination`` and ``groups`` rows: `finalize` merges them)."""
    own, context = folds(records)
    out: dict[str, list[Row]] = {}
    for key, placed in own.items():
        one = ClaimFold(settings, key, context)
        for p in placed:
            one.fold(p)
        _take(out, one.finish())
    return out


FOLD_KEY: Final = ("partition", "fold_group", "fold_topic", "fold_part")
"""The columns of a fold's key in Spark's input (`spark_jobs.fold_by_claim`)."""


def fold_claim_batches(
    batches: Iterable[Any], settings: FoldSettings, context: Context
) -> Iterator[Any]:
    """Arrow batches of annotated records (`ANNOTATED`) sorted by fold key and offset ->
    packed table batches: what each Spark task runs (``mapInArrow``)."""
    current: FoldKey | None = None
    one: ClaimFold | None = None
    pending: dict[str, list[Row]] = {}
    count = 0
    for batch in batches:
        for key, placed in _placed_of(batch):
            if key != current:
                if one is not None:
                    count += _take(pending, one.finish())
                one, current = ClaimFold(settings, key, context), key
            assert one is not None
            one.fold(placed)
        if one is not None and count + one.tables.pending() >= settings.batch_rows:
            count += _take(pending, one.tables.take())
            yield arrow.packed_batch(pending)
            pending, count = {}, 0
    if one is not None:
        count += _take(pending, one.finish())
    if count:
        yield arrow.packed_batch(pending)


def _take(into: dict[str, list[Row]], rows: dict[str, list[Row]]) -> int:
    for name, more in rows.items():
        into.setdefault(name, []).extend(more)
    return sum(len(more) for more in rows.values())


PLACED: Final = (*arrow.RECORD_SCHEMA.names, "log_time", "gap_offset", "gap_time", "behind")
"""The columns of a `Placed` record: the record and its annotations."""
ANNOTATED: Final = (*PLACED, *FOLD_KEY[1:])
"""The columns `fold_claim_batches` reads: a placed record and its fold's key."""


def _placed_of(batch: Any) -> Iterator[tuple[FoldKey, Placed]]:
    cols = [batch.column(name).to_pylist() for name in ANNOTATED]
    for p, o, t, k, v, lt, go, gt, behind, g, tp, pt in zip(*cols, strict=True):
        yield (p, g, tp, pt), Placed(CoordRecord(p, o, t, k, v), lt, go, gt, behind)
