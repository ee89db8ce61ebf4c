"""`marshal-run`'s command: parse the options (one table in `settings`), then call
`run(config)`. Imported by the entry point (`cli.main`) once the fork server has started."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from marshal_workers.config.runconfig import run_config
from marshal_workers.config.settings import SECTIONS, SETTINGS, help_epilog, resolve
from marshal_workers.config.toolconfig import config_path, setting_option
from marshal_workers.supervisor.run import run

SIGNALS_HELP = """\b
Signals (to the supervisor; systemd: see systemd/README.md):
  TERM       graceful stop: children finish their batch, report, and release
             (children still running after --stop-timeout are killed)
  INT, QUIT  (or a second TERM) immediate stop: children are killed, then
             their claims are released at the last reported position
  HUP        reload the handler code: each child finishes its batch and a fresh
             one (importing the handler anew) takes the same claim, same token,
             same position; no release, no new claim; settings are not re-read
  USR1       log every thread's stack ("stack_dump" lines); each child logs its
             own: at once, even when stuck in the handler
"""


def _with_settings(command: Callable[..., Any]) -> Callable[..., Any]:
    ordered = sorted(SETTINGS, key=lambda s: SECTIONS.index(s.section))
    for setting in reversed(ordered):
        command = setting_option(setting)(command)
    return command


@click.command(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=f"{help_epilog()}\n\n{SIGNALS_HELP}",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path),
    default=None,
    metavar="FILE.toml",
    help="Read settings from a TOML file. [env: MARSHAL_CONFIG]",
)
@_with_settings
def marshal_run(config_file: Path | None, **flags: Any) -> int:
    """Run a supervisor: claim a fair share of the group's partitions through the coordination
    log and run one child process per claimed partition with the handler.

    \b
    Example:
      marshal-run --handler mypkg:handle --mode amo --topic orders --group shop.billing

    The handler is imported with the working directory first on sys.path (as gunicorn and
    uvicorn do), in the supervisor and in every child: a module in the directory marshal-run
    starts in needs no PYTHONPATH. A handler that cannot be imported is reported with the
    sys.path entries searched.

    Signals: TERM stops gracefully, INT or QUIT at once, HUP reloads the handler code, USR1
    dumps stacks (see below). Exit codes: 0 stopped, 1 runtime failure, 2 configuration
    error (a missing --topic too), 3 handler failed to load, 4 the coordination topic's
    partition count changed (do not restart), 5 a Marshal Go fleet writes to the group,
    6 the group's placement moved (restart it: it then finds the new one).
    """
    return run(run_config(resolve(flags, config_path(config_file))))
