"""How a child ends: its exit codes (the protocol between child and supervisor, listed in
`child`'s docstring), `ChildExit`, which unwinds the child's loop to its one shutdown path, and
`EndNote`, what the shared cells said once it had ended."""

from __future__ import annotations

from dataclasses import dataclass

from marshal_workers.common.errors import EXIT_OK, EXIT_RUNTIME
from marshal_workers.ipc.messages import ToSupervisor

__all__ = [
    "EXIT_HANDLER_ENDED",
    "EXIT_HANDLER_FAILED",
    "EXIT_HANDLER_TIMEOUT",
    "EXIT_KAFKA",
    "EXIT_LEASE_EXPIRED",
    "EXIT_NOT_GRANTED",
    "EXIT_OK",
    "EXIT_PARENT_GONE",
    "EXIT_RUNTIME",
    "EXIT_SETUP",
    "ChildExit",
    "EndNote",
]

EXIT_HANDLER_FAILED = 4
EXIT_LEASE_EXPIRED = 5
EXIT_PARENT_GONE = 6
EXIT_NOT_GRANTED = 7
EXIT_SETUP = 8
EXIT_KAFKA = 9
EXIT_HANDLER_TIMEOUT = 10  # the watchdog ended the group: a handler call outlived its deadline
# Never an exit status: what the supervisor calls a child that ended inside a handler call by
# any other way than the child's own exit protocol (os._exit, a signal it did not send).
EXIT_HANDLER_ENDED = 11


class ChildExit(Exception):  # noqa: N818 (control flow, not an error)
    """Unwinds the child's loop to its shutdown, with the exit code and teardown reason."""

    def __init__(self, code: int, reason: str, final: ToSupervisor | None = None) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.final = final


@dataclass(frozen=True, slots=True)
class EndNote:
    """What the cells said once the child had ended (see `callstate.CallCells.take_end_note`)."""

    fence: int  # the exit code the watchdog meant when it ended the child (0: none)
    position: int | None  # ALO: everything below it handled; the record in progress, if any
    in_call: bool  # the child ended inside a handler call (on the record at position)
    call_started: float  # when that call began, as the watchdog last published it (0: unknown)
    unit_end: int | None  # a handle_batch call in progress covered position to this
    feed_lost: bool = False  # a slice's child lost its host reader's feed (however it ended)
    stopped_at: int | None = None  # it stopped at a record boundary there (`child.termstop`)
