"""The child process's entry point as the supervisor names it (`supervisor.childprocess`):
a name to pickle that imports nothing. The supervisor imports this module and no other of the
child; `child.main`, with the child's whole import graph, is already imported in the fork server
every child is forked from (and a spawned child, the tests', imports it here).
"""

from __future__ import annotations

from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from marshal_workers.childlink.sharedlease import SharedLease
    from marshal_workers.ipc.messages import ChildSpec


def child_entry(
    spec: ChildSpec, lease: SharedLease, conn: Connection, supervisor_pid: int
) -> NoReturn:
    """Run `child.main.child_main` (see there); never returns."""
    from marshal_workers.child.main import child_main  # noqa: PLC0415 (the fork server's import)

    child_main(spec, lease, conn, supervisor_pid)


def spare_entry(
    template: ChildSpec, lease: SharedLease, conn: Connection, supervisor_pid: int
) -> NoReturn:
    """Run `child.main.spare_main` (a child started ahead of its claim); never returns."""
    from marshal_workers.child.main import spare_main  # noqa: PLC0415 (the fork server's import)

    spare_main(template, lease, conn, supervisor_pid)
