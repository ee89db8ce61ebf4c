"""`marshal-admin group-settings`: parse options, then call `admin.group_settings`."""

from __future__ import annotations

import click

from marshal_workers.admin.commands import connection, group_of, group_option
from marshal_workers.admin.group_commands import _checked, _client_id_option, _err, wait_option
from marshal_workers.admin.group_settings import run_group_settings
from marshal_workers.config.toolconfig import FleetSettings, fleet_options

DEFAULT_WAIT_S = 120.0


@click.command("group-settings")
@fleet_options
@group_option()
@click.option(
    "--change",
    is_flag=True,
    help="Record this command's --heartbeat-interval, --partitioner and --admin-client-id as "
    "the group's: pause, wait for the holders, record, wait for the old members to stop, lift.",
)
@_client_id_option
@wait_option(
    "Seconds allowed for each wait (holders releasing, old members stopping).",
    default=DEFAULT_WAIT_S,
)
def group_settings(
    *,
    fleet: FleetSettings,
    group: str | None,
    change: bool,
    client_id: str,
    timeout: float,
) -> None:
    """Show the settings a group's members and admins must share, or change them (--change).

    Members whose settings differ from the group's are refused at start (exit 2); running ones
    stop when the settings change (exit 2): restart them with the new settings."""
    click.echo(
        run_group_settings(
            connection(fleet),
            _checked("--group", group_of(group, fleet)),
            change=change,
            client_id=_checked("--client-id", client_id),
            timeout_s=timeout,
            progress=_err,
        )
    )
