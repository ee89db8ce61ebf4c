"""`marshal-admin release-group` and `set-position`: parse options, then call `admin.pause` and
`admin.position`.

Both write to the coordination log as an admin client (``--client-id``, default
``marshal-admin``), which must be in the fleet's ``admin_client_ids``; and both fold the log
with ``--admin-client-id``, which must be the fleet's list (see docs/operating.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from marshal_workers.admin.commands import connection, go_hb_option, group_of, group_option
from marshal_workers.admin.goimport import run_import_go
from marshal_workers.admin.operations import ADMIN_CLIENT_ID
from marshal_workers.admin.pause import run_release_group
from marshal_workers.admin.position import run_set_position
from marshal_workers.admin.targets import Kind, TargetSpec, parse_offsets, parse_time
from marshal_workers.common.errors import ConfigError
from marshal_workers.config.toolconfig import FleetSettings, fleet_options
from marshal_workers.protocol.wire import validate_name

DEFAULT_WAIT_S = 60.0

F = TypeVar("F", bound=Callable[..., Any])


def wait_option(help: str, default: float = DEFAULT_WAIT_S) -> Callable[[F], F]:
    """The ``--timeout`` of the commands that read the log and wait on the fleet."""
    return click.option(
        "--timeout",
        type=click.FloatRange(min=0.1),
        default=default,
        show_default=True,
        help=help,
    )


_client_id_option = click.option(
    "--client-id",
    envvar="MARSHAL_ADMIN_CLIENT_ID",
    default=ADMIN_CLIENT_ID,
    show_default=True,
    show_envvar=True,
    help="The admin client id this command writes as (one of the fleet's admin_client_ids).",
)


def _checked(label: str, value: str) -> str:
    """``value`` checked for the wire format; ConfigError (exit 2) naming ``label`` if bad."""
    try:
        return validate_name(label, value)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _err(line: str) -> None:
    click.echo(line, err=True)


@click.command("release-group")
@fleet_options
@group_option("The group to pause")
@click.option(
    "--until",
    metavar="TIME",
    default=None,
    help="Pause until TIME: ISO 8601 (UTC unless it has an offset) or Unix seconds, judged on "
    "the broker's clock. A past time lifts the pause.",
)
@click.option(
    "--for",
    "for_s",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Pause for SECONDS from now (broker time). 0 lifts the pause.",
)
@_client_id_option
@wait_option("Seconds allowed to read the coordination log.")
def release_group(
    *,
    fleet: FleetSettings,
    group: str | None,
    until: str | None,
    for_s: float | None,
    client_id: str,
    timeout: float,
) -> None:
    """Pause a group: its workers release their partitions, and nobody claims until the pause
    ends (or is lifted with --for 0). Writes ReleaseGroup to every coordination partition and
    prints the log's verdict. Exit 0 if in force (or lifted), 1 if refused (not an admin)."""
    if (until is None) == (for_s is None):
        raise click.UsageError("give exactly one of --until and --for")
    conn = connection(fleet)
    until_s = parse_time(until, "--until") // 1000 if until is not None else None
    click.echo(
        run_release_group(
            conn,
            _checked("--group", group_of(group, fleet)),
            until_s=until_s,
            for_s=for_s,
            client_id=_checked("--client-id", client_id),
            timeout_s=timeout,
        )
    )


@click.command("set-position")
@fleet_options
@group_option()
@click.option("--topic", required=True, help="The data topic whose position to set.")
@click.option("--to-earliest", is_flag=True, help="Every partition to its first stored offset.")
@click.option("--to-latest", is_flag=True, help="Every partition to its end (skip everything).")
@click.option(
    "--to-offset",
    metavar="P=O[,P=O...]",
    default=None,
    help="The listed partitions to these offsets (next offset to read); others unchanged.",
)
@click.option(
    "--to-datetime",
    metavar="ISO8601",
    default=None,
    help="Every partition to its first record at or after this time (UTC unless it has an "
    "offset); the end where there is none.",
)
@click.option("--dry-run", is_flag=True, help="Print the plan (current -> target) and stop.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_client_id_option
@wait_option(
    "Seconds to wait for the holders to release (and to read the log). On timeout the "
    "pause is lifted and nothing moves."
)
def set_position(
    *,
    fleet: FleetSettings,
    group: str | None,
    topic: str,
    to_earliest: bool,
    to_latest: bool,
    to_offset: str | None,
    to_datetime: str | None,
    dry_run: bool,
    as_json: bool,
    client_id: str,
    timeout: float,
) -> None:
    """Set a group's position on a topic: pause the group, wait until its workers have
    released the partitions, claim them as the admin client, write the new offsets, release,
    and lift the pause. If a step fails, the old offsets are restored and the command exits 1
    saying so. Progress goes to stderr, the result to stdout."""
    chosen = [to_earliest, to_latest, to_offset is not None, to_datetime is not None]
    if sum(chosen) != 1:
        raise click.UsageError(
            "give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime"
        )
    if to_offset is not None:
        spec = TargetSpec(Kind.OFFSETS, offsets=parse_offsets(to_offset))
    elif to_datetime is not None:
        spec = TargetSpec(Kind.DATETIME, time_ms=parse_time(to_datetime, "--to-datetime"))
    else:
        spec = TargetSpec(Kind.EARLIEST if to_earliest else Kind.LATEST)
    conn = connection(fleet)
    click.echo(
        run_set_position(
            conn,
            _checked("--group", group_of(group, fleet)),
            topic,
            spec,
            dry_run=dry_run,
            as_json=as_json,
            client_id=_checked("--client-id", client_id),
            timeout_s=timeout,
            progress=_err,
        )
    )


@click.command("import-go")
@fleet_options
@click.option(
    "--go-topic",
    required=True,
    metavar="NAME",
    help="The Marshal Go fleet's coordination topic (read-only), on --bootstrap-servers.",
)
@go_hb_option
@group_option("The consumer group to move")
@click.option("--dry-run", is_flag=True, help="Print the plan (current -> Go's position) and stop.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per topic.")
@_client_id_option
@wait_option("Seconds allowed to read each log (and to wait for holders, as set-position).")
def import_go(
    *,
    fleet: FleetSettings,
    go_topic: str,
    go_hb_s: int,
    group: str | None,
    dry_run: bool,
    as_json: bool,
    client_id: str,
    timeout: float,
) -> None:
    """Migrate a group from Marshal Go: read the Go fleet's coordination topic (read-only,
    folded as Go folds it) and set the group's positions in our coordination topic to where the
    Go fleet stopped, with set-position's machinery. Refuses while the Go fleet still holds a
    partition of the group. Stop the Go fleet, run this, then start marshal-run: no record is
    skipped, and none is handled twice beyond what at-least-once allows."""
    click.echo(
        run_import_go(
            connection(fleet),
            _checked("--go-topic", go_topic),
            _checked("--group", group_of(group, fleet)),
            go_hb_s=go_hb_s,
            dry_run=dry_run,
            as_json=as_json,
            client_id=_checked("--client-id", client_id),
            timeout_s=timeout,
            progress=_err,
        )
    )
