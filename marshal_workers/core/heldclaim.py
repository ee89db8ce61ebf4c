"""What a member knows about one claim it holds (or is taking): token, position, lease, child.

Pure data, owned by the member's core. The lease deadline is a monotonic time in seconds: the
runtime mirrors it into the shared memory the child reads (`SetLease`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from marshal_workers.ipc.messages import Settle
from marshal_workers.protocol.wire import ClaimingMessages, ClaimKey


class Phase(Enum):
    """Where a held claim stands."""

    STARTING = "starting"  # won or taken over; the child starts once position and wait allow
    RUNNING = "running"  # a child processes it (or is being restarted after a failure)
    STOPPING = "stopping"  # the child was asked to finish its batch; then release
    RELOADING = "reloading"  # SIGHUP: the child finishes its batch; a fresh one takes the claim
    RELEASING = "releasing"  # the release is written; waiting for its verdict
    LOST = "lost"  # the claim is gone or its lease ran out: kill the child, forget the claim


HELD_PHASES = (Phase.STARTING, Phase.RUNNING, Phase.RELOADING)  # counted as this member's share
ASKED_TO_STOP = (Phase.STOPPING, Phase.RELOADING)  # killed once their stop deadline passes


@dataclass(slots=True)
class HeldClaim:
    """One claim of this member (the member claim has no child)."""

    key: ClaimKey
    token: int
    lease: float  # monotonic deadline; 0: none
    revoked_lease: float | None = None  # a fast stop revoked the lease: what the log had granted
    position: int | None = None
    is_member: bool = False
    phase: Phase = Phase.STARTING
    start_after: float = 0.0  # a takeover waits for the old instance's lease to end
    child: bool = False  # a child process runs (from Spawn until ChildExited)
    next_heartbeat: float = 0.0
    failures: int = 0
    failed_offset: int | None = None
    restart_at: float = 0.0
    stop_deadline: float = 0.0
    term_sent: bool = False
    kill_sent: bool = False
    lookup_pending: bool = False
    durable: bool = True  # False: the position came from a start lookup and no heartbeat
    # carrying it has been accepted yet; the child waits (a later lookup could jump past it)
    settle: Settle | None = None  # the next child dead-letters or skips these records first
    child_since: float = 0.0  # when its child was started (`Keeping.spawn`)
    child_no: int = 0  # the child's number (`MemberState.children_started`): a grant answers only
    # the child that asked
    asked_end: int | None = None  # AMO: the end of the newest batch this child asked for
    refused_from: int | None = None  # AMO: a batch of this child from here was refused, so is
    # every batch after it
    left_from: int | None = None  # AMO: of those, from here refused as the lease ran out in
    # this member's view and left to the child's end, not reported (`Children._left_to_the_end`)
    lost: list[tuple[int, int]] = field(default_factory=list)  # AMO: ranges reported lost
    beat_behind: bool = False  # AMO: a heartbeat was written while a reservation was in flight
    # (it carries the position before it): write one again after the verdict
    held_back: list[tuple[ClaimingMessages, dict[str, int]]] = field(default_factory=list)
    # AMO: reservations asked for while a heartbeat is owed, written right after it (decision 18)
    carry: tuple[int, int] | None = None  # AMO: reserved under this tenure, granted to a child
    # that stopped at a record boundary before starting any of it: the next child takes it
    covered: list[int] = field(default_factory=list)  # AMO: request ids whose write failed while
    # a later batch of the child was in flight: answered with that batch (its reservation, by
    # the same holder, covers everything below its end)

    def lease_remaining(self, now: float) -> float | None:
        """Seconds left on the lease at ``now``; None once the claim is lost or revoked."""
        if self.phase is Phase.LOST or self.lease == 0.0:
            return None
        return self.lease - now
