"""What the core tells the observers (metrics, systemd, offsets): one type per observation.

The runtime hands each to `supervisor.observe.deliver`, which calls the observer's method of
the same name; a new observation is a new type here and a new method there, checked by mypy.
Pure data: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from marshal_workers.ipc.messages import Stats
from marshal_workers.protocol.wire import ClaimKey


class LossCause(StrEnum):
    """Why AMO records reserved in the log were not handled (the label of the loss metric)."""

    CRASH = "crash"  # the child died (killed, a fatal error) with a reserved batch in hand
    LEASE_EXPIRED = "lease_expired"  # the claim's lease ran out (a frozen host, a stalled log)
    HANDLER_FAILED = "handler_failed"  # a handler failure ended the child under `stop`
    REFUSED = "refused"  # the log reserved a batch this member then refused to its child
    ESTIMATE = "estimate"  # a compacted log's position estimate passed over records nobody
    # was granted (a replaced instance's refused reservation raised it)


@dataclass(frozen=True, slots=True)
class ClaimWon:
    key: ClaimKey
    token: int


@dataclass(frozen=True, slots=True)
class ClaimLost:
    key: ClaimKey
    reason: str


@dataclass(frozen=True, slots=True)
class ClaimReleased:
    key: ClaimKey


@dataclass(frozen=True, slots=True)
class ReleaseSeen:
    """The fold shows another member's release of a claim of this member's group (a partition
    free now, or a member leaving): the member plans in that turn
    (`Claiming.released_by_another`)."""

    key: ClaimKey


@dataclass(frozen=True, slots=True)
class Failover:
    """A claim won from a holder that had gone stale (a crash, a freeze): not released."""

    key: ClaimKey
    previous_client: str


@dataclass(frozen=True, slots=True)
class RecordFailures:
    """The record a held claim fails on, as the log counts it: ``failures`` (0: none, an
    operator's decision cleared it) and whether it is parked."""

    key: ClaimKey
    offset: int
    failures: int
    parked: bool


@dataclass(frozen=True, slots=True)
class GroupView:
    """The member's group as its fold shows it: its claims (partitions or slices), how many
    of them no live member holds, and its live members (told when it changes)."""

    claims: int
    unheld: int
    members: int


@dataclass(frozen=True, slots=True)
class ChildStats:
    key: ClaimKey
    stats: Stats


@dataclass(frozen=True, slots=True)
class HandlerFailed:
    key: ClaimKey
    offset: int
    error: str


@dataclass(frozen=True, slots=True)
class CoordinationWrite:
    kind: str
    seconds: float
    ok: bool


@dataclass(frozen=True, slots=True)
class AmoLost:
    """AMO: offsets ``start``..``end`` (exclusive) were reserved in the log and not handled
    (the first may have been in progress when the child ended)."""

    key: ClaimKey
    start: int
    end: int
    cause: LossCause
    # the token of the tenure that reported it, while it holds the claim (who said it, not
    # what was lost: left out of comparisons)
    token: int | None = field(default=None, compare=False)
    # a reservation whose write was given up on (no verdict in time, a fault of the
    # coordination path) landed after all: what a fault lost, not a crash (marshal-sim)
    given_up: bool = field(default=False, compare=False)


@dataclass(frozen=True, slots=True)
class Dormant:
    """Another instance of this client id took this one's place (``instance``): it holds and
    claims nothing until that one falls silent (`Operator.replaced`)."""

    instance: str


@dataclass(frozen=True, slots=True)
class Resumed:
    """The instance that had replaced this one fell silent: this one claims again."""


@dataclass(frozen=True, slots=True)
class Stopping:
    pass


@dataclass(frozen=True, slots=True)
class Reloading:
    pass


@dataclass(frozen=True, slots=True)
class Reloaded:
    pass


Observation = (
    ClaimWon
    | ClaimLost
    | ClaimReleased
    | ReleaseSeen
    | Failover
    | RecordFailures
    | GroupView
    | ChildStats
    | HandlerFailed
    | CoordinationWrite
    | AmoLost
    | Dormant
    | Resumed
    | Stopping
    | Reloading
    | Reloaded
)
