"""`marshal-admin topic create|list|describe`: data topics on any cluster (``--bootstrap-servers``
and the ``[kafka]`` table of ``--config``), printed as lines or (``--json``) one JSON object.
`create_topic` makes one; what list and describe show is `topic_view`'s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import click
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from marshal_workers.admin.options import connection, json_option
from marshal_workers.admin.topic_view import describe_topic, list_topics
from marshal_workers.clients.rdkafka import error_text
from marshal_workers.common.errors import MarshalError
from marshal_workers.config.toolconfig import FleetSettings, fleet_options, kafka_options
from marshal_workers.log import topicadmin
from marshal_workers.log.topicadmin import ADMIN_TIMEOUT_S, admin_client, await_topic


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
@json_option
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


kafka_timeout_option = click.option(
    "--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait for Kafka."
)


@topic.command("list")
@fleet_options
@json_option
@kafka_timeout_option
def topic_list(*, fleet: FleetSettings, as_json: bool, timeout: float) -> None:
    """List the data topics: partitions, and the groups of the coordination log that work on
    each (internal __ topics and the coordination topic left out). --json: {"topics":
    [{"topic", "partitions", "groups"}]}."""
    click.echo(list_topics(connection(fleet), as_json, timeout))


@topic.command("describe")
@fleet_options
@click.argument("name")
@json_option
@kafka_timeout_option
def topic_describe(*, fleet: FleetSettings, name: str, as_json: bool, timeout: float) -> None:
    """Describe topic NAME: each partition's low and high watermark, and every group's claim on
    it (holder, state, offset, lag; a slice's with ordering key or unordered). --json:
    {"topic", "groups", "partitions": [{"partition", "low", "high", "claims": [...]}]}."""
    click.echo(describe_topic(connection(fleet), name, as_json, timeout))


def create_topic(
    bootstrap_servers: str,
    name: str,
    partitions: int,
    replication_factor: int | None = None,
    *,
    if_not_exists: bool = False,
    kafka: Mapping[str, str] | None = None,
    timeout_s: float = ADMIN_TIMEOUT_S,
) -> dict[str, object]:
    """Create topic ``name`` (replication factor: the broker's default unless given); what was
    done as a JSON object. An existing topic is an error unless ``if_not_exists``."""
    admin = admin_client(bootstrap_servers, kafka)
    info = topicadmin.describe_topic(admin, bootstrap_servers, name, timeout_s)
    if info is not None:
        if not if_not_exists:
            raise MarshalError(
                f"topic {name} already exists on {bootstrap_servers} ({info.partitions} partitions)"
            )
        return _said(name, False, info.partitions, info.replication_factor)
    new = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor or -1)
    try:
        admin.create_topics([new], request_timeout=timeout_s)[name].result(timeout=timeout_s)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS or not if_not_exists:
            raise MarshalError(f"cannot create topic {name}: {error_text(exc)}") from None
    except TimeoutError:
        raise MarshalError(
            f"cannot create topic {name}: no answer within {timeout_s:.0f}s"
        ) from None
    made = await_topic(admin, bootstrap_servers, name, timeout_s)
    return _said(name, True, made.partitions, made.replication_factor)


def _said(name: str, created: bool, partitions: int, rf: int) -> dict[str, object]:
    return {"topic": name, "created": created, "partitions": partitions, "replication_factor": rf}
