"""``release_claimed``: a partition another member releases is claimed at once by a member with
room for it.

A member whose fold shows another member's release of a data claim of its group (the core tells its
observers: `observations.ReleaseSeen`) must, by the end of that turn, hold or be claiming it,
unless the partition is no longer claimable (someone else won it), the member has no room for it in
its fair share, or a rule of its own keeps it off: it is stopping or dormant (replaced by another
instance of its client id), the group is paused, it is starting and has not seen the others yet
(`Claiming.claims_open_at`), or it released the partition itself after repeated handler failures
(that wait is for the record, not the holder). Any other wait (its cooldown after handing the
partition over, a back-off after a refused claim) and the planning round's cadence must not leave
the partition idle: the rule is judged with the member's own fold, the same fair share
(`planning.plan`) and no other wait.
"""

from __future__ import annotations

from marshal_workers.core.member import Member
from marshal_workers.protocol.members import is_member_key
from marshal_workers.protocol.wire import ClaimKey

INVARIANT = "release_claimed"


def left_unclaimed(member: Member, key: ClaimKey, now: float) -> str | None:
    """Why ``member`` breaks the rule on ``key``, whose release by another member it folded in
    the turn ending at ``now``; None when it keeps it (or the rule does not ask for a claim)."""
    ctx, claiming = member.ctx, member.claiming
    if member.done or ctx.stopping or member.operator.dormant or not member.started:
        return None
    if is_member_key(key):
        return None
    if ctx.resync is not None:
        return None  # its lease clock stood still: it claims nothing until it read the log again
    if member.pause(now) is not None or now < claiming.claims_open_at():
        return None
    if key in ctx.held or key in claiming.in_flight():
        return None
    waits = {k for k, until in ctx.failure_avoid.items() if until > now}
    if key in waits:
        return None
    step = claiming.share_plan(now, waits, len(claiming.partitions))
    if key not in step.claims:
        return None  # no longer claimable, or no room in the share
    return (
        f"released by another member and left unclaimed in the turn that folded it, with room"
        f" (holds {len(claiming.held_data())} of a share of {step.share}, {step.members} members)"
    )
