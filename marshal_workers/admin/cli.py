"""The `marshal-admin` command group: it only parses, then calls what does the work."""

from __future__ import annotations

import sys

import click
from confluent_kafka import KafkaException

from marshal_workers.admin.commands import dump, init, status
from marshal_workers.admin.demo import demo
from marshal_workers.admin.group_commands import release_group, set_position
from marshal_workers.errors import EXIT_RUNTIME, MarshalError
from marshal_workers.localkafka.cli import kafka


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Operate marshal-workers: a local Kafka, the coordination topic, group status."""


cli.add_command(kafka)
cli.add_command(demo)
cli.add_command(init)
cli.add_command(status)
cli.add_command(dump)
cli.add_command(release_group)
cli.add_command(set_position)


def main() -> None:
    """Entry point: run the click group, turning a MarshalError into one line and its exit code."""
    try:
        result = cli.main(standalone_mode=False)
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
    except KafkaException as exc:
        click.echo(f"marshal-admin: error: Kafka: {exc.args[0] if exc.args else exc}", err=True)
        sys.exit(EXIT_RUNTIME)
    # with standalone_mode=False, click returns ctx.exit(n)'s code instead of raising
    sys.exit(result if isinstance(result, int) else 0)
