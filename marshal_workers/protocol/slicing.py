"""Ordering modes: how many workers share one data partition, and which records each takes.

Pure: no I/O, no clock. A group's *ordering* decides what one claim covers:

- ``partition`` (the default, Marshal Go's): a claim is a whole data partition, one worker.
- ``key``: the partition is cut into N *key slices*; a record belongs to slice
  ``crc32(key) mod N`` (a record without a key to slice ``offset mod N``). Records of one key
  are all in one slice, and a slice has one holder at a time, handling in offset order: per-key
  order holds across the fleet.
- ``unordered``: N *offset stripes*; a record belongs to stripe ``offset mod N``. Every stripe
  gets an equal share of any backlog, so no worker idles while another holds it, and a slow
  record holds up only its own stripe.

Each slice is claimed exactly as a partition is, under a claim key of its own whose topic
field names the data topic and the slice: ``orders+key.3of8`` is slice 3 of 8 of a ``key``
group on topic ``orders`` (Kafka topic names never contain ``+``, so no real topic can look
like a slice). Every rule of the rationalizer (log time, lease, fencing token, position,
reservations, compaction, pauses, poison counts) therefore applies to a slice unchanged, and
a slice's position means what a partition's does: every record of the slice below it is
handled (ALO) or reserved (AMO); records of other slices below it are simply not this slice's.
Each slice's worker takes the partition's records and keeps its own (fed by the host's reader
of the partition, `child.reader`, or reading it itself): no coordination record per record or
per range.

Safety across slices needs every member of a group to cut the same way: the ordering and N are
group settings recorded in the log (`metadata.GroupSettings`); a member whose own differ is
refused, as for the heartbeat interval.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class Ordering(StrEnum):
    """What a claim covers, and so what order records are handled in."""

    PARTITION = "partition"
    KEY = "key"
    UNORDERED = "unordered"


MAX_SLICES: Final = 1024  # the most workers one partition may be cut for


@dataclass(frozen=True, slots=True)
class Slicing:
    """A group's cut: ``ordering`` and ``count`` slices per partition (1 for ``partition``)."""

    ordering: Ordering = Ordering.PARTITION
    count: int = 1

    def __post_init__(self) -> None:
        if self.ordering is Ordering.PARTITION and self.count != 1:
            raise ValueError(
                f"workers_per_partition={self.count} needs ordering key or unordered: with "
                "ordering partition one worker holds a whole partition"
            )
        if not 1 <= self.count <= MAX_SLICES:
            raise ValueError(f"workers_per_partition must be 1 to {MAX_SLICES}, not {self.count}")

    @property
    def sliced(self) -> bool:
        """Whether claims are on slices rather than on whole partitions."""
        return self.ordering is not Ordering.PARTITION

    def claim_topics(self, topic: str) -> list[str]:
        """The topic fields of the claims on each partition of ``topic``."""
        if not self.sliced:
            return [topic]
        return [slice_topic(topic, Slice(self.ordering, self.count, i)) for i in range(self.count)]


WHOLE: Final = Slicing()  # ordering partition: a claim is a whole partition


@dataclass(frozen=True, slots=True)
class Slice:
    """Slice ``index`` of ``count`` of a partition, cut by ``ordering``."""

    ordering: Ordering
    count: int
    index: int

    @property
    def name(self) -> str:
        """How claims and handlers name the slice: ``key.3of8``."""
        return f"{self.ordering.value}.{self.index}of{self.count}"

    def takes(self, offset: int, key: bytes | None) -> bool:
        """Whether the record at ``offset`` with ``key`` belongs to this slice."""
        if self.ordering is Ordering.KEY and key is not None:
            return zlib.crc32(key) % self.count == self.index
        return offset % self.count == self.index

    def takes_hashed(self, offset: int, hashed: int | None) -> bool:
        """`takes` from the key's `key_hash` (None: a record without a key), as a ledger
        row gives it to the audit."""
        if self.ordering is Ordering.KEY and hashed is not None:
            return hashed % self.count == self.index
        return offset % self.count == self.index


def key_hash(key: bytes) -> int:
    """The hash a ``key`` cut slices by (crc32, unsigned 32 bits)."""
    return zlib.crc32(key)


def records_at_most(topic: str, start: int, end: int) -> int:
    """At most how many records of the claim on ``topic`` (a claim's topic field) the offsets
    ``start``..``end`` (``end`` excluded) hold: all of them for a whole partition, exactly
    every ``count``-th for an unordered slice (its offsets), and all of them for a key slice
    (a record's key decides, which the offsets do not show). A sliced AMO loss counted as the
    range's width overstated an unordered slice's N times (a review)."""
    if end <= start:
        return 0
    part = split_topic(topic)[1]
    if part is None or part.ordering is Ordering.KEY:
        return end - start
    return _striped_below(part, end) - _striped_below(part, start)


def _striped_below(part: Slice, offset: int) -> int:
    """How many offsets below ``offset`` are ``part``'s (offset % count == index)."""
    return max(0, (offset - part.index + part.count - 1) // part.count)


def slice_topic(topic: str, part: Slice) -> str:
    """The topic field of a claim on ``part`` of a partition of ``topic``."""
    return f"{topic}+{part.name}"


def split_topic(name: str) -> tuple[str, Slice | None]:
    """A claim's topic field as (data topic, slice or None for a whole partition)."""
    return _split_topic(name)


@functools.lru_cache(maxsize=4096)  # a supervisor asks for its own few claims many times a turn
def _split_topic(name: str) -> tuple[str, Slice | None]:
    topic, plus, rest = name.rpartition("+")
    if not plus or not topic:
        return name, None
    ordering, dot, numbers = rest.partition(".")
    index, of, count = numbers.partition("of")
    if (
        len(numbers) > 12  # "1023of1024" at most: never int() a hostile thousand digits
        or ordering not in (Ordering.KEY.value, Ordering.UNORDERED.value)
        or not (dot and of and index.isdigit() and count.isdigit())
        or not (index.isascii() and count.isascii())
        or not 0 <= int(index) < int(count) <= MAX_SLICES
    ):
        return name, None
    part = Slice(Ordering(ordering), int(count), int(index))
    if slice_topic(topic, part) != name:  # "01of2": one slice has one name, one claim key
        return name, None
    return topic, part


def data_topic(name: str) -> str:
    """The data topic a claim's topic field is about."""
    return split_topic(name)[0]
