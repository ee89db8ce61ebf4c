"""The coordination log in virtual time: per-partition latency, failures, broker clocks, and
compaction with the semantics of Kafka's log cleaner.

Each partition stands for one broker's log: its records get that broker's clock as their log
time (``offset_s`` from the true virtual time; steady, unless `jump_clock` makes it jump), an
append lands after that partition's latency, and may fail (with or without the record landing:
a timeout after which the record still appears); a reader may see only what had landed some
time ago (``read_from``'s ``until``). `compact` keeps, in the cleanable prefix, only
the newest record per key; offsets keep their gaps.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field

from marshal_workers.protocol.wire import CoordRecord


@dataclass(slots=True)
class PartitionLog:
    """One coordination partition: its records, in offset order, and its broker's behaviour."""

    index: int
    clock_offset_s: float = 0.0
    latency_s: tuple[float, float] = (0.002, 0.01)
    fail_rate: float = 0.0
    records: list[CoordRecord] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    landed: list[float] = field(default_factory=list)  # each record's true landing time
    next_offset: int = 0
    last_time_ms: int = 0

    def land(self, key: bytes, value: bytes, true_time: float) -> CoordRecord:
        """Append at true virtual time ``true_time``, stamped with this broker's clock."""
        stamp = max(self.last_time_ms, int((true_time + self.clock_offset_s) * 1000))
        record = CoordRecord(self.index, self.next_offset, stamp, key, value)
        self.last_time_ms = stamp
        self.next_offset += 1
        self.records.append(record)
        self.offsets.append(record.offset)
        self.landed.append(max(true_time, self.landed[-1] if self.landed else 0.0))
        return record

    def jump_clock(self, seconds: float, true_time: float) -> None:
        """The broker's clock jumps by ``seconds`` at ``true_time``. Back: its stamps go back
        too (LogAppendTime is the broker's clock as it is; the fold clamps log time, decision
        5); forward: they go forward from now."""
        self.clock_offset_s += seconds
        if seconds < 0:
            self.last_time_ms = min(
                self.last_time_ms, int((true_time + self.clock_offset_s) * 1000)
            )

    def read_from(self, offset: int, until: float | None = None) -> list[CoordRecord]:
        """Every record at or after ``offset`` that survives (``until``: only the prefix of
        them that had landed by that true time: a reader's view that lags)."""
        start = bisect.bisect_left(self.offsets, offset)
        if until is None:
            return self.records[start:]
        end = bisect.bisect_right(self.landed, until, lo=start)
        return self.records[start:end]

    def compact(self, clean_before_ms: int, tail_kept: int) -> int:
        """Kafka's cleaner: in the records older than ``clean_before_ms``, except the newest
        ``tail_kept`` (the active segment), keep only the newest per key. Returns how many
        records were removed."""
        end = 0
        limit = max(0, len(self.records) - tail_kept)
        while end < limit and self.records[end].timestamp_ms < clean_before_ms:
            end += 1
        newest = {r.key: r.offset for r in self.records[:end]}  # the cleaner's offset map
        keep = [i for i, r in enumerate(self.records[:end]) if newest[r.key] == r.offset]
        keep += range(end, len(self.records))
        removed = len(self.records) - len(keep)
        self.records = [self.records[i] for i in keep]
        self.landed = [self.landed[i] for i in keep]
        self.offsets = [r.offset for r in self.records]
        return removed


class VirtualLog:
    """Every coordination partition, plus a shadow of every record ever landed (uncompacted),
    for the reference reader."""

    def __init__(self, partitions: int, rng: random.Random) -> None:
        self.parts = [PartitionLog(p) for p in range(partitions)]
        self.rng = rng
        self.shadow: list[list[CoordRecord]] = [[] for _ in range(partitions)]

    @property
    def num_partitions(self) -> int:
        """How many coordination partitions there are."""
        return len(self.parts)

    def latency(self, partition: int) -> float:
        """How long an append to ``partition`` takes to land (seconds)."""
        low, high = self.parts[partition].latency_s
        return self.rng.uniform(low, high)

    def fails(self, partition: int) -> bool:
        """Whether this append fails."""
        rate = self.parts[partition].fail_rate
        return rate > 0 and self.rng.random() < rate

    def land(self, partition: int, key: bytes, value: bytes, true_time: float) -> CoordRecord:
        """Land a record now."""
        record = self.parts[partition].land(key, value, true_time)
        self.shadow[partition].append(record)
        return record

    def compact(self, clean_before_ms: int, tail_kept: int = 20) -> int:
        """Run the cleaner on every partition."""
        return sum(p.compact(clean_before_ms, tail_kept) for p in self.parts)
