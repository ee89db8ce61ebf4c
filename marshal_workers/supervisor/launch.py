"""What `marshal-run` does before its own imports: start the fork server.

The fork server imports the child's modules (about 0.1-0.2 s of CPU) before it can fork the
first child; the supervisor imports click, the configuration, structlog and the Kafka client
(about 0.2 s) before it can claim anything. Started first thing (`start_fork_server`), the
server's imports run on the other core while the supervisor's run on this one, instead of after
them. What the server must have at its start is settled here, cheaply, as `run` would later:

- the working directory first on ``sys.path`` (`working_directory_on_path`): the server and
  every child inherit it;
- systemd's variables (`NOTIFY_ENV`) out of the environment while it starts (and put back for
  `systemd.SystemdNotify`, which takes them out of the supervisor's): no child notifies.

Not for ``-h``/``--help``: nothing runs. A usage or configuration error is found only once the
options are parsed, after the start: the server then dies with the supervisor (its parent-death
signal, `childlink.forkserver`), as it does however the supervisor ends. The server is started
from the main thread, which lives as long as the supervisor (the parent-death signal follows
the thread that started it). `run` calls `fork_server` again: the running server is kept.

Imports the standard library, the fork server's module and the handler's path rule only.
"""

from __future__ import annotations

from collections.abc import Sequence

from marshal_workers.childlink.forkserver import fork_server
from marshal_workers.common.workdir import working_directory_on_path

# systemd's variables for the service's main process (`systemd`), never a child's
NOTIFY_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
HELP_OPTIONS = frozenset({"-h", "--help"})


def wants_help(args: Sequence[str]) -> bool:
    """Whether the command line asks for the help text (click's help options, anywhere)."""
    return any(arg in HELP_OPTIONS for arg in args)


def start_fork_server(args: Sequence[str]) -> bool:
    """Start the fork server now unless ``args`` (the command line, program name aside) ask
    for help; whether it was started."""
    if wants_help(args):
        return False
    working_directory_on_path()
    fork_server(withheld=NOTIFY_ENV)
    return True
