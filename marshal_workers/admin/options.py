"""The click options and helpers the `marshal-admin` command modules share.

Every command takes ``--config FILE.toml`` (the fleet's file) and the fleet settings it needs
(`toolconfig.fleet_options`), each also from a ``MARSHAL_*`` environment variable, with
marshal-run's precedence. The heartbeat interval, partitioner and admin list must be the
workers': status and dump verdicts (fresh, unknown, stale, granted, rejected) depend on them. A
command on one group takes those not given from the group's settings recorded in the log
(`connection.for_group`). The commands that write do so as an admin client (``--client-id``,
default ``marshal-admin``), which must be in the fleet's ``admin_client_ids`` (see
docs/operating.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click

from marshal_workers.admin.connection import ADMIN_CLIENT_ID, FOLD_SETTINGS, Connection
from marshal_workers.common.errors import ConfigError
from marshal_workers.config.runconfig import ANY_CLIENT
from marshal_workers.config.runconfig import admin_ids as config_admin_ids
from marshal_workers.config.toolconfig import FleetSettings
from marshal_workers.protocol.gofold import GO_HEARTBEAT_INTERVAL_S
from marshal_workers.protocol.wire import validate_name

DEFAULT_READ_TIMEOUT_S = 60.0
DEFAULT_WAIT_S = 60.0
F = TypeVar("F", bound=Callable[..., Any])


def admin_ids(values: Iterable[str]) -> frozenset[str] | None:
    """The admin list from repeated and comma-separated values (ConfigError if malformed)."""
    ids = tuple(i.strip() for v in values for i in v.replace(" ", ",").split(",") if i.strip())
    try:
        for item in ids:
            if item != ANY_CLIENT:
                validate_name("admin client id", item)
    except ValueError as exc:
        raise ConfigError(f"--admin-client-id: {exc}") from None
    return config_admin_ids(ids)


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


def checked(label: str, value: str) -> str:
    """``value`` checked for the wire format; ConfigError (exit 2) naming ``label`` if bad."""
    try:
        return validate_name(label, value)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def echo_err(line: str) -> None:
    """A progress line, on stderr (the result goes to stdout)."""
    click.echo(line, err=True)


def wait_option(help: str, default: float = DEFAULT_WAIT_S) -> Callable[[F], F]:
    """The ``--timeout`` of the commands that read the log and wait on the fleet."""
    return click.option(
        "--timeout",
        type=click.FloatRange(min=0.1),
        default=default,
        show_default=True,
        help=help,
    )


read_timeout_option = click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=DEFAULT_READ_TIMEOUT_S,
    show_default=True,
    help="Seconds allowed to read the coordination log to its end.",
)

client_id_option = click.option(
    "--client-id",
    envvar="MARSHAL_ADMIN_CLIENT_ID",
    default=ADMIN_CLIENT_ID,
    show_default=True,
    show_envvar=True,
    help="The admin client id this command writes as (one of the fleet's admin_client_ids).",
)

json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")

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
