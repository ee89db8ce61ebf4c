"""`marshal-run`'s entry point: the fork server started first (`launch`), then the options
parsed and the supervisor run (`command`).

This module imports only `launch` (about 20 ms): the click command, the configuration,
structlog and the Kafka client (about 0.13 s of CPU) are imported after the fork server has
started, so that its preload of the child's modules runs on the other core meanwhile, with
the cyclic collector paused (`common.collector`) and the dataclasses' methods' code from the
cache (`common.classcode`).
"""

from __future__ import annotations

import sys

from marshal_workers.common.classcode import compiled_once
from marshal_workers.common.collector import paused
from marshal_workers.supervisor.launch import start_fork_server


def main() -> None:
    """Entry point of `marshal-run`."""
    start_fork_server(sys.argv[1:])
    # Only now: these imports are what the fork server's start overlaps; their dataclasses'
    # methods compiled ahead (`common.classcode`).
    with paused(), compiled_once():
        from marshal_workers.common.consolescripts import run_command  # noqa: PLC0415
        from marshal_workers.supervisor.command import marshal_run  # noqa: PLC0415

    run_command(marshal_run, "marshal-run")
