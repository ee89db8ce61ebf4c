"""Whether the member's lease clock stood still while time went on (pure arithmetic).

Leases run on the lease clock (`common.leaseclock`, CLOCK_BOOTTIME on Linux, which counts a
suspend). A clock can still stand still while the world's runs: a VM paused without its guest
seeing the pause, a suspend on a platform whose clock does not count one. The member then
believes its leases run while rivals, on the broker's clock, may already have won its claims.
Two references show it, compared with the lease clock's own advance:

- **the log's time.** A record of this member's own that landed at log time L was sent at lease
  time s, so the broker's clock read L at or after s (an *anchor*, the newest per coordination
  partition). Any record of that partition seen at lease time n with log time L' landed before
  n, so the broker's clock advanced L' - L within what the lease clock counts as n - s plus
  what it failed to count: the lease clock lost at least ``(L' - L) - (n - s)``. Latencies and
  a reader's lag only make that smaller: it is a lower bound, with no allowance to tune, on
  one broker's clock (each partition has its own anchor: brokers' clocks may differ). A broker
  clock that jumps forward reads the same way, and is answered the same way.
- **the wall clock**, from one tick to the next: ``(wall' - wall) - (now' - now)``. It jumps
  after a suspend the lease clock did not count; NTP steps it too (forward: answered as a
  stall, which is safe; backward: never a loss).

`ClockCheck` returns the loss each observation shows; the member (`core.member`) answers one
above `leases.clock_tolerance` by ending every lease judged on the clock that stood still.
"""

from __future__ import annotations

ANCHOR_AGE_S = 60.0  # an anchor older than this (on the lease clock) is not compared with:
# the broker's and the host's clocks may drift apart by NTP's slew over minutes


class ClockCheck:
    """The newest anchor per coordination partition and the last tick's clocks."""

    def __init__(self) -> None:
        self._anchors: dict[int, tuple[int, float]] = {}  # partition -> (log ms, sent at)
        self._tick: tuple[float, float] | None = None  # (lease clock, wall clock)

    def seen(self, partition: int, log_ms: int, now: float) -> float:
        """A record of ``partition`` with log time ``log_ms`` was read at ``now``: the seconds
        the lease clock lost since the partition's anchor, at least (0 if none shows)."""
        anchor = self._anchors.get(partition)
        if anchor is None:
            return 0.0
        anchor_ms, sent_at = anchor
        if now - sent_at > ANCHOR_AGE_S:
            return 0.0
        return max(0.0, (log_ms - anchor_ms) / 1000 - (now - sent_at))

    def landed(self, partition: int, log_ms: int, sent_at: float | None, now: float) -> float:
        """One of this member's records, sent at ``sent_at`` (None: unknown, or sent on a clock
        found to have stood still since), was acknowledged at ``now`` with log time
        ``log_ms``: compared as any record seen, then the partition's new anchor."""
        lost = self.seen(partition, log_ms, now)
        if sent_at is not None:
            self._anchors[partition] = (log_ms, sent_at)
        return lost

    def ticked(self, now: float, wall: float) -> float:
        """A tick at lease time ``now`` and wall time ``wall``: the seconds the wall clock moved
        beyond the lease clock since the last tick."""
        last, self._tick = self._tick, (now, wall)
        if last is None:
            return 0.0
        return max(0.0, (wall - last[1]) - (now - last[0]))

    def forget_anchors(self) -> None:
        """The lease clock stood still: the anchors were sent on it (the next records of the
        member's own make new ones)."""
        self._anchors.clear()
