"""Group placement: which coordination partitions hold a group's records.

Pure: no I/O, no clock. Every claim of a group is coordinated on one partition, its *home*
(`Placement.partition_of`), and its readers fold the partitions its claims can be on. Today
every group is *spread*: a claim's home is a hash of its topic and partition modulo the topic's
partition count N, so every member reads every partition and pays for every group.

A *placed* group keeps its claims in a *window*: ``span`` consecutive partitions from ``first``
(wrapping), the hash taken modulo ``span`` inside it. Its settings always live at the group's
own home, ``home(group, N)`` = md5(group) mod N, where any reader that knows only the group's
name and N finds them; a new group's window starts there. Its members read ``reads(group,
placement)``, home and window, and nothing else: a member's cost follows its own group (and
the groups that share its partitions).

`spread(N, partitioner)` is today's layout as a placement (``legacy``), and puts every claim
exactly where `wire.coordination_partition` does, so one code path serves both.

``token_base`` is added to every fencing token of a placed group (`rationalizer`): when a group
moves to other partitions, whose offsets may be smaller, its tokens still grow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from marshal_workers.protocol.wire import MAX_OFFSET, MAX_PARTITION, Partitioner, md5_u64

_GO: Final = Partitioner.MARSHAL_GO
CLAIMS_PER_PARTITION: Final = 10_000  # an auto span: one window partition per this many claims


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a group's claims are coordinated: ``span`` partitions from ``first`` of
    ``partitions`` (the count the placement was computed for: the group's pin)."""

    partitions: int
    first: int
    span: int
    token_base: int = 0
    partitioner: Partitioner = Partitioner.SPEC  # the hash inside the window
    legacy: bool = False  # spread over every partition, as every group was before placement

    def __post_init__(self) -> None:
        problem = placement_problem(self.partitions, self.first, self.span, self.token_base)
        if problem is not None:
            raise ValueError(problem)

    def partition_of(self, topic: str, partition: int) -> int:
        """The coordination partition of the claim on ``topic``/``partition``."""
        h = md5_u64(topic if self.partitioner is _GO else f"{topic}/{partition}")
        return (self.first + h % self.span) % self.partitions

    @property
    def window(self) -> frozenset[int]:
        """The partitions its claims can be on."""
        n = self.partitions
        return frozenset((self.first + i) % n for i in range(self.span))


def placement_problem(partitions: int, first: int, span: int, token_base: int) -> str | None:
    """Why these numbers are no placement (one line), or None."""
    if not 1 <= partitions <= MAX_PARTITION:
        return f"a placement needs 1 to {MAX_PARTITION} partitions, not {partitions}"
    if not 0 <= first < partitions:
        return f"a placement's first partition {first} is not one of its {partitions}"
    if not 1 <= span <= partitions:
        return f"a placement's span {span} is not from 1 to its {partitions} partitions"
    if not 0 <= token_base <= MAX_OFFSET:
        return f"a placement's token base {token_base} is not from 0 to {MAX_OFFSET}"
    return None


def home(group: str, partitions: int) -> int:
    """Where a group's settings always are: md5(group) mod N (first 8 bytes, little-endian)."""
    if partitions < 1:
        raise ValueError("the coordination topic must have at least one partition")
    return md5_u64(group) % partitions


def reads(group: str, placement: Placement) -> frozenset[int]:
    """The partitions a reader of ``group`` follows: its home and its window (all, spread)."""
    return placement.window | {home(group, placement.partitions)}


def spread(partitions: int, partitioner: Partitioner) -> Placement:
    """Today's layout: every partition, the claim hashed by ``partitioner``."""
    return Placement(partitions, 0, partitions, 0, partitioner, legacy=True)


def placed(
    group: str, partitions: int, span: int = 1, partitioner: Partitioner = Partitioner.SPEC
) -> Placement:
    """A new group's placement: a window of ``span`` from its home."""
    return Placement(partitions, home(group, partitions), span, 0, partitioner)


def auto_span(claims: int, partitions: int) -> int:
    """An ``auto`` span for a group of ``claims`` claims: clamp(ceil(claims / 10,000), 1, N)."""
    return max(1, min(partitions, math.ceil(claims / CLAIMS_PER_PARTITION)))


@dataclass(frozen=True, slots=True)
class PlacementBook:
    """What a reader knows of groups' placements (a member: its own group's), frozen and
    hashable so that it can sit in a `RationalizerConfig`."""

    entries: tuple[tuple[str, Placement], ...] = ()
    _by_group: dict[str, Placement] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_group", dict(self.entries))

    @classmethod
    def of(cls, placements: Mapping[str, Placement]) -> PlacementBook:
        """A book of ``placements`` by group."""
        return cls(tuple(sorted(placements.items())))

    def get(self, group: str) -> Placement | None:
        """The placement known for ``group``, if any."""
        return self._by_group.get(group)

    def __bool__(self) -> bool:
        return bool(self.entries)
