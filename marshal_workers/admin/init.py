"""`marshal-admin init`: create the coordination topic, or check an existing one."""

from __future__ import annotations

from collections.abc import Callable

import click

from marshal_workers.admin.connection import Connection
from marshal_workers.admin.options import connection
from marshal_workers.common.errors import MarshalError
from marshal_workers.config.toolconfig import FleetSettings, fleet_options
from marshal_workers.fleet.brokercheck import cluster_heartbeat_check
from marshal_workers.log.topicadmin import admin_client, ensure_coordination_topic


@click.command()
@fleet_options
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
@click.option(
    "--spread-groups",
    is_flag=True,
    help="A new topic's new groups are spread over every partition, as before placement "
    "(members of older versions can then join it)  [default: placed].",
)
@click.option(
    "--enable-placement",
    is_flag=True,
    help="Make an existing topic's new groups placed (once every member runs a version that "
    "places groups: older members refuse to start once the old topic record is compacted "
    "away). Existing groups keep their layout.",
)
def init(
    *,
    fleet: FleetSettings,
    partitions: int | None,
    replication_factor: int | None,
    spread_groups: bool,
    enable_placement: bool,
) -> None:
    """Create the coordination topic, or check an existing one and print what differs.

    Exits 0 if the topic is usable (warnings go to stderr), 1 on a fatal difference.
    """
    if spread_groups and enable_placement:
        raise click.UsageError("--spread-groups and --enable-placement contradict each other")
    conn = connection(fleet)
    run_init(
        conn,
        partitions=partitions or 4,
        replication_factor=replication_factor,
        partitions_requested=partitions is not None,
        out=click.echo,
        warn=lambda line: click.echo(line, err=True),
        placed=not spread_groups,
        enable_placement=enable_placement,
    )


def run_init(
    conn: Connection,
    *,
    partitions: int,
    replication_factor: int | None,
    partitions_requested: bool,
    out: Callable[[str], None],
    warn: Callable[[str], None],
    placed: bool = False,
    enable_placement: bool = False,
) -> None:
    """Create the coordination topic or check the existing one; MarshalError if unusable.
    ``placed``: a topic created now places its new groups; ``enable_placement``: an existing
    one does from now on (`ensure_coordination_topic`)."""
    result = ensure_coordination_topic(
        conn.bootstrap_servers,
        conn.coordination_topic,
        partitions,
        replication_factor,
        partitions_requested=partitions_requested,
        extra_config=conn.kafka,
        placed=placed,
        enable_placement=enable_placement,
    )
    info = result.topic
    verb = "created" if result.created else "found"
    out(
        f"{verb} coordination topic {info.name} on {conn.bootstrap_servers}: "
        f"{info.partitions} partition(s), replication factor {info.replication_factor}, "
        f"message.timestamp.type={info.config.get('message.timestamp.type')}"
    )
    if result.recorded_partitions is not None:
        how = "recorded now" if result.newly_recorded else "as recorded at init"
        out(
            f"partition count pinned at {result.recorded_partitions} ({how}): never change it; "
            "see docs/operating.md to move a fleet to a new coordination topic"
        )
        layout = (
            "placed on a few partitions each (members of versions before placement refuse "
            "to start on it)"
            if result.placed
            else "spread over every partition (`init --enable-placement` places them)"
        )
        out(f"new groups are {layout}; existing groups keep their layout")
    for diff in result.differences:
        if not diff.fatal:
            warn(str(diff))
    said = cluster_heartbeat_check(
        admin_client(conn.bootstrap_servers, conn.kafka),
        conn.heartbeat_interval_ms / 1000,
        topic=conn.coordination_topic,
    )
    if said is not None:
        warn(f"warning: {said[1]}")
    fatal = [d for d in result.differences if d.fatal]
    if fatal:
        more = f" (and {len(fatal) - 1} more)" if len(fatal) > 1 else ""
        raise MarshalError(f"{fatal[0]}{more}")
