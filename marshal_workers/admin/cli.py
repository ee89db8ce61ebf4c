"""The `marshal-admin` command group: parsing only; each command calls a function that does the work."""

from __future__ import annotations

import sys

import click

from marshal_workers.errors import MarshalError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Operate marshal-workers: a local Kafka, the coordination topic, group status."""


def main() -> None:
    """Entry point: run the click group, turning a MarshalError into one line and its exit code."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except MarshalError as exc:
        click.echo(f"marshal-admin: error: {exc}", err=True)
        sys.exit(exc.exit_code)
