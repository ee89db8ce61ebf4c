"""`marshal-admin topic create|list|describe` and `marshal-admin produce`: parse options,
then call `admin.data` or `admin.topicview`. They work on any cluster (``--bootstrap-servers``,
and the ``[kafka]`` table of ``--config``) and print what they did or found, as lines or
(``--json``) one JSON object."""

from __future__ import annotations

import json
from typing import IO

import click

from marshal_workers.admin.commands import connection
from marshal_workers.admin.data import create_topic, parse_records, produce
from marshal_workers.admin.topicview import describe_topic, list_topics
from marshal_workers.config.toolconfig import FleetSettings, fleet_options, kafka_options

_json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")


@click.group()
def topic() -> None:
    """Data topics on any cluster."""


@topic.command("create")
@kafka_options
@click.argument("name")
@click.option("--partitions", type=click.IntRange(min=1), required=True, help="Partitions.")
@click.option(
    "--replication-factor",
    type=click.IntRange(min=1),
    default=None,
    help="Replication factor  [default: the broker's default.replication.factor].",
)
@click.option(
    "--if-not-exists", is_flag=True, help="An existing topic is not an error (it is left as is)."
)
@_json_option
def topic_create(
    *,
    fleet: FleetSettings,
    name: str,
    partitions: int,
    replication_factor: int | None,
    if_not_exists: bool,
    as_json: bool,
) -> None:
    """Create topic NAME with --partitions N.

    Exits 0 once the topic exists as made, 1 if it existed already (unless --if-not-exists) or
    could not be made. --json: {"topic", "created", "partitions", "replication_factor"}.
    """
    said = create_topic(
        fleet.bootstrap_servers,
        name,
        partitions,
        replication_factor,
        if_not_exists=if_not_exists,
        kafka=fleet.kafka,
    )
    if as_json:
        click.echo(json.dumps(said))
    elif said["created"]:
        click.echo(
            f"created topic {name}: {said['partitions']} partition(s), "
            f"replication factor {said['replication_factor']}"
        )
    else:
        click.echo(f"topic {name} exists: {said['partitions']} partition(s)")


_timeout_option = click.option(
    "--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait for Kafka."
)


@topic.command("list")
@fleet_options
@_json_option
@_timeout_option
def topic_list(*, fleet: FleetSettings, as_json: bool, timeout: float) -> None:
    """List the data topics: partitions, and the groups of the coordination log that work on
    each (internal __ topics left out). --json: {"topics": [{"topic", "partitions",
    "groups"}]}."""
    click.echo(list_topics(connection(fleet), as_json, timeout))


@topic.command("describe")
@fleet_options
@click.argument("name")
@_json_option
@_timeout_option
def topic_describe(*, fleet: FleetSettings, name: str, as_json: bool, timeout: float) -> None:
    """Describe topic NAME: each partition's low and high watermark, and every group's claim on
    it (holder, state, offset, lag; a slice's with ordering key or unordered). --json:
    {"topic", "groups", "partitions": [{"partition", "low", "high", "claims": [...]}]}."""
    click.echo(describe_topic(connection(fleet), name, as_json, timeout))


@click.command("produce")
@kafka_options
@click.argument("topic_name", metavar="TOPIC")
@click.option(
    "--file",
    "source",
    type=click.File("rb"),  # decoded line by line: a line that is not UTF-8 is named
    default="-",
    show_default="stdin",
    help="Read the records from this file, one per line.",
)
@click.option(
    "--key-field",
    default=None,
    metavar="K",
    help="Lines are JSON objects, written as they are, keyed by their field K. Without it, "
    'lines are "KEY<TAB>VALUE" (a line without a tab: no key, the line is the value).',
)
@_json_option
def produce_command(
    *,
    fleet: FleetSettings,
    topic_name: str,
    source: IO[bytes],
    key_field: str | None,
    as_json: bool,
) -> None:
    """Write records to TOPIC, one per line of --file or stdin (blank lines skipped).

    Every line is checked before anything is written (a bad line: exit 2, nothing written);
    keys are hashed as the Java producer hashes them. Exits 0 once every record is
    acknowledged (acks=all). --json: {"topic", "records", "partitions": {P: {"records",
    "first_offset", "last_offset"}}}.
    """
    records = parse_records(source, key_field)
    done = produce(fleet.bootstrap_servers, topic_name, records, kafka=fleet.kafka)
    click.echo(json.dumps(done.to_json()) if as_json else done.line())
