"""Handler plugins: what the user writes, how it is found, and what it is given.

A handler is a callable ``handle(record, ctx)`` named as ``module:attr`` or as an entry point in
the group ``marshal_workers.handlers``. The supervisor loads it once before anything starts (a
failure exits with code 3 and one line); each child loads it again after spawn.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol

from marshal_workers.common.errors import EXIT_HANDLER_LOAD, MarshalError
from marshal_workers.handler.record import Record
from marshal_workers.protocol.rationalizer import Mode

__all__ = ["Context", "HandleFunction", "LoadError", "Record", "load_handler"]

ENTRY_POINT_GROUP = "marshal_workers.handlers"


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


class LoadError(MarshalError):
    """The handler could not be imported or is not callable: exit code 3."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_HANDLER_LOAD)


def load_handler(spec: str) -> Any:
    """Import ``module:attr`` (dotted attr allowed) or look up an entry point by name: a
    function, a plugin class, or a plugin object (see `plugin`)."""
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        try:
            target: Any = importlib.import_module(module_name)
        except Exception as exc:
            raise LoadError(
                f"cannot import handler module {module_name!r}: {type(exc).__name__}: {exc}"
            ) from None
        for part in attr.split("."):
            try:
                target = getattr(target, part)
            except AttributeError:
                raise LoadError(
                    f"handler module {module_name!r} has no attribute {attr!r}"
                ) from None
    else:
        from importlib.metadata import entry_points  # noqa: PLC0415 (10 ms, rarely needed)

        found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == spec]
        if not found:
            raise LoadError(
                f"no handler {spec!r}: give MODULE:ATTR or the name of an entry point "
                f"in the group {ENTRY_POINT_GROUP!r}"
            )
        try:
            target = found[0].load()
        except Exception as exc:
            raise LoadError(
                f"cannot load handler entry point {spec!r}: {type(exc).__name__}: {exc}"
            ) from None
    if not (callable(target) or hasattr(target, "handle") or hasattr(target, "handle_batch")):
        raise LoadError(
            f"handler {spec!r} is a {type(target).__name__}: give a function handle(record, ctx), "
            "or a class or object with handle or handle_batch"
        )
    return target
