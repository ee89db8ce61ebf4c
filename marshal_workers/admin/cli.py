"""The `marshal-admin` command group: it only parses, then calls what does the work."""

from __future__ import annotations

import click

from marshal_workers.admin.acls import acls
from marshal_workers.admin.demo import demo
from marshal_workers.admin.dump import dump
from marshal_workers.admin.group_settings import group_settings
from marshal_workers.admin.import_go import import_go
from marshal_workers.admin.init import init
from marshal_workers.admin.produce import produce_command
from marshal_workers.admin.records import retry_record, skip_record
from marshal_workers.admin.release_group import release_group
from marshal_workers.admin.repin import repin_partition_count
from marshal_workers.admin.set_position import set_position
from marshal_workers.admin.status import status
from marshal_workers.admin.topic import topic
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
