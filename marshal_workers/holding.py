"""What the supervisor knows about one claim it holds: token, position, lease, child, phase."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from marshal_workers.child import ChildHandle
from marshal_workers.exitpolicy import CallSample
from marshal_workers.ipc import Settle
from marshal_workers.lease import SharedLease
from marshal_workers.protocol import ClaimKey


class Phase(Enum):
    """Where a held claim stands."""

    RUNNING = "running"  # a child processes it (or is being restarted after a failure)
    STOPPING = "stopping"  # the child was asked to finish its batch; then release
    RELOADING = "reloading"  # SIGHUP: the child finishes its batch; a fresh one takes the claim
    LOST = "lost"  # the claim is gone or its lease ran out: kill the child, forget the claim


@dataclass(slots=True)
class Holding:
    """One claim held by this supervisor (the member claim has no child)."""

    key: ClaimKey
    token: int
    position: int
    lease: SharedLease
    child: ChildHandle | None = None
    phase: Phase = Phase.RUNNING
    is_member: bool = False
    failures: int = 0
    failed_offset: int | None = None
    restart_at: float = 0.0
    stop_deadline: float = 0.0
    term_sent: bool = False
    kill_sent: bool = False
    settle: Settle | None = None  # wp-child: the next child dead-letters or skips these first
    call_seen: CallSample | None = None  # wp-child: the handler call in progress, first seen
