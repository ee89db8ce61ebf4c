"""``heartbeat_pace``: a simulated member writes each claim's heartbeats on their schedule.

A held claim's heartbeat goes every HB/2 (`Keeping.heartbeat`); one written while a
reservation of the claim was in flight is followed by one more once the verdicts are in, and
that one had none in flight, so the next waits its HB/2. So within any HB/4 of the member's
lease clock one tenure of a claim writes at most two (the takeover's heartbeat is the
claiming's, not counted; an operator's skip makes the next heartbeat due at once, in ALO,
which reserves nothing, so it never makes a third beside such a pair). A member that wrote
one on every turn while a verdict was late (a defect until 2026-12-03) wrote dozens a second
to a log already slow: that is what this catches, where no other invariant would (the writes
are harmless to safety).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from marshal_workers.protocol.wire import ClaimKey

WINDOW_HB = 0.25  # the span, in heartbeat intervals, in which at most `MOST` may go
MOST = 2


@dataclass(slots=True)
class HeartbeatPace:
    """One member's heartbeats by claim and tenure (its fencing token), on its lease clock."""

    sent: dict[tuple[ClaimKey, int], deque[float]] = field(default_factory=dict)
    told: set[tuple[ClaimKey, int]] = field(default_factory=set)

    def beat(self, key: ClaimKey, token: int, local: float, hb: float) -> int | None:
        """A heartbeat of ``key`` written at ``local`` under ``token``: how many went within
        the window ending there, if more than `MOST` for the first time in the tenure."""
        tenure = (key, token)
        times = self.sent.setdefault(tenure, deque())
        times.append(local)
        while local - times[0] >= WINDOW_HB * hb:
            times.popleft()
        if len(times) <= MOST or tenure in self.told:
            return None
        self.told.add(tenure)
        return len(times)
