"""`marshal-admin release-group`: pause a group (or lift its pause) and print the log's verdict.

The pause itself, one ReleaseGroup per coordination partition, is `pause`'s.
"""

from __future__ import annotations

import time

import click

from marshal_workers.admin.connection import Connection, group_session, unknown_group
from marshal_workers.admin.options import (
    checked,
    client_id_option,
    connection,
    group_of,
    group_option,
    wait_option,
)
from marshal_workers.admin.pause import pause_for, write_pause
from marshal_workers.admin.targets import parse_time
from marshal_workers.common.errors import MarshalError
from marshal_workers.config.toolconfig import FleetSettings, fleet_options
from marshal_workers.protocol.groupstatus import group_known


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
@click.option(
    "--new-group",
    is_flag=True,
    help="Pause a group the log has no record of yet (before its first member starts). "
    "Without it such a group is refused: a typo would pause nothing that runs, and leave a "
    "group of that name in the log.",
)
@client_id_option
@wait_option("Seconds allowed to read the coordination log.")
def release_group(
    *,
    fleet: FleetSettings,
    group: str | None,
    until: str | None,
    for_s: float | None,
    new_group: bool,
    client_id: str,
    timeout: float,
) -> None:
    """Pause a group: its workers release their partitions, and nobody claims until the pause
    ends (or is lifted with --for 0). Writes ReleaseGroup to every coordination partition (a
    placed group's: its home and window) and prints the log's verdict. Exit 0 if in force (or
    lifted), 1 if refused (not an admin)."""
    if (until is None) == (for_s is None):
        raise click.UsageError("give exactly one of --until and --for")
    conn = connection(fleet)
    until_s = parse_time(until, "--until") // 1000 if until is not None else None
    click.echo(
        run_release_group(
            conn,
            checked("--group", group_of(group, fleet)),
            until_s=until_s,
            for_s=for_s,
            client_id=checked("--client-id", client_id),
            timeout_s=timeout,
            new_group=new_group,
        )
    )


def run_release_group(
    conn: Connection,
    group: str,
    *,
    until_s: int | None,
    for_s: float | None,
    client_id: str,
    timeout_s: float,
    new_group: bool = False,
) -> str:
    """`marshal-admin release-group`: pause (or lift) and return the log's verdict as a line;
    MarshalError (exit 1) if the log refused it, or if it has no record of ``group`` and
    ``new_group`` is not given (nothing is written)."""
    lifting = for_s == 0 or (until_s is not None and until_s <= time.time())
    with group_session(conn, group, client_id, timeout_s) as (session, _):
        known = group_known(session.worlds, group)
        if lifting and not known:  # (a lift written would leave a group of that name)
            return (
                f"group {group} has no pause to lift: {conn.coordination_topic} has no record "
                "of it; nothing written"
            )
        if not new_group and not known:
            raise MarshalError(
                f"{unknown_group(conn, group)}; nothing written (to pause a group before its "
                "first member starts, add --new-group)"
            )
        if until_s is not None:
            outcome = write_pause(session, group, until_s)
        else:
            outcome = pause_for(session, group, for_s or 0.0)
    if not outcome.accepted:
        raise MarshalError(outcome.summary())
    return outcome.summary()
