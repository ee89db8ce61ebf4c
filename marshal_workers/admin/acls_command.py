"""`marshal-admin acls`: print (or apply) the ACLs one role needs; parsing only (`acls` works)."""

from __future__ import annotations

import click

from marshal_workers.admin.acls import ROLE_NAMES, acls_for, apply_acls, render
from marshal_workers.config.toolconfig import FleetSettings, fleet_options
from marshal_workers.log.topicadmin import admin_client


@click.command("acls")
@fleet_options
@click.option(
    "--role", type=click.Choice(ROLE_NAMES), required=True, help="What the principal does."
)
@click.option("--principal", required=True, metavar="User:NAME", help="Whom the ACLs allow.")
@click.option(
    "--group", default=None, help="The group it works for [default: the --config file's]."
)
@click.option("--topic", "topics", multiple=True, metavar="TOPIC", help="A data topic (repeat).")
@click.option(
    "--dlq-topic",
    "dlq_topics",
    multiple=True,
    metavar="TOPIC",
    help="A dead-letter topic the workers write (on_failure dlq; repeat).",
)
@click.option(
    "--apply",
    "apply_them",
    is_flag=True,
    help="Create them through the Admin API (as a principal allowed to: Alter on the cluster).",
)
def acls(
    fleet: FleetSettings,
    role: str,
    principal: str,
    group: str | None,
    topics: tuple[str, ...],
    dlq_topics: tuple[str, ...],
    apply_them: bool,
) -> None:
    """Print exactly the ACLs ROLE needs (one per line: ALLOW PRINCIPAL OPERATION RESOURCE
    NAME), or create them with --apply. The table is docs/operating.md's."""
    wanted = acls_for(
        role,
        principal,
        fleet.coordination_topic,
        group=group or fleet.group,
        topics=topics,
        dlq_topics=dlq_topics,
    )
    for line in render(wanted):
        click.echo(line)
    if not topics and role not in {"auditor", "init"}:
        click.echo("acls: no --topic given: no grant on data topics", err=True)
    if apply_them:
        apply_acls(admin_client(fleet.bootstrap_servers, fleet.kafka), wanted)
        click.echo(f"acls: created {len(wanted)} ACL(s) for {principal}", err=True)
