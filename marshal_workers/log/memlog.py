"""An in-memory coordination log with Kafka's semantics, for tests without a broker.

`MemoryTopic` is the shared storage (what the broker holds); each `MemoryLog` is one client's
handle with its own read cursors. Log time comes from an injected clock (milliseconds), which
stands for the broker's clock: LogAppendTime. `MemoryTopic.compact` imitates Kafka's log
cleaner, so tests can fold a compacted history.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from marshal_workers.log.interface import LogError
from marshal_workers.protocol.wire import Appended, CoordRecord


class MemoryTopic:
    """The records of every partition, as a broker would keep them."""

    def __init__(self, num_partitions: int, clock: Callable[[], int]) -> None:
        if num_partitions < 1:
            raise ValueError("a topic needs at least one partition")
        self._clock = clock
        self._lock = threading.Condition()
        self._records: list[list[CoordRecord]] = [[] for _ in range(num_partitions)]
        self._next: list[int] = [0] * num_partitions

    @property
    def num_partitions(self) -> int:
        """How many partitions the topic has."""
        return len(self._records)

    def append(self, partition: int, key: bytes, value: bytes) -> Appended:
        """Store a record at the next offset with the clock's time (never going backwards)."""
        with self._lock:
            if not 0 <= partition < self.num_partitions:
                raise LogError(f"partition {partition} does not exist")
            records = self._records[partition]
            log_time = max(self._clock(), records[-1].timestamp_ms if records else 0)
            offset = self._next[partition]
            self._next[partition] += 1
            records.append(CoordRecord(partition, offset, log_time, key, value))
            self._lock.notify_all()
            return Appended(partition, offset, log_time)

    def read(self, partition: int, from_offset: int) -> list[CoordRecord]:
        """Every record at or after ``from_offset``."""
        with self._lock:
            return [r for r in self._records[partition] if r.offset >= from_offset]

    def end_offset(self, partition: int) -> int:
        """The offset the next append to ``partition`` gets."""
        with self._lock:
            return self._next[partition]

    def start_offset(self, partition: int) -> int:
        """The offset of the partition's first record (its next offset when it holds none)."""
        with self._lock:
            records = self._records[partition]
            return records[0].offset if records else self._next[partition]

    def delete_records(self, partition: int, before_offset: int) -> None:
        """Do what Kafka's DeleteRecords does: remove every record of ``partition`` below
        ``before_offset`` (the next offset stays: the partition may be left empty)."""
        with self._lock:
            records = self._records[partition]
            self._records[partition] = [r for r in records if r.offset >= before_offset]

    def wait(self, timeout_s: float) -> None:
        """Block until some append happens or ``timeout_s`` passes."""
        with self._lock:
            self._lock.wait(timeout_s)

    def compact(self, clean_before_ms: int) -> int:
        """Do what Kafka's cleaner does: in the cleanable prefix of each partition (the records
        older than ``clean_before_ms``), keep only the newest record per key; later records stay.
        Offsets keep their gaps, and the survivors of each key are a suffix of its records.
        Returns how many records were removed."""
        removed = 0
        with self._lock:
            for p, records in enumerate(self._records):
                end = 0
                while end < len(records) and records[end].timestamp_ms < clean_before_ms:
                    end += 1
                newest = {r.key: r.offset for r in records[:end]}
                kept = [r for r in records[:end] if newest[r.key] == r.offset] + records[end:]
                removed += len(records) - len(kept)
                self._records[p] = kept
        return removed


class MemoryLog:
    """One client's handle: appends to the topic and tails the followed partitions (every one
    when opened) from the start."""

    def __init__(self, topic: MemoryTopic) -> None:
        self._topic = topic
        self._cursor = [0] * topic.num_partitions
        self._followed = frozenset(range(topic.num_partitions))
        self._acks: list[tuple[int, Appended | str]] = []

    @property
    def num_partitions(self) -> int:
        """How many partitions the coordination topic has."""
        return self._topic.num_partitions

    @property
    def followed(self) -> frozenset[int]:
        """The partitions `poll` reads and `end_offsets` covers."""
        return self._followed

    def follow(self, partitions: Iterable[int], *, from_start: bool = False) -> None:
        """Read exactly ``partitions`` from now on (`CoordinationLog.follow`)."""
        wanted = frozenset(partitions)
        for p in wanted:
            if not 0 <= p < self.num_partitions:
                raise ValueError(f"partition {p} does not exist")
        for p in wanted:
            if from_start or p not in self._followed:
                self._cursor[p] = 0
        self._followed = wanted

    def settle(self, partitions: Iterable[int]) -> None:
        """`follow` ``partitions`` from their first records, for good
        (`CoordinationLog.settle`)."""
        self.follow(partitions, from_start=True)

    def current_num_partitions(self, timeout_s: float) -> int:
        """The partition count now (memory topics never change it)."""
        return self._topic.num_partitions

    def append(self, partition: int, key: bytes, value: bytes, timeout_s: float) -> Appended:
        """Append and return where it landed (memory acknowledges at once)."""
        return self._topic.append(partition, key, value)

    def submit(self, op: int, partition: int, key: bytes, value: bytes) -> None:
        """Append now; the acknowledgement waits for the next `acks` call, as a broker's would."""
        try:
            self._acks.append((op, self._topic.append(partition, key, value)))
        except LogError as exc:
            self._acks.append((op, str(exc)))

    def acks(self) -> list[tuple[int, Appended | str]]:
        """Outcomes of the appends submitted since the last call."""
        out, self._acks = self._acks, []
        return out

    def poll(self, timeout_s: float) -> list[CoordRecord]:
        """Records past this handle's cursors, waiting up to ``timeout_s`` if there are none."""
        batch = self._take()
        if not batch and timeout_s > 0:
            self._topic.wait(timeout_s)
            batch = self._take()
        return batch

    def _take(self) -> list[CoordRecord]:
        batch: list[CoordRecord] = []
        for p in sorted(self._followed):
            records = self._topic.read(p, self._cursor[p])
            if records:
                self._cursor[p] = records[-1].offset + 1
                batch.extend(records)
        return batch

    def end_offsets(self, timeout_s: float) -> dict[int, int]:
        """Each followed partition's next offset (0 for one whose records were all deleted)."""
        ends = {p: self._topic.end_offset(p) for p in sorted(self._followed)}
        return {p: end if self._topic.start_offset(p) < end else 0 for p, end in ends.items()}

    def close(self) -> None:
        """Nothing to release."""
