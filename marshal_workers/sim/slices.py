"""The simulator's ordering modes: slices of a data partition, the records' keys, and the
invariants that hold per *data* offset.

With ``--ordering key|unordered --workers-per-partition N`` each data partition is cut into N
slices (`protocol.slicing`), each claimed under a claim key of its own. The members see only
more claim keys; the simulator keeps one `DataPartition` (records, poison) per data partition,
shared by its slices, and a child of a slice handles only the offsets its spec's slice takes
(`ChildSpec.slice`, as the member's core gave it: a core that forgot the slice shows up here).

Simulated records have a deterministic key (`record_key`): ``k{offset % KEYS}``, except every
`KEYLESS_EVERY`-th record, which has none. With 3 key slices the keys fall unevenly (crc32:
two, one, two keys), and a slice with few keys still moves through its keyless records.

The reference cut (`SimCut`) is the protocol's own (`Slice.takes`) on those keys. `Checker`
judges a slice's ALO and AMO positions by the offsets the reference cut gives the slice
(`SimCut.owed`); `SliceChecker` checks what holds per data offset, across slices:

- ``slice_respected``: a data offset is handled only by a child of the slice that takes it;
- ``offset_one_holder``: no data offset is handled by two children whose handling of the
  partition (first record to last) overlaps: two holders at once;
- ``amo_no_double_grant`` (across slices): in AMO no data offset is handled twice, whichever
  claims its handlers held;
- ``key_order`` (ordering ``key``): for each key of a data partition,

  1. never two at once: no two children's handling of the key (first record of the key to
     last) overlaps;
  2. a child handles the key's records in strictly increasing offset order;
  3. the key's *first* handlings are in offset order: no record of the key is handled for the
     first time after a later record of the key was handled.

  What (3) allows is ALO's redelivery and nothing else. After a crash, a kill or a stop whose
  last heartbeat lags, the slice's next holder resumes at the slice's committed position, which
  may be below the records its previous holder handled: it handles again, in order, a suffix of
  what was handled (how long a suffix is `alo_rehandle_bound`'s business), then goes on with
  records never handled. A sink that keeps, per key, the highest offset it has applied sees
  every key's records in order; one that applies every delivery sees a run of repeats, in order,
  and never an older record after a newer one it had not seen before. A resume position above a
  record never handled would break (3) if that record were handled later, and is a skip
  (``alo_no_skip``) if it never is. In AMO there are no repeats (``amo_no_double_grant``), so
  (3) says a key's records are handled in offset order, gaps being AMO's losses.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.slicing import WHOLE, Ordering, Slice, Slicing
from marshal_workers.protocol.slicing import split_topic as _split_topic
from marshal_workers.protocol.wire import ClaimKey

KEYS = 5  # distinct record keys per data partition
KEYLESS_EVERY = 7  # every 7th record has no key (a key slice takes it by offset)

# a claim's topic field parsed once per run's few names, not once per record handled
split_topic = functools.lru_cache(maxsize=1024)(_split_topic)

SLICE_INVARIANTS = ("slice_respected", "offset_one_holder", "key_order")

Violation = Callable[[str, str, "float | None"], None]


def record_key(offset: int) -> bytes | None:
    """The key of the simulated record at ``offset`` (the same in every data partition)."""
    if offset % KEYLESS_EVERY == KEYLESS_EVERY - 1:
        return None
    return f"k{offset % KEYS}".encode()


def child_filter(part: Slice | None) -> Callable[[int], bool] | None:
    """What a child whose spec names ``part`` handles: None for a whole partition."""
    if part is None:
        return None
    takes = part.takes
    return lambda offset: takes(offset, record_key(offset))


@dataclass(frozen=True, slots=True)
class SimCut:
    """A run's cut of its data partitions (the reference the checks judge by)."""

    slicing: Slicing = WHOLE

    @property
    def sliced(self) -> bool:
        """Whether claims are slices."""
        return self.slicing.sliced

    def claim_keys(self, group: str, topic: str, partitions: int) -> list[ClaimKey]:
        """Every claim of ``group`` on ``topic``'s partitions (as `supervisor.datatopics`)."""
        return [
            ClaimKey(group, name, p)
            for p in range(partitions)
            for name in self.slicing.claim_topics(topic)
        ]

    @staticmethod
    def data_key(key: ClaimKey) -> ClaimKey:
        """The data partition a claim is on (itself for a whole partition)."""
        topic, part = split_topic(key.topic)
        return key if part is None else ClaimKey(key.group, topic, key.partition)

    @staticmethod
    def takes(key: ClaimKey, offset: int) -> bool:
        """Whether the claim ``key`` covers the data offset ``offset``."""
        part = split_topic(key.topic)[1]
        return part is None or part.takes(offset, record_key(offset))

    def owner(self, data: ClaimKey, offset: int) -> ClaimKey:
        """The claim of ``data``'s partition that covers ``offset``."""
        for name in self.slicing.claim_topics(data.topic):
            key = ClaimKey(data.group, name, data.partition)
            if self.takes(key, offset):
                return key
        raise AssertionError(f"no slice of {data} takes {offset}")  # the cut covers every offset

    @staticmethod
    def owed(key: ClaimKey, start: int, end: int) -> Sequence[int]:
        """The data offsets in ``start``..``end`` (exclusive) the claim ``key`` covers."""
        part = split_topic(key.topic)[1]
        if part is None:
            return range(start, end)
        return [o for o in range(start, end) if part.takes(o, record_key(o))]


@dataclass(slots=True)
class _Span:
    first: float
    last: float


def _overlapping(spans: dict[str, _Span]) -> tuple[str, _Span, str, _Span] | None:
    """Two spans that overlap (the later-starting one and the one it overlaps), or None."""
    latest: tuple[str, _Span] | None = None
    for cid, span in sorted(spans.items(), key=lambda s: s[1].first):
        if latest is not None and span.first <= latest[1].last:
            return cid, span, latest[0], latest[1]
        if latest is None or span.last > latest[1].last:
            latest = (cid, span)
    return None


@dataclass
class SliceChecker:
    """What holds per data offset across the slices of a partition (see the module doc)."""

    cut: SimCut
    modes: dict[str, Mode]  # by group
    violation: Violation
    # per data partition: the handlers (child id, claim) of each offset, in order
    by_offset: dict[ClaimKey, dict[int, list[tuple[str, ClaimKey]]]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    spans: dict[ClaimKey, dict[str, _Span]] = field(default_factory=lambda: defaultdict(dict))
    # key order: per (data partition, record key) the highest offset handled, and each child's
    # last offset and span on the key
    top: dict[tuple[ClaimKey, bytes], int] = field(default_factory=dict)
    last: dict[tuple[ClaimKey, bytes, str], int] = field(default_factory=dict)
    key_spans: dict[tuple[ClaimKey, bytes], dict[str, _Span]] = field(
        default_factory=lambda: defaultdict(dict)
    )

    def handled(self, cid: str, key: ClaimKey, offset: int, t: float) -> None:
        """The child ``cid`` of claim ``key`` handled data offset ``offset`` at ``t``."""
        data = self.cut.data_key(key)
        where = f"{data.topic}/{data.partition} offset {offset}"
        if not self.cut.takes(key, offset):
            owner = self.cut.owner(data, offset)
            self.violation(
                "slice_respected", f"{where} (of {owner.topic}) handled by {cid} of {key.topic}", t
            )
        _stretch(self.spans[data], cid, t)
        handlers = self.by_offset[data].setdefault(offset, [])
        if self.modes[key.group] is Mode.AMO and any(k != key for _, k in handlers):
            self.violation(
                "amo_no_double_grant",
                f"{where} handled by {cid} of {key.topic} after {handlers[0][0]}",
                t,
            )
        first = not handlers
        handlers.append((cid, key))
        if self.cut.slicing.ordering is Ordering.KEY:
            self._key_order(data, cid, offset, t, first)

    def _key_order(self, data: ClaimKey, cid: str, offset: int, t: float, first: bool) -> None:
        rk = record_key(offset)
        if rk is None:
            return
        where = f"{data.topic}/{data.partition} key {rk.decode()} offset {offset}"
        mine = self.last.get((data, rk, cid))
        if mine is not None and offset <= mine:
            self.violation("key_order", f"{where} handled by {cid} after its {mine}", t)
        self.last[(data, rk, cid)] = offset
        top = self.top.get((data, rk))
        if top is not None and offset < top and first:
            self.violation(
                "key_order", f"{where} handled for the first time after {top}, by {cid}", t
            )
        if top is None or offset > top:
            self.top[(data, rk)] = offset
        _stretch(self.key_spans[(data, rk)], cid, t)

    def finish(self) -> None:
        """The checks made at the end of a run: two holders of an offset, or of a key, at
        once."""
        for data, offsets in self.by_offset.items():
            spans = self.spans[data]
            for offset, handlers in offsets.items():
                cids = {cid for cid, _ in handlers}
                if len(cids) < 2:
                    continue
                found = _overlapping({cid: spans[cid] for cid in cids})
                if found is not None:
                    late, span, early, other = found
                    self.violation(
                        "offset_one_holder",
                        f"{data.topic}/{data.partition} offset {offset} handled by {late} (from "
                        f"{span.first:.3f}) while {early} handled the partition (until "
                        f"{other.last:.3f})",
                        span.first,
                    )
                    break  # one per partition is enough
        for (data, rk), spans in self.key_spans.items():
            found = _overlapping(spans)
            if found is not None:
                late, span, early, other = found
                self.violation(
                    "key_order",
                    f"{data.topic}/{data.partition} key {rk.decode()}: {late} handled it from "
                    f"{span.first:.3f} while {early} handled it until {other.last:.3f}",
                    span.first,
                )


def _stretch(spans: dict[str, _Span], cid: str, t: float) -> None:
    span = spans.get(cid)
    if span is None:
        spans[cid] = _Span(t, t)
    else:
        span.last = t


def describe(cut: SimCut) -> dict[str, Any]:
    """The cut, for the JSON summary."""
    return {"ordering": cut.slicing.ordering.value, "workers_per_partition": cut.slicing.count}
