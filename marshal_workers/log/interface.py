"""The coordination log behind one interface: append with a known position, tail the partitions
a client follows (every partition unless it chose fewer: `follow`).

Two implementations share this contract (and one contract test suite): `memlog.MemoryLog` for
unit tests and `kafkalog.KafkaLog` on a real broker. An append counts only once the log has
acknowledged it, and then its partition, offset and log time are known.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from marshal_workers.protocol.wire import Appended, CoordRecord


class CoordinationLog(Protocol):
    """One client's handle on the coordination topic: a producer and a tail of the partitions
    it follows (every one when opened)."""

    @property
    def num_partitions(self) -> int:
        """How many partitions the coordination topic has."""
        ...

    @property
    def followed(self) -> frozenset[int]:
        """The partitions `poll` reads and `end_offsets` covers."""
        ...

    def follow(self, partitions: Iterable[int], *, from_start: bool = False) -> None:
        """Read exactly ``partitions`` from now on: one newly followed is read from its first
        record, one still followed goes on from where it was (``from_start``: every followed
        partition is read again from its first record). Records of a partition no longer
        followed are never returned again. ValueError for a partition the topic lacks."""
        ...

    def settle(self, partitions: Iterable[int]) -> None:
        """`follow` ``partitions`` from their first records, for good: what a member follows
        once it has located its group (a log may read faster before: `KafkaLog`)."""
        ...

    def append(self, partition: int, key: bytes, value: bytes, timeout_s: float) -> Appended:
        """Append one record and wait for the acknowledgement; raise LogError if it fails."""
        ...

    def submit(self, op: int, partition: int, key: bytes, value: bytes) -> None:
        """Start appending one record without waiting; its outcome comes from `acks` as
        ``(op, Appended)`` or ``(op, error text)``."""
        ...

    def acks(self) -> list[tuple[int, Appended | str]]:
        """Outcomes of submitted appends that came in since the last call (never waits)."""
        ...

    def poll(self, timeout_s: float) -> list[CoordRecord]:
        """The next records of the followed partitions (each in offset order), waiting up to
        ``timeout_s`` for the first one; empty when none arrived."""
        ...

    def current_num_partitions(self, timeout_s: float) -> int:
        """The partition count the log has now (a change is fatal to coordination)."""
        ...

    def end_offsets(self, timeout_s: float) -> dict[int, int]:
        """Each followed partition's end now: how far a reader must fold to have read all it holds.
        That is its high watermark (the offset the next append will get), but 0 for a
        partition that holds no record although records were written (DeleteRecords, or
        retention, took them all: its start is its end): there is nothing to wait for, and
        the next record appended there is folded after a gap."""
        ...

    def close(self) -> None:
        """Release the client's resources."""
        ...


class LogError(Exception):
    """The coordination log failed an operation (not acknowledged, unreachable, timed out)."""
