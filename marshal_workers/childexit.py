"""How a child ends: its exit codes (the protocol between child and supervisor, listed in
`child`'s docstring) and `ChildExit`, which unwinds the child's loop to its one shutdown path."""

from __future__ import annotations

from marshal_workers.errors import EXIT_OK, EXIT_RUNTIME
from marshal_workers.ipc import ToSupervisor

__all__ = [
    "EXIT_HANDLER_FAILED",
    "EXIT_KAFKA",
    "EXIT_LEASE_EXPIRED",
    "EXIT_NOT_GRANTED",
    "EXIT_OK",
    "EXIT_PARENT_GONE",
    "EXIT_RUNTIME",
    "EXIT_SETUP",
    "ChildExit",
]

EXIT_HANDLER_FAILED = 4
EXIT_LEASE_EXPIRED = 5
EXIT_PARENT_GONE = 6
EXIT_NOT_GRANTED = 7
EXIT_SETUP = 8
EXIT_KAFKA = 9


class ChildExit(Exception):  # noqa: N818 (control flow, not an error)
    """Unwinds the child's loop to its shutdown, with the exit code and teardown reason."""

    def __init__(self, code: int, reason: str, final: ToSupervisor | None = None) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.final = final
