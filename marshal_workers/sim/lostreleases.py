"""A simulated member's releases that did not land, and the lease the log may still grant each
claim when its release was sent: a claim waits that out before it goes stale, which the
liveness check allows it (`convergence.Recovering`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from marshal_workers.core.member import Member
from marshal_workers.protocol.recordfailures import PoisonMessage
from marshal_workers.protocol.wire import (
    ClaimKey,
    Heartbeat,
    Message,
    ReleasingPartition,
    claim_key,
)


@dataclass(slots=True)
class LostReleases:
    """What one member sent that decides how long a claim whose release was lost stays valid."""

    # by claim: when its latest release that did not land was sent, and the lease left then
    lost: dict[ClaimKey, tuple[float, float]] = field(default_factory=dict)
    # by claim: when (on the lease clock) its latest heartbeat that lands was sent, which the
    # log may grant a lease from though the member has read no verdict of it yet
    beats: dict[ClaimKey, float] = field(default_factory=dict)

    def sent(
        self, message: Message | PoisonMessage, lands: bool, t: float, local: float, member: Member
    ) -> None:
        """``message`` appended at true time ``t`` (``local`` on the member's lease clock);
        ``lands``: its record appears in the log."""
        if lands and isinstance(message, Heartbeat):
            self.beats[claim_key(message)] = local
        if lands or not isinstance(message, ReleasingPartition):
            return
        key = claim_key(message)
        held = member.ctx.held.get(key)
        # what the log granted (a fast stop revoked the child's lease, not the claim's), or
        # what a heartbeat sent before the release proves once it lands, if later: the member
        # may forget the claim before it reads the verdict (seed 1608132 of
        # `feed-loss,failures,read-latency,stall` at 0.3, unordered/4)
        granted = 0.0 if held is None else (held.revoked_lease or held.lease)
        beat = self.beats.get(key)
        if beat is not None:
            granted = max(granted, member.ctx.lease_from(beat))
        self.lost[key] = (t, max(0.0, granted - local))
