"""What a child and its supervisor say to each other over their pipe, and what a child starts with.

Child to supervisor: `Started`, `Progress` (ALO: handled up to an offset), `GrantRequest`
(AMO: may I handle this batch?), `HandlerFailed`, `Stopped`. Supervisor to child: `Grant`
(the answer), `Stop` (finish the batch in hand, then report and exit). Everything is a small
frozen dataclass, pickled over a `multiprocessing` connection.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from marshal_workers.rationalizer import Mode


@dataclass(frozen=True, slots=True)
class ChildSpec:
    """Everything a child needs to process one claimed partition."""

    handler: str
    mode: Mode
    bootstrap_servers: str
    group_id: str
    client_id: str
    instance_id: str
    topic: str
    partition: int
    start_offset: int | None
    fencing_token: int
    auto_offset_reset: str = "earliest"
    batch_size: int = 500
    batch_timeout_s: float = 0.2
    kafka_config: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    log_json: bool = True


@dataclass(frozen=True, slots=True)
class Started:
    """The child consumes from ``position`` (the offset of the first record it will fetch)."""

    pid: int
    position: int


@dataclass(frozen=True, slots=True)
class Progress:
    """ALO: every record below ``next_offset`` was handled."""

    next_offset: int


@dataclass(frozen=True, slots=True)
class GrantRequest:
    """AMO: the child fetched offsets ``start`` to ``end`` (exclusive) and asks to handle them."""

    request_id: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Grant:
    """The supervisor's answer to a GrantRequest: reserved and committed in the log, or not."""

    request_id: int
    granted: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class HandlerFailed:
    """The handler raised on ``offset``; the child exits without committing that record."""

    offset: int
    error: str
    traceback: str


@dataclass(frozen=True, slots=True)
class Stop:
    """Finish the batch in hand, report `Stopped`, exit."""


@dataclass(frozen=True, slots=True)
class Stopped:
    """The child stopped; every record below ``next_offset`` was handled (ALO) or granted (AMO)."""

    next_offset: int | None


ToSupervisor = Started | Progress | GrantRequest | HandlerFailed | Stopped
ToChild = Grant | Stop
