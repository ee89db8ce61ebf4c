"""What goes into a member's core: everything the outside world tells it, with the time.

Each input is a frozen slotted dataclass. ``now`` is the runtime's lease clock in seconds
(`common.leaseclock`: CLOCK_BOOTTIME on Linux, which counts a suspend; every process on the
host reads the same clock, so leases computed from it mean the same to a child). The core
never reads a clock: time is what these inputs say.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from marshal_workers.core.childexits import ChildEnd
from marshal_workers.ipc import messages as ipc
from marshal_workers.protocol.wire import Appended, ClaimKey, CoordRecord


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed. ``wall`` (Unix seconds) only fills the informational UnixSec of messages.
    ``positions``: ALO positions the children published in shared memory since the last tick
    (every record below the offset handled), read by the runtime just before this tick."""

    now: float
    wall: float
    positions: Mapping[ClaimKey, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClocksRead:
    """The lease clock and the wall clock (Unix seconds) read at the start of a turn, before
    anything else of it: a suspend the lease clock did not count shows in the wall clock
    first, and must be known before a child's request is answered on a lease."""

    now: float
    wall: float


@dataclass(frozen=True, slots=True)
class RecordsRead:
    """Records of the coordination log, each partition in offset order, to fold."""

    now: float
    records: Sequence[CoordRecord]


@dataclass(frozen=True, slots=True)
class AppendDone:
    """The log acknowledged append ``op``: where it landed and its log time."""

    now: float
    op: int
    appended: Appended


@dataclass(frozen=True, slots=True)
class AppendFailed:
    """Append ``op`` is not known to have happened (it may still land: the fold will say)."""

    now: float
    op: int
    error: str


@dataclass(frozen=True, slots=True)
class ChildSaid:
    """A child's message over its pipe."""

    now: float
    key: ClaimKey
    message: ipc.ToSupervisor


@dataclass(frozen=True, slots=True)
class ChildExited:
    """A child ended (negative code: the signal), and the runtime has killed its group.
    ``end``: what its shared cells say (`childexits.read_end`: a handler call it ended in, the
    code that counts); ``position``: every record below it handled (the shared cell; in AMO
    the record at it may have been in progress); ``stopped_at``: it stopped at a record boundary
    (its member's TERM, its lease's end) and started no record at or after this offset."""

    now: float
    key: ClaimKey
    code: int
    end: ChildEnd | None = None
    position: int | None = None
    stopped_at: int | None = None


@dataclass(frozen=True, slots=True)
class SignalReceived:
    """A signal the runtime's handler enqueued."""

    now: float
    signal: signal.Signals


@dataclass(frozen=True, slots=True)
class PartitionsFound:
    """Discovery's answer: the group's data partitions and the coordination topic's count."""

    now: float
    partitions: Sequence[ClaimKey]
    coordination_partitions: int


@dataclass(frozen=True, slots=True)
class DiscoveryFailed:
    """Discovery could not ask the broker (unreachable, topic gone): retried later."""

    now: float
    error: str


@dataclass(frozen=True, slots=True)
class StartFound:
    """Where a claim with no position in the log starts (auto_offset_reset's watermark)."""

    now: float
    key: ClaimKey
    offset: int


@dataclass(frozen=True, slots=True)
class StartFailed:
    """The start position of a claim could not be looked up (e.g. its leader is offline)."""

    now: float
    key: ClaimKey
    error: str


@dataclass(frozen=True, slots=True)
class LogEndFound:
    """Where each coordination partition ended when asked (`FindLogEnd`): the member reads to
    there before it writes again."""

    now: float
    ends: Mapping[int, int]


Input = (
    Tick
    | ClocksRead
    | RecordsRead
    | AppendDone
    | AppendFailed
    | ChildSaid
    | ChildExited
    | SignalReceived
    | PartitionsFound
    | DiscoveryFailed
    | StartFound
    | StartFailed
    | LogEndFound
)
