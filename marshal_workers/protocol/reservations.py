"""How much an AMO child reserves at once: the rule that bounds what a crash loses.

An AMO child handles a record only after the coordination log accepted a reservation covering
it, and it asks for its next reservation while it handles the one before (`AHEAD`), so the log's
round trip overlaps the handling. What is reserved and not yet handled is lost if the child
crashes (kill -9, a lease run out, a failed handler under ``stop``). This module sizes each
reservation so that this stays within about `AT_RISK_S` of the child's own handling, whatever
the handler's speed and the fetch batch: each reservation covers at most its share of that time
at the child's measured time per record; a record that takes longer than a share is reserved
alone and nothing is asked ahead of it, so a crash then loses that one record. Two hard bounds
stay: at most half of ``amo_window`` records per reservation (`reservation_size`), and about
`RESERVE_MAX_BYTES` of held records (never less than a batch: a fetch holds one anyway).

Pure arithmetic, used by the real child (`child.reserving`) and the simulator's child
(`sim.children`), which must size alike: seconds and counts in, counts out.
"""

from __future__ import annotations

AHEAD = 1  # reservations asked for beyond the one handled or awaited, at most
GROWTH = 4  # a real child: a reservation covers at most this many times the last run's records
AT_RISK_S = 1.0  # reserved and not handled: about this many seconds of handling, at most
RESERVE_MAX_BYTES = 4 << 20  # a reservation holds about this much memory at most
RECORD_OVERHEAD_BYTES = 256  # a held record's memory beside key and value (~250-350 measured)


def reservation_size(batch_size: int, amo_window: int) -> int:
    """The most records one reservation covers: the window holds the reservation in hand and
    the ones asked ahead (``AHEAD + 1``), so a crash loses at most ``amo_window`` records."""
    return max(batch_size, amo_window // (AHEAD + 1))


class ReservationSizer:
    """How many records the child's next reservation covers, and whether it may ask ahead.

    A reservation covers at most ``at_risk_s / (AHEAD + 1)`` seconds of handling at the child's
    recent time per record (at least one record), at most `reservation_size` records, and no
    more than about ``max_bytes`` of held records (but a batch). The child asks ahead only while
    a record takes no longer than that share, so the reservations in hand and ahead stay within
    ``at_risk_s``; a slower record is reserved alone with nothing ahead (a crash loses it alone).
    Until a run has been handled the time per record is unknown: one record, nothing ahead.

    With ``growth`` (the real child: `GROWTH`) a reservation covers at most that many times the
    records of the run last handled. A short run's time says little on a real host: a child
    woken by its grant runs its first record at once, inside one time slice (1.7 ms of Python
    read 1.7 ms on a saturated host), while its longer runs wait for a core between slices
    (8-30 ms a record there). Sized from the one record, a child started after a failover
    reserved 2 x 289 records, and a kill -9 1.5 s later lost 453 of them, about 5 s of its
    handling (a review of a CPU-bound fleet). Growing 1, 4, 16, ... the runs are timed across
    slices before they are large (modelled the same way: 1.8 s of handling at risk at the
    worst, then a second). The simulator's child handles in virtual time, where a run of one
    record takes exactly its share of a long run: it sizes without the cap (which only ever
    makes a reservation smaller, so what the simulator proves of the losses holds for the
    real child a fortiori).

    Where handling is fast, one log record thus reserves as much as the window allows (the
    log's round trip is paid once per share of handling, not once per batch); where it is slow,
    little.

    The time per record is smoothed, not the rate: each run weighs half, so one slow run shrinks
    the next reservation at once (its cost at least halves the estimate's reach), while one fast
    run after slow ones only halves the estimate (a rate smoothed instead would let one run of
    skipped records size the next reservation for minutes of slow ones)."""

    def __init__(
        self,
        batch_size: int,
        amo_window: int,
        at_risk_s: float = AT_RISK_S,
        max_bytes: int = RESERVE_MAX_BYTES,
        growth: int | None = None,
    ) -> None:
        self.batch = batch_size  # the memory bound's floor
        self.most = reservation_size(batch_size, amo_window)
        self.share_s = at_risk_s / (AHEAD + 1)  # one reservation's share of the time at risk
        self.max_bytes = max_bytes
        self.cost: float | None = None  # seconds per record of the runs handled, smoothed
        self.by_time = 1  # the size the time per record allows (the window included)
        self.growth = growth

    def handled(self, records: int, seconds: float) -> None:
        """A granted run of ``records`` took ``seconds`` to handle: size the next reservation
        from the smoothed time per record."""
        if records <= 0:
            return
        cost = max(seconds, 0.0) / records
        self.cost = cost if self.cost is None else (self.cost + cost) / 2
        reach = self.share_s / self.cost if self.cost > 0 else float(self.most)
        by_time = self.most if reach >= self.most else max(1, int(reach))
        if self.growth is not None:  # a short run: grow, and be timed again (class doc)
            by_time = min(by_time, self.growth * records)
        self.by_time = by_time

    def size(self, record_bytes: float) -> int:
        """The next reservation's most records, for records of about ``record_bytes`` of key
        and value each."""
        by_memory = int(self.max_bytes // (record_bytes + RECORD_OVERHEAD_BYTES))
        return max(1, min(self.by_time, max(self.batch, by_memory)))

    def ahead(self) -> int:
        """How many reservations the child may have asked for beyond the one it handles or
        awaits: `AHEAD` while a record takes no longer than a reservation's share of the time
        at risk, else none (and none until a run has been handled)."""
        return AHEAD if self.cost is not None and self.cost <= self.share_s else 0
