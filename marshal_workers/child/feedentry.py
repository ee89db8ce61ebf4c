"""The host reader's entry point as the supervisor names it (`supervisor.feeds`): a name to
pickle that imports nothing, as `child.entry` is for a child. `child.reader` is imported by the
fork server the reader is forked from."""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from marshal_workers.ipc.messages import ChildSpec


def reader_entry(spec: ChildSpec, supervisor_pid: int) -> NoReturn:
    """Run `child.reader.reader_main` (see there); never returns."""
    from marshal_workers.child.reader import reader_main  # noqa: PLC0415 (the fork server's import)

    reader_main(spec, supervisor_pid)
