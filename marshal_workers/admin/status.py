"""`marshal-admin status`: who holds each partition of a group, its offset, lag and freshness.

The reading is `status_read`'s, the refreshing view `status_watch`'s; ``--go-topic`` reads a Go
fleet's log (`goread`).
"""

from __future__ import annotations

import contextlib
import sys

import click

from marshal_workers.admin.goread import go_status
from marshal_workers.admin.options import (
    connection,
    go_hb_option,
    go_topic_option,
    group_of,
    group_option,
    read_timeout_option,
)
from marshal_workers.admin.status_read import UnknownGroupError, run_status
from marshal_workers.admin.status_watch import watch_status
from marshal_workers.config.toolconfig import FleetSettings, fleet_options


@click.command()
@fleet_options
@group_option()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@read_timeout_option
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
