"""What comes out of a member's core: what the runtime must do, in order.

The runtime carries each command out and reports the outcome as an input (an append's
acknowledgement, a lookup's answer, a child's exit). Nothing here blocks the core: an append
is a pending operation the core remembers by its ``op`` number.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from marshal_workers.core.observations import Observation
from marshal_workers.ipc import messages as ipc
from marshal_workers.protocol.recordfailures import PoisonMessage
from marshal_workers.protocol.wire import ClaimKey, Message


@dataclass(frozen=True, slots=True)
class Append:
    """Append ``value`` under record key ``key`` (``message`` encoded) to coordination
    ``partition``; report `AppendDone` or `AppendFailed` with ``op``."""

    op: int
    partition: int
    message: Message | PoisonMessage
    key: bytes
    value: bytes


@dataclass(frozen=True, slots=True)
class Spawn:
    """Start a child for the claim with ``spec`` under the claim's shared lease."""

    key: ClaimKey
    spec: ipc.ChildSpec
    restart: bool = False  # after a failure (metrics count restarts)


@dataclass(frozen=True, slots=True)
class SignalChild:
    """Signal the claim's child's whole process group."""

    key: ClaimKey
    signal: signal.Signals
    reason: str


@dataclass(frozen=True, slots=True)
class TellChild:
    """Send a message down the claim's child's pipe (dropped if the child is gone)."""

    key: ClaimKey
    message: ipc.ToChild


@dataclass(frozen=True, slots=True)
class SetLease:
    """Write the claim's lease deadline (lease-clock seconds) to shared memory; 0 revokes."""

    key: ClaimKey
    deadline: float


@dataclass(frozen=True, slots=True)
class DropLease:
    """The claim is forgotten: the runtime may free its shared memory (after revoking)."""

    key: ClaimKey


@dataclass(frozen=True, slots=True)
class LookupStart:
    """Find where the claim starts without a position in the log; report `StartFound` or
    `StartFailed` (off the loop: a slow broker must not delay heartbeats)."""

    key: ClaimKey


@dataclass(frozen=True, slots=True)
class Discover:
    """Ask for the group's data partitions and the coordination topic's partition count;
    report `PartitionsFound` or `DiscoveryFailed` (off the loop)."""


@dataclass(frozen=True, slots=True)
class FindLogEnd:
    """Ask where each coordination partition ends now; report `LogEndFound` (off the loop). A
    failure is dropped: the member asks again."""


@dataclass(frozen=True, slots=True)
class Log:
    """Write a log line (snake_case event name, structured fields)."""

    level: str
    event: str
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Observe:
    """Tell the observers (metrics, systemd, offsets) ``what`` happened."""

    what: Observation


@dataclass(frozen=True, slots=True)
class Exit:
    """The member is done: exit the process with ``code`` (after killing every child)."""

    code: int
    reason: str = ""


Command = (
    Append
    | Spawn
    | SignalChild
    | TellChild
    | SetLease
    | DropLease
    | LookupStart
    | Discover
    | FindLogEnd
    | Log
    | Observe
    | Exit
)
