"""`marshal-admin repin-partition-count`: parse options, then call `admin.repin`."""

from __future__ import annotations

import click

from marshal_workers.admin.commands import _timeout_option, connection
from marshal_workers.admin.repin import run_repin
from marshal_workers.config.toolconfig import FleetSettings, fleet_options


@click.command("repin-partition-count")
@fleet_options
@click.option("--dry-run", is_flag=True, help="Check and say what would be written; write nothing.")
@_timeout_option
def repin_partition_count(*, fleet: FleetSettings, dry_run: bool, timeout: float) -> None:
    """Re-pin the coordination topic's partition count at the count the broker shows, after a
    forged (or mistaken) CoordinationTopic record made members exit 4 and init refuse.

    Refused (exit 1) when the log's claims are coordinated for the recorded count and not the
    broker's: then the topic really changed, and the fleet must move to a new topic
    (docs/operating.md, 'Changing the coordination topic')."""
    run_repin(connection(fleet), dry_run=dry_run, timeout_s=timeout, out=click.echo)
