"""How much an AMO child reserves at once: the rule that bounds what a crash loses.

An AMO child handles a record only after the coordination log accepted a reservation covering
it, and it asks for its next reservation while it handles the one before (`AHEAD`), so the log's
round trip overlaps the handling. What is reserved and not yet handled is lost if the child
crashes. Pure arithmetic, used by the real child (`child.reserving`) and the simulator's child
(`sim.children`), which must size alike: seconds and counts in, counts out.
"""

from __future__ import annotations

AHEAD = 1  # reservations asked for beyond the one handled or awaited
RESERVE_TARGET_S = 0.5  # a reservation covers about this much of the child's own handling
RESERVE_MAX_BYTES = 4 << 20  # and holds about this much memory at most (its records are held)
RECORD_OVERHEAD_BYTES = 256  # a held record's memory beside key and value (~250-350 measured)


def reservation_size(batch_size: int, amo_window: int) -> int:
    """The most records one reservation covers: the window holds the reservation in hand and
    the ones asked ahead (``AHEAD + 1``), so a crash loses at most ``amo_window`` records;
    never less than one batch."""
    return max(batch_size, amo_window // (AHEAD + 1))


class ReservationSizer:
    """How many records the child's next reservation covers.

    At most `reservation_size` (so that a crash loses at most ``amo_window`` records); no more
    than the child handles in about ``target_s`` at its recent time per record (so that a slow
    handler's crash loses about a second of work, or two batches where a batch takes longer,
    not a window of minutes); no more than about ``max_bytes`` of held records (the child holds
    a reservation's records until it handles them); never less than a batch. Until a run has
    been handled a reservation is one batch. Where handling is fast, one log record thus
    reserves as much as the window allows (the log's round trip is paid once per ``target_s``
    of handling, not once per batch); where it is slow, little.

    The time per record is smoothed, not the rate: each run weighs half, so one slow run shrinks
    the next reservation at once (its cost at least halves the estimate's reach), while one fast
    run after slow ones only halves the estimate (a rate smoothed instead would let one run of
    skipped records size the next reservation for minutes of slow ones). Pure: the child loop
    times its runs and reports them here."""

    def __init__(
        self,
        batch_size: int,
        amo_window: int,
        target_s: float = RESERVE_TARGET_S,
        max_bytes: int = RESERVE_MAX_BYTES,
    ) -> None:
        self.least = batch_size
        self.most = reservation_size(batch_size, amo_window)
        self.target_s = target_s
        self.max_bytes = max_bytes
        self.cost: float | None = None  # seconds per record of the runs handled, smoothed
        self.by_time = batch_size  # the size the time per record allows (the window included)

    def handled(self, records: int, seconds: float) -> None:
        """A granted run of ``records`` took ``seconds`` to handle: size the next reservation
        from the smoothed time per record."""
        if records <= 0:
            return
        cost = max(seconds, 0.0) / records
        self.cost = cost if self.cost is None else (self.cost + cost) / 2
        reach = self.target_s / self.cost if self.cost > 0 else float(self.most)
        self.by_time = self.most if reach >= self.most else max(self.least, int(reach))

    def size(self, record_bytes: float) -> int:
        """The next reservation's most records, for records of about ``record_bytes`` of key
        and value each."""
        by_memory = int(self.max_bytes // (record_bytes + RECORD_OVERHEAD_BYTES))
        return max(self.least, min(self.by_time, by_memory))

    def ahead(self) -> int:
        """How many reservations the child may have asked for beyond the one it handles or
        awaits."""
        return AHEAD
