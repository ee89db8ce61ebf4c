"""The child's end of its pipe to the supervisor: what it sends, and the messages it reads.

Every step that waits (for a grant, during a retry's backoff) reads the pipe through `Pipe`, so
a message meant for another waiter is never lost: `Stop` is remembered (``stop_requested``; each
waiter decides what it means for it), `DumpStacks` is answered at once, an answer on a run asked
for ahead is handed to whoever keeps those (`keep_grant`, the reserving step), and anything else
is logged. A broken pipe (the supervisor is gone) ends the child.
"""

from __future__ import annotations

from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from marshal_workers.child.fencing import REASON_PARENT_GONE
from marshal_workers.common.stacks import log_stacks
from marshal_workers.ipc.exits import EXIT_PARENT_GONE, ChildExit
from marshal_workers.ipc.messages import DumpStacks, Grant, Stop, ToChild, ToSupervisor


class Pipe:
    """Send to the supervisor and read from it; remembers a `Stop`."""

    def __init__(self, conn: Connection, log: Any) -> None:
        self.conn = conn
        self.log = log
        self.stop_requested = False  # `Stop` came: ask for nothing more, finish, exit
        self.stop_reason = "stop"  # its reason, for the plugin's teardown (`Stop.reason`)
        self.keep_grant: Callable[[Grant], bool] = lambda grant: False  # AMO: early answers

    def send(self, msg: ToSupervisor) -> None:
        try:
            self.conn.send(msg)
        except OSError:
            raise ChildExit(EXIT_PARENT_GONE, REASON_PARENT_GONE) from None

    def receive(self, timeout: float) -> ToChild | None:
        """The next message within ``timeout`` seconds, None if none came; a `Stop` read here
        is remembered as well as returned."""
        try:
            if not self.conn.poll(timeout):
                return None
            msg: ToChild = self.conn.recv()
        except (EOFError, OSError):
            raise ChildExit(EXIT_PARENT_GONE, REASON_PARENT_GONE) from None
        if isinstance(msg, Stop):
            self.stop_requested, self.stop_reason = True, msg.reason
        return msg

    def drain(self) -> None:
        """Read every message waiting (`Stop` remembered, the rest dealt with by `aside`)."""
        while (msg := self.receive(0.0)) is not None:
            self.aside(msg)

    def aside(self, msg: ToChild | None) -> None:
        """A message read while waiting for another: answer `DumpStacks`, keep an answer on a
        run asked for (AMO), log anything unexpected; None (nothing came) and `Stop` (already
        remembered: each waiter decides what it means for it) are passed over."""
        if msg is None or isinstance(msg, Stop):
            return
        if isinstance(msg, DumpStacks):
            log_stacks(self.log, "stack_dump")
        elif isinstance(msg, Grant) and self.keep_grant(msg):
            return  # taken when its run comes up
        else:
            self.log.warning("unexpected_message", message=repr(msg))
