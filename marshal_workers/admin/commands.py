"""`marshal-admin init`, `status` and `dump`: parse options, then call `admin.operations`.

Every command takes the same connection options, each also from a ``MARSHAL_*`` environment
variable. The heartbeat interval must be the one the workers use: status and dump verdicts
(fresh, unknown, stale, granted, rejected) depend on it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from marshal_workers.admin.operations import Connection, run_dump, run_init, run_status
from marshal_workers.admin.options import admin_ids, admin_ids_option
from marshal_workers.config import DEFAULT_ADMIN_CLIENT_IDS
from marshal_workers.protocol import Partitioner

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_HEARTBEAT_S = 10.0
DEFAULT_READ_TIMEOUT_S = 60.0

F = TypeVar("F", bound=Callable[..., Any])


def connection_options(func: F) -> F:
    """Add --bootstrap-servers, --coordination-topic, --heartbeat-interval, --partitioner."""
    options = [
        click.option(
            "--bootstrap-servers",
            envvar="MARSHAL_BOOTSTRAP_SERVERS",
            default=DEFAULT_BOOTSTRAP,
            show_default=True,
            show_envvar=True,
            help="Kafka bootstrap servers, HOST:PORT[,HOST:PORT...].",
        ),
        click.option(
            "--coordination-topic",
            envvar="MARSHAL_COORDINATION_TOPIC",
            default="__marshal",
            show_default=True,
            show_envvar=True,
            help="The Marshal coordination topic.",
        ),
        click.option(
            "--heartbeat-interval",
            envvar="MARSHAL_HEARTBEAT_INTERVAL",
            type=click.FloatRange(min=0.001),
            default=DEFAULT_HEARTBEAT_S,
            show_default=True,
            show_envvar=True,
            help="Heartbeat interval in seconds; must match the workers' (it decides freshness).",
        ),
        click.option(
            "--partitioner",
            envvar="MARSHAL_PARTITIONER",
            type=click.Choice([p.value for p in Partitioner]),
            default=Partitioner.SPEC.value,
            show_default=True,
            show_envvar=True,
            help="How claims map to coordination partitions; must match the workers'.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _connection(
    bootstrap_servers: str,
    coordination_topic: str,
    heartbeat_interval: float,
    partitioner: str,
    admin_client_ids: tuple[str, ...] = DEFAULT_ADMIN_CLIENT_IDS,
) -> Connection:
    return Connection(
        bootstrap_servers,
        coordination_topic,
        max(1, int(heartbeat_interval * 1000)),  # as the workers: truncated to ms
        Partitioner(partitioner),
        admin_ids(admin_client_ids),
    )


_timeout_option = click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=DEFAULT_READ_TIMEOUT_S,
    show_default=True,
    help="Seconds allowed to read the coordination log to its end.",
)


@click.command()
@connection_options
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=None,
    help="Partitions of a new coordination topic  [default: 4]. Never change it later.",
)
@click.option(
    "--replication-factor",
    type=click.IntRange(min=1),
    default=None,
    help="Replication factor of a new topic  [default: min(3, brokers)].",
)
def init(
    *,
    bootstrap_servers: str,
    coordination_topic: str,
    heartbeat_interval: float,
    partitioner: str,
    partitions: int | None,
    replication_factor: int | None,
) -> None:
    """Create the coordination topic, or check an existing one and print what differs.

    Exits 0 if the topic is usable (warnings go to stderr), 1 on a fatal difference.
    """
    conn = _connection(bootstrap_servers, coordination_topic, heartbeat_interval, partitioner)
    run_init(
        conn,
        partitions=partitions or 4,
        replication_factor=replication_factor,
        partitions_requested=partitions is not None,
        out=click.echo,
        warn=lambda line: click.echo(line, err=True),
    )


@click.command()
@connection_options
@admin_ids_option
@click.option("--group", required=True, help="The consumer group.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_timeout_option
def status(
    *,
    bootstrap_servers: str,
    coordination_topic: str,
    heartbeat_interval: float,
    partitioner: str,
    admin_client_ids: tuple[str, ...],
    group: str,
    as_json: bool,
    timeout: float,
) -> None:
    """Show who holds each partition of a group, its offset, lag and freshness (now)."""
    conn = _connection(
        bootstrap_servers, coordination_topic, heartbeat_interval, partitioner, admin_client_ids
    )
    click.echo(run_status(conn, group, as_json, timeout))


@click.command()
@connection_options
@admin_ids_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@_timeout_option
def dump(
    *,
    bootstrap_servers: str,
    coordination_topic: str,
    heartbeat_interval: float,
    partitioner: str,
    admin_client_ids: tuple[str, ...],
    as_json: bool,
    timeout: float,
) -> None:
    """Print the decoded coordination log with the verdict on every record.

    One line per record: PARTITION:OFFSET LOG-TIME KEY MESSAGE -> VERDICT[: REASON]; with
    --json, one object per line with partition, offset, log_time, log_time_ms, key, message,
    verdict and reason. Records come in offset order per coordination partition.
    """
    conn = _connection(
        bootstrap_servers, coordination_topic, heartbeat_interval, partitioner, admin_client_ids
    )
    for line in run_dump(conn, as_json, timeout):
        click.echo(line)
