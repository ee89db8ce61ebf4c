"""`marshal-admin init`, `status` and `dump`: parse options, then call `admin.operations`.

Every command takes ``--config FILE.toml`` (the fleet's file) and the fleet settings it needs
(`toolconfig`), each also from a ``MARSHAL_*`` environment variable, with marshal-run's
precedence. The heartbeat interval, partitioner and admin list must be the workers': status and
dump verdicts (fresh, unknown, stale, granted, rejected) depend on them. A command on one group
takes those not given from the group's settings recorded in the log (`operations.for_group`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from marshal_workers.admin.goread import go_dump, go_status
from marshal_workers.admin.operations import FOLD_SETTINGS, Connection, run_dump, run_init
from marshal_workers.admin.statusread import UnknownGroupError, run_status
from marshal_workers.admin.watch import watch_status
from marshal_workers.config.toolconfig import FleetSettings, fleet_options
from marshal_workers.protocol.gofold import GO_HEARTBEAT_INTERVAL_S

DEFAULT_READ_TIMEOUT_S = 60.0
F = TypeVar("F", bound=Callable[..., Any])


def connection(fleet: FleetSettings) -> Connection:
    """The coordination log's place and fold settings, from the fleet's merged settings; the
    fold settings not given (flag, environment, file) follow the group's record in the log."""
    given = frozenset(s for s in FOLD_SETTINGS if fleet.sources.get(s, "default") != "default")
    return Connection(
        fleet.bootstrap_servers,
        fleet.coordination_topic,
        fleet.heartbeat_interval_ms,
        fleet.partitioner,
        fleet.admin_client_ids,
        fleet.kafka,
        given,
    )


def group_of(group: str | None, fleet: FleetSettings) -> str:
    """--group, else the fleet file's (or $MARSHAL_GROUP's) group; a usage error if neither."""
    chosen = group or fleet.group
    if not chosen:
        raise click.UsageError("give --group (or group in the --config file)")
    return chosen


def group_option(what: str = "The consumer group") -> Callable[[F], F]:
    """The ``--group`` of a command that acts on one group (`group_of` resolves it)."""
    return click.option("--group", default=None, help=f"{what} [default: the --config file's].")


go_topic_option = click.option(
    "--go-topic",
    metavar="NAME",
    default=None,
    help="Read NAME as a Marshal Go fleet's coordination topic instead, read-only: keyless "
    "records, any cleanup policy, decided as Go decides (senders' clocks). For migrating.",
)
go_hb_option = click.option(
    "--go-heartbeat-interval",
    "go_hb_s",
    type=click.IntRange(min=1, max=86_400),
    default=GO_HEARTBEAT_INTERVAL_S,
    show_default=True,
    metavar="SECONDS",
    help="The Go fleet's HeartbeatInterval (a constant of the Go library), with --go-topic.",
)


_timeout_option = click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=DEFAULT_READ_TIMEOUT_S,
    show_default=True,
    help="Seconds allowed to read the coordination log to its end.",
)


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
def init(
    *,
    fleet: FleetSettings,
    partitions: int | None,
    replication_factor: int | None,
) -> None:
    """Create the coordination topic, or check an existing one and print what differs.

    Exits 0 if the topic is usable (warnings go to stderr), 1 on a fatal difference.
    """
    conn = connection(fleet)
    run_init(
        conn,
        partitions=partitions or 4,
        replication_factor=replication_factor,
        partitions_requested=partitions is not None,
        out=click.echo,
        warn=lambda line: click.echo(line, err=True),
    )


@click.command()
@fleet_options
@group_option()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_timeout_option
@click.option(
    "--watch",
    "watch_s",
    type=click.FloatRange(min=0.1),
    is_flag=False,
    flag_value=2.0,
    default=None,
    metavar="[SECONDS]",
    help="Refresh every SECONDS (2 if not given), with each partition's lag trend: in place "
    "on a terminal, appended otherwise. Ctrl-C stops.",
)
@click.option(
    "--count",
    type=click.IntRange(min=1),
    default=None,
    help="With --watch: stop after this many refreshes.",
)
@go_topic_option
@go_hb_option
def status(
    *,
    fleet: FleetSettings,
    group: str | None,
    as_json: bool,
    timeout: float,
    watch_s: float | None,
    count: int | None,
    go_topic: str | None,
    go_hb_s: int,
) -> None:
    """Show who holds each partition of a group, its offset, lag and freshness (now). What
    could not be read (a broker down) is listed, and the JSON says "complete": false.

    In an at-most-once group, AMO LOST shows each partition's last loss: "up to N records
    (range A-B, cause, at log time, holder)", records reserved in the log that may never have
    been handled (taken_over, lease_expired, refused, replaced, released, released_under_pause).
    The log cannot tell how far a crashed child got into its range, so N is an upper bound
    (marshal-audit with the ledger gives the exact count). A clean graceful run shows 0."""
    chosen = group_of(group, fleet)
    if watch_s is not None:
        if go_topic is not None:
            raise click.UsageError("--watch does not go with --go-topic")
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends the watch: exit 0
            watch_status(
                connection(fleet),
                chosen,
                interval_s=watch_s,
                count=count,
                timeout_s=timeout,
                as_json=as_json,
                tty=sys.stdout.isatty(),
                out=click.echo,
            )
        return
    if go_topic is not None:
        out = go_status(
            fleet.bootstrap_servers, go_topic, chosen, go_hb_s, as_json, timeout, fleet.kafka
        )
        click.echo(out)
        return
    try:
        click.echo(run_status(connection(fleet), chosen, as_json, timeout))
    except UnknownGroupError as unknown:
        if as_json:  # a script reads stdout: JSON all the same, the line on stderr, exit 1
            click.echo(unknown.answer)
        raise


@click.command()
@fleet_options
@click.option(
    "--group",
    default=None,
    help="Only this group's records (its claims, members, pauses, settings, poison records), "
    "folded with its settings as recorded in the log.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@_timeout_option
@go_topic_option
@go_hb_option
def dump(
    *,
    fleet: FleetSettings,
    group: str | None,
    as_json: bool,
    timeout: float,
    go_topic: str | None,
    go_hb_s: int,
) -> None:
    """Print the decoded coordination log with the verdict on every record.

    One line per record: PARTITION:OFFSET LOG-TIME KEY MESSAGE -> VERDICT[: REASON]; with
    --json, one object per line with partition, offset, log_time, log_time_ms, key, message,
    verdict and reason. Records come in offset order per coordination partition.
    """
    if go_topic is not None:
        if group is not None:
            raise click.UsageError("--group does not go with --go-topic")
        for line in go_dump(
            fleet.bootstrap_servers, go_topic, go_hb_s, as_json, timeout, fleet.kafka
        ):
            click.echo(line)
        return
    for line in run_dump(connection(fleet), as_json, timeout, group=group):
        click.echo(line)
