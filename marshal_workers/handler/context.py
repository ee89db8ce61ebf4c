"""What a handler is given besides its records: the claim it runs under (`Context`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from marshal_workers.handler.record import Record
from marshal_workers.protocol.modes import Mode


class Context:
    """What a handler knows about the claim it runs under."""

    __slots__ = (
        "_keepalive",
        "_lease_remaining",
        "client_id",
        "fencing_token",
        "group_id",
        "instance_id",
        "log",
        "mode",
        "partition",
        "pid",
        "slice",
        "topic",
    )

    def __init__(
        self,
        *,
        client_id: str,
        instance_id: str,
        group_id: str,
        topic: str,
        partition: int,
        fencing_token: int,
        mode: Mode,
        log: Any,
        pid: int,
        lease_remaining: Callable[[], float],
        keepalive: Callable[[], float] | None = None,
        slice: str | None = None,
    ) -> None:
        self.client_id = client_id
        self.instance_id = instance_id
        self.group_id = group_id
        self.topic = topic
        self.partition = partition
        self.fencing_token = fencing_token
        self.mode = mode
        self.log = log
        self.pid = pid
        # ordering key or unordered: which slice of the partition this claim covers, as its
        # claim names it ("key.3of8"); None for a whole partition
        self.slice = slice
        self._lease_remaining = lease_remaining
        self._keepalive = keepalive

    def lease_remaining(self) -> float:
        """Seconds until this process must stop processing (its claim may then be taken)."""
        return self._lease_remaining()

    def keepalive(self) -> float:
        """Say that the current handler call is still making progress: its deadline becomes one
        ``handler_timeout`` from now, but never later than the lease's end (call it again, at
        least once per lease, to go on). Returns the seconds the call now has left (0 outside a
        call, or without a handler timeout)."""
        return self._keepalive() if self._keepalive is not None else 0.0


class HandleFunction(Protocol):
    """The plain form of a handler."""

    def __call__(self, record: Record, ctx: Context, /) -> object:
        """Process one record."""
        ...
