"""The `marshal-admin` command group: it only parses, then calls what does the work."""

from __future__ import annotations

import click

from marshal_workers.admin.acls_command import acls
from marshal_workers.admin.commands import dump, init, status
from marshal_workers.admin.data_commands import produce_command, topic
from marshal_workers.admin.demo import demo
from marshal_workers.admin.group_commands import import_go, release_group, set_position
from marshal_workers.admin.record_commands import retry_record, skip_record
from marshal_workers.admin.repin_cli import repin_partition_count
from marshal_workers.admin.settings_cli import group_settings
from marshal_workers.common.consolescripts import run_command
from marshal_workers.localkafka.cli import kafka


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Operate marshal-workers: a local Kafka, the coordination topic, group status, data
    topics and records."""


cli.add_command(kafka)
cli.add_command(demo)
cli.add_command(init)
cli.add_command(repin_partition_count)
cli.add_command(status)
cli.add_command(dump)
cli.add_command(release_group)
cli.add_command(set_position)
cli.add_command(group_settings)
cli.add_command(import_go)
cli.add_command(skip_record)
cli.add_command(retry_record)
cli.add_command(topic)
cli.add_command(produce_command)
cli.add_command(acls)


def main() -> None:
    """Entry point of `marshal-admin`."""
    run_command(cli, "marshal-admin")
