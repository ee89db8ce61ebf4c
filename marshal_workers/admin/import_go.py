"""`marshal-admin import-go`: seed a group's positions in our coordination log from a Marshal
Go fleet's, so that a team stops the Go fleet and starts ours with no record skipped.

Theory of operation
-------------------
1. Read the Go fleet's topic read-only and fold it as Go does (`admin.goread`, `gofold`): per
   topic-partition of the group, the position the Go fleet would resume at (the offset of its
   last release, else of its last heartbeat: the next offset to read, as ours).
2. Refuse while any of the group's Go claims is still held by Go's own rule (a heartbeat less
   than 2*HB ago by the sender's clock, at our wall clock): the Go fleet must be stopped first,
   or it would go on handling records after the positions were taken.
3. For each topic, set our group's positions with `set-position`'s machinery (pause, wait for
   holders, claim as the admin, heartbeat the offset, release, lift): the positions are in the
   log before any of our members claims. A position outside the records still stored is
   clamped into them, with a note. Partitions the Go fleet never recorded are left as they are.

Records handled by the Go fleet after its last heartbeat and before it stopped are handled
again by ours: what at-least-once allows (a graceful Go shutdown releases at its exact
position, so there are none). Our fleet must not be running on the group yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import click

from marshal_workers.admin.connection import Connection
from marshal_workers.admin.goread import read_go_state
from marshal_workers.admin.options import (
    checked,
    client_id_option,
    connection,
    echo_err,
    go_hb_option,
    group_of,
    group_option,
    wait_option,
)
from marshal_workers.admin.set_position_run import run_set_position
from marshal_workers.admin.targets import KafkaOffsetSource, Kind, TargetSpec
from marshal_workers.common.errors import ConfigError, MarshalError
from marshal_workers.config.toolconfig import FleetSettings, fleet_options
from marshal_workers.protocol.gofold import GoWorld, live_claims, positions

Progress = Callable[[str], None]


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
@client_id_option
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
            checked("--go-topic", go_topic),
            checked("--group", group_of(group, fleet)),
            go_hb_s=go_hb_s,
            dry_run=dry_run,
            as_json=as_json,
            client_id=checked("--client-id", client_id),
            timeout_s=timeout,
            progress=echo_err,
        )
    )


def clamp(
    source: KafkaOffsetSource, topic: str, offsets: Mapping[int, int], progress: Progress
) -> dict[int, int]:
    """The offsets moved into each partition's stored records (low..high), saying so."""
    known = set(source.partitions(topic))
    out: dict[int, int] = {}
    for p, offset in sorted(offsets.items()):
        if p not in known:
            progress(f"note: {topic}[{p}] no longer exists: its Go position {offset} is skipped")
            continue
        low, high = source.watermarks(topic, p)
        fixed = min(max(offset, low), high)
        if fixed != offset:
            why = "deleted by retention" if offset < low else "beyond the end"
            progress(f"note: {topic}[{p}] Go position {offset} is {why}: using {fixed}")
        out[p] = fixed
    return out


def check_stopped(world: GoWorld, group: str, now_s: int) -> None:
    """MarshalError unless every Go claim of ``group`` has lapsed by Go's rule at ``now_s``."""
    live = live_claims(world, group, now_s)
    if live:
        held = ", ".join(
            f"{k.topic}[{k.partition}] by {c.client_id}" for k, c in sorted(live.items())
        )
        wait = 2 * world.heartbeat_interval_s
        raise MarshalError(
            f"the Marshal Go fleet still holds {len(live)} partition(s) of group {group} "
            f"({held}): stop it, wait {wait}s (2 Go heartbeats), then import"
        )


def run_import_go(
    conn: Connection,
    go_topic: str,
    group: str,
    *,
    go_hb_s: int,
    dry_run: bool,
    as_json: bool,
    client_id: str,
    timeout_s: float,
    progress: Progress,
    now_s: int | None = None,
) -> str:
    """Steps 1 to 3 of the module docstring; returns what `set-position` printed per topic."""
    world = read_go_state(conn.bootstrap_servers, go_topic, go_hb_s, timeout_s, conn.kafka)
    found = positions(world, group)
    if not found:
        raise ConfigError(f"the Marshal Go topic {go_topic} has no position of group {group}")
    now = now_s if now_s is not None else int(time.time())
    if dry_run:
        try:
            check_stopped(world, group, now)
        except MarshalError as exc:
            progress(f"warning: {exc}")
    else:
        check_stopped(world, group, now)
    outputs = []
    source = KafkaOffsetSource(conn.bootstrap_servers, conn.kafka, timeout_s)
    try:
        targets = {t: clamp(source, t, offsets, progress) for t, offsets in found.items()}
    finally:
        source.close()
    for topic, offsets in sorted(targets.items()):
        if not offsets:
            continue
        progress(f"{topic}: Go positions {dict(sorted(offsets.items()))}")
        outputs.append(
            run_set_position(
                conn,
                group,
                topic,
                TargetSpec(Kind.OFFSETS, offsets=offsets),
                dry_run=dry_run,
                as_json=as_json,
                client_id=client_id,
                timeout_s=timeout_s,
                progress=progress,
                new_group=True,  # (the group and its topics are the Go fleet's: new to ours)
            )
        )
    return "\n".join(outputs)
