"""Folding a coordination log: one world per followed coordination partition, kept up to date.

`FoldedLog` is what the supervisor, the admin commands and the benchmarks use to tail the log.
Its barrier `wait_for(appended)` folds until the reader has passed a record it appended and
returns the verdict on that record: a coordination write is decided only once it is folded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from marshal_workers.log.interface import CoordinationLog, LogError
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.wire import Appended, CoordRecord

Monotonic = Callable[[], float]


class FoldedLog:
    """Tails the partitions its log follows (`CoordinationLog.followed`) and folds each into its
    own world."""

    def __init__(
        self,
        log: CoordinationLog,
        config: RationalizerConfig,
        monotonic: Monotonic = time.monotonic,
        on_malformed: Callable[[ev.Malformed], object] | None = None,
    ) -> None:
        self.log = log
        self.config = config
        self.on_malformed = on_malformed  # sees every malformed record (e.g. `GoFleetGuard`)
        self.worlds = {p: World(config, p) for p in sorted(log.followed)}
        self._monotonic = monotonic
        self._verdicts: dict[tuple[int, int], ev.Event] = {}
        self._awaited: set[tuple[int, int]] = set()

    def follow(self, partitions: Iterable[int], *, from_start: bool = False) -> None:
        """Follow exactly ``partitions`` (`CoordinationLog.follow`): a newly followed partition
        gets a new world, folded from its first record; the world of one no longer followed
        is dropped (``from_start``: every world is new)."""
        wanted = sorted(set(partitions))
        self.log.follow(wanted, from_start=from_start)
        old = {} if from_start else self.worlds
        self.worlds = {p: old[p] if p in old else World(self.config, p) for p in wanted}

    def fold_records(self, records: Iterable[CoordRecord]) -> list[ev.Event]:
        """Fold already-read records (each partition in offset order); return their events."""
        out: list[ev.Event] = []
        worlds = self.worlds
        on_malformed = self.on_malformed
        for record in records:
            event = fold(worlds[record.partition], record)
            if on_malformed is not None and type(event) is ev.Malformed:
                on_malformed(event)
            position = (event.coord_partition, event.coord_offset)
            if position in self._awaited:
                self._verdicts[position] = event
            out.append(event)
        return out

    def poll(self, timeout_s: float) -> list[ev.Event]:
        """Fold whatever arrives within ``timeout_s``; return the events."""
        return self.fold_records(self.log.poll(timeout_s))

    def caught_up_to(self, targets: dict[int, int]) -> bool:
        """Whether every world has folded past the offsets in ``targets``."""
        return all(self.worlds[p].next_offset >= end for p, end in targets.items())

    def catch_up(
        self, timeout_s: float, on_event: Callable[[ev.Event], object] | None = None
    ) -> int:
        """Fold until every partition reaches the end it had when called; return how many
        records were folded. Events go to ``on_event`` if given (a catch-up over a long
        history would otherwise keep millions of them). LogError on timeout."""
        deadline = self._monotonic() + timeout_s
        targets = self.log.end_offsets(timeout_s)
        folded = 0
        while not self.caught_up_to(targets):
            remaining = deadline - self._monotonic()
            if remaining <= 0:
                behind = {
                    p: end - self.worlds[p].next_offset
                    for p, end in targets.items()
                    if self.worlds[p].next_offset < end
                }
                raise LogError(
                    f"coordination log not caught up within {timeout_s:.1f}s "
                    f"(records still to read per partition: {behind})"
                )
            events = self.poll(min(remaining, 0.5))
            folded += len(events)
            if on_event is not None:
                for event in events:
                    on_event(event)
        return folded

    def wait_for(self, appended: Appended, timeout_s: float) -> tuple[ev.Event, list[ev.Event]]:
        """Fold until the record at ``appended`` is folded; return its verdict and all events
        folded meanwhile. LogError if that takes longer than ``timeout_s``."""
        position = (appended.partition, appended.offset)
        world = self.worlds[appended.partition]
        if world.next_offset > appended.offset and position not in self._verdicts:
            raise LogError(f"record {position} was folded before anyone waited for it")
        self._awaited.add(position)
        deadline = self._monotonic() + timeout_s
        out: list[ev.Event] = []
        try:
            while position not in self._verdicts:
                remaining = deadline - self._monotonic()
                if remaining <= 0:
                    raise LogError(f"own record {position} not folded within {timeout_s:.1f}s")
                if world.next_offset > appended.offset:
                    raise LogError(f"record {position} is missing from the log")
                out.extend(self.poll(min(remaining, 0.5)))
            return self._verdicts.pop(position), out
        finally:
            self._awaited.discard(position)
