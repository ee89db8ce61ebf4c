"""`marshal-admin set-position`: parse the target, then run `set_position_run` (which says how
the group's position is moved, as the protocol says)."""

from __future__ import annotations

import click

from marshal_workers.admin.options import (
    checked,
    client_id_option,
    connection,
    echo_err,
    group_of,
    group_option,
    wait_option,
)
from marshal_workers.admin.set_position_run import run_set_position
from marshal_workers.admin.targets import Kind, TargetSpec, parse_offsets, parse_time
from marshal_workers.config.toolconfig import FleetSettings, fleet_options


@click.command("set-position")
@fleet_options
@group_option()
@click.option("--topic", required=True, help="The data topic whose position to set.")
@click.option("--to-earliest", is_flag=True, help="Every partition to its first stored offset.")
@click.option(
    "--to-latest",
    is_flag=True,
    help="Every partition to its end when it is set (skip everything).",
)
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
    "offset); the end when it is set where there is none.",
)
@click.option(
    "--new-group",
    is_flag=True,
    help="Set the position of a group the log has no record of yet (before its first member "
    "starts, or on a new coordination topic). Without it such a group is refused: a typo "
    "would leave a group of that name in the log.",
)
@click.option(
    "--new-topic",
    is_flag=True,
    help="Set the group's position on a topic it has no claim on yet. Without it such a "
    "topic is refused, as a likely typo.",
)
@click.option("--dry-run", is_flag=True, help="Print the plan (current -> target) and stop.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@client_id_option
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
    new_group: bool,
    new_topic: bool,
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
            checked("--group", group_of(group, fleet)),
            topic,
            spec,
            dry_run=dry_run,
            as_json=as_json,
            client_id=checked("--client-id", client_id),
            timeout_s=timeout,
            progress=echo_err,
            new_group=new_group,
            new_topic=new_topic,
        )
    )
