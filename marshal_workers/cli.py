"""`marshal-run`: parse the options (one table in `settings`), then call `run(config)`."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from marshal_workers.config import run_config
from marshal_workers.entry import run_command
from marshal_workers.run import run
from marshal_workers.settings import SECTIONS, SETTINGS, Setting, help_epilog, resolve

SIGNALS_HELP = """\b
Signals (to the supervisor; systemd: see systemd/README.md):
  TERM       graceful stop: children finish their batch, report, and release
             (children still running after --stop-timeout are killed)
  INT, QUIT  (or a second TERM) immediate stop: children are killed, then
             their claims are released at the last reported position
  HUP        reload the handler code: each child finishes its batch and a fresh
             one (importing the handler anew) takes the same claim, same token,
             same position; no release, no new claim; settings are not re-read
  USR1       log every thread's stack ("stack dump" lines); each child logs its
             own ("stack_dump"): at once, even when stuck in the handler
"""


def _option(setting: Setting) -> Callable[[Any], Any]:
    default = ", ".join(setting.default) if setting.multiple else setting.default
    shown = f" [default: {default}]" if default not in (None, "", ()) else ""
    kind: Any = click.Choice(setting.choices) if setting.choices else click.STRING
    return click.option(
        setting.flag,
        setting.name,
        type=kind,
        multiple=setting.multiple,
        default=None,
        metavar="[" + "|".join(setting.choices) + "]" if setting.choices else setting.metavar,
        help=f"{setting.help}{shown} [env: {setting.env}]",
    )


def _with_settings(command: Callable[..., Any]) -> Callable[..., Any]:
    ordered = sorted(SETTINGS, key=lambda s: SECTIONS.index(s.section))
    for setting in reversed(ordered):
        command = _option(setting)(command)
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

    Signals: TERM stops gracefully, INT or QUIT at once, HUP reloads the handler code, USR1
    dumps stacks (see below). Exit codes: 0 stopped, 2 configuration error, 3 handler failed
    to load, 1 runtime failure.
    """
    config_path = config_file or (
        Path(os.environ["MARSHAL_CONFIG"]) if os.environ.get("MARSHAL_CONFIG") else None
    )
    return run(run_config(resolve(flags, config_path)))


def main() -> None:
    """Entry point of `marshal-run`."""
    run_command(marshal_run, "marshal-run")
