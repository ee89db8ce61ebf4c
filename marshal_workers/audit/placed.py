"""A coordination record with what the fold of its whole partition knows there (pure).

The fold per claim (`claimfold`) and the audit's reading of each group's settings
(`heartbeats.settings_records`) take a record apart from the rest of its partition; what the
partition's fold would know at it travels with it:

- its log time: the running greatest valid timestamp (`rationalizer._advance`'s clamp), which
  a record stamped earlier (log time stepping back) does not lower;
- the newest record at or before it that follows a gap (an offset past the previous one + 1,
  or a first offset above 0), and the log time there;
- whether it is *behind* (its offset repeats the previous one's: refused).

Spark computes the same in the JVM (`spark_jobs.annotated`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from marshal_workers.protocol.rationalizer import World
from marshal_workers.protocol.wire import MAX_LOG_TIME_MS, CoordRecord


class Placed(NamedTuple):
    """A record and what the fold of its whole partition knows there (see module doc); a
    tuple, since one is made per record."""

    record: CoordRecord
    log_time: int
    gap_offset: int | None = None
    gap_time: int | None = None
    behind: bool = False


def annotate(records: Iterable[CoordRecord]) -> list[Placed]:
    """One coordination partition's records, in offset order, each with what the partition
    fold knows there (see module doc)."""
    out: list[Placed] = []
    clamp, previous = 0, -1
    gap_offset: int | None = None
    gap_time: int | None = None
    for r in records:
        behind = r.offset <= previous
        if not behind:
            follows_gap = r.offset > previous + 1
            previous = r.offset
            if clamp < r.timestamp_ms <= MAX_LOG_TIME_MS:
                clamp = r.timestamp_ms
            if follows_gap:
                gap_offset, gap_time = r.offset, clamp
        out.append(Placed(r, clamp, gap_offset, gap_time, behind))
    return out


def annotated_log(records: Iterable[CoordRecord]) -> list[Placed]:
    """Every record of a log of any partitions, annotated (each partition in offset order)."""
    by_partition: dict[int, list[CoordRecord]] = {}
    for r in records:
        by_partition.setdefault(r.partition, []).append(r)
    out: list[Placed] = []
    for _, rs in sorted(by_partition.items()):
        out.extend(annotate(sorted(rs, key=lambda r: r.offset)))
    return out


def place(world: World, placed: Placed) -> None:
    """Put ``world`` where its partition's fold is just before ``placed``'s record, but for
    the gaps (a record folded out of its partition's order: a group's pause or settings),
    so that the record gets that fold's verdict."""
    record = placed.record
    world.next_offset = record.offset + 1 if placed.behind else record.offset
    world.log_time = placed.log_time
