"""`marshal-admin group-settings`: show or change the settings a group's fleet must share.

The heartbeat interval, the partitioner, the admin ids and the mode are recorded per group in
the log (`metadata.GroupSettings`, written by the group's first member). A member or admin whose
own differ is refused (`fleet.groupcheck`, `ensure_group_settings`; an admin acts on either
mode). Changing them is this command (the mode with ``--mode``):

1. Pause the group (as ``release-group``): the members release their data partitions.
2. Wait until every data claim of the group is released or stale, judged with the **old**
   heartbeat interval (a holder's lease is 2*HB_old from its last heartbeat).
3. Record the new settings on every coordination partition. Each running member folds the
   record before the lift of step 5 (same partition, earlier offset), stops gracefully and
   exits 2; systemd does not restart it: restart it with the new settings.
4. Wait until every member that ran with the old settings has left: its member claim is
   released, stale by HB_old, or taken over by a new instance (a restart with new settings).
5. Lift the pause. Members with the new settings claim the group's partitions.

No data claim is held under one interval while judged under another: claims made with the old
interval end (step 2) before the new one is recorded, and members with the old interval are
gone (step 4) before anyone may claim again. If step 2 or 4 times out, the pause is lifted only
in step 2 (nothing changed yet); after the record, the group stays paused until its pause
expires, and the command says which members still run.
"""

from __future__ import annotations

import json
from typing import Any

import click

from marshal_workers.admin.connection import (
    Connection,
    admin_session,
    admin_settings,
    group_session,
    unknown_group,
)
from marshal_workers.admin.group_move import move_group
from marshal_workers.admin.options import (
    checked,
    client_id_option,
    connection,
    echo_err,
    group_of,
    group_option,
    json_option,
    wait_option,
)
from marshal_workers.admin.pause import lift_pause, others_pause, pause_for, pause_in_force
from marshal_workers.admin.session import AdminSession
from marshal_workers.admin.settings_steps import (
    SETTLE_BUDGET_S,
    Progress,
    describe,
    live_members,
    record_settings,
    recorded,
    wait_for_holders,
    wait_until_none,
)
from marshal_workers.common.errors import MarshalError
from marshal_workers.config.toolconfig import FleetSettings, fleet_options
from marshal_workers.protocol.groupstatus import group_known, iso_ms
from marshal_workers.protocol.metadata import GroupSettings, placement_text
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.slicing import Slicing

DEFAULT_WAIT_S = 120.0


def change_settings(
    session: AdminSession, new: GroupSettings, *, timeout_s: float, progress: Progress
) -> str:
    """Steps 1 to 5 of the module docstring; one line saying what changed."""
    group = new.group_id
    old = recorded(session, group)
    if old is None:
        record_settings(session, new)
        return f"group {group} settings recorded: {describe(new)}"
    if old.same_settings(new) and old.mode is new.mode:
        return f"group {group} settings unchanged: {describe(old)}"
    if old.same_settings(new) and old.mode is None:  # a mode recorded where there was none
        # nothing a member decides with changes; members of the other mode stop by themselves
        # (gracefully: each hands its partitions over at its position), the rest run on
        record_settings(session, new)
        return f"group {group} mode recorded: {describe(new)}; members of the other mode stop"
    old_hb = old.heartbeat_interval_ms
    need_s = 2 * timeout_s + SETTLE_BUDGET_S + 4 * old_hb / 1000
    others_pause(session, group, "not changed")
    held = pause_in_force(session, group)
    if held is not None and held[1] - session.now_ms() > need_s * 1000:
        raise MarshalError(
            f"group {group} is paused by this client until {iso_ms(held[1])} (log time), longer "
            "than this change needs (a stopped move's hold, a release-group pause, or a longer "
            "change's own): not changed; finish a stopped move first (run it again), else lift "
            "the pause (release-group --for 0) or run the change with a --timeout that "
            "outlasts it"
        )
    pause = pause_for(session, group, need_s)
    if not pause.accepted:
        raise MarshalError(pause.summary())
    progress(pause.summary())
    what = "the holders to release (judged with the old heartbeat interval)"
    wait_for_holders(session, group, old_hb, timeout_s, what, progress)
    before = live_members(session, group, old_hb)
    record_settings(session, new)
    progress(f"recorded: {describe(new)}; members with the old settings now stop (exit 2)")

    def still_running() -> list[str]:
        now_members = live_members(session, group, old_hb)
        return sorted(f"{k.topic.removeprefix('__member.')}" for k, i in before & now_members)

    try:
        wait_until_none(
            session, still_running, timeout_s, "members with the old settings to stop", progress
        )
    except MarshalError as exc:
        raise MarshalError(
            f"{exc}; the new settings are recorded; the group stays paused until its pause "
            "expires (stop those members, then lift: release-group --for 0)"
        ) from None
    lift = lift_pause(session, group)
    if not lift.accepted:
        raise MarshalError(f"settings changed, but the pause could not be lifted: {lift.refusal}")
    return f"group {group} settings changed from {describe(old)} to {describe(new)}; pause lifted"


def run_move(
    conn: Connection,
    group: str,
    *,
    span: int | None,
    first: int | None,
    client_id: str,
    timeout_s: float,
    progress: Progress,
) -> str:
    """`marshal-admin group-settings --move`: move the group to a window of ``span``
    coordination partitions from ``first`` (`group_move`), folding with its recorded settings."""
    with group_session(conn, group, client_id, timeout_s) as (session, _):
        return move_group(
            session, group, span=span, first=first, timeout_s=timeout_s, progress=progress
        )


def settings_json(group: str, current: GroupSettings | None) -> dict[str, Any]:
    """The show form's ``--json``: ``{"group", "recorded"}``, and with recorded settings
    ``"heartbeat_interval_ms", "partitioner", "admin_client_ids"`` (sorted; null: any client
    may pause), ``"ordering", "workers_per_partition"``, ``"placement"`` (null: spread over
    every partition; else ``{"first", "span", "partitions", "token_base"}``), ``"mode"`` (null:
    not recorded: a group from before modes were recorded)."""
    if current is None:
        return {"group": group, "recorded": False}
    ids, cut, where = current.admin_client_ids, current.slicing or Slicing(), current.placement
    return {
        "group": group,
        "recorded": True,
        "heartbeat_interval_ms": current.heartbeat_interval_ms,
        "partitioner": current.partitioner.value,
        "admin_client_ids": None if ids is None else sorted(ids),
        "ordering": cut.ordering.value,
        "workers_per_partition": cut.count,
        "placement": None
        if where is None
        else {"first": where.first, "span": where.span, "partitions": where.partitions,
              "token_base": where.token_base},
        "mode": None if current.mode is None else current.mode.value,
    }  # fmt: skip


def run_group_settings(
    conn: Connection,
    group: str,
    *,
    change: bool,
    client_id: str,
    timeout_s: float,
    progress: Progress,
    as_json: bool = False,
    mode: Mode | None = None,
) -> str:
    """`marshal-admin group-settings`: show the recorded settings (``as_json``: as
    `settings_json`), or change them to this command's (``change``; the mode to ``mode``, else
    kept)."""
    with admin_session(conn, client_id, timeout_s, read_only=not change, group=group) as session:
        if not change and not group_known(session.worlds, group):  # a typo: nothing to show
            raise MarshalError(unknown_group(conn, group))
        if not change:
            current = recorded(session, group)
            if as_json:
                return json.dumps(settings_json(group, current))
            if current is None:
                return f"group {group} has no recorded settings (its first member records them)"
            where = placement_text(current.placement)  # spread, or first:span:N:token_base
            return f"group {group}: {describe(current)} placement={where}"
        mine = admin_settings(conn, group, client_id)
        current = recorded(session, group)
        new = GroupSettings(
            int(session.wall()), session.instance_id, client_id, group,
            mine.heartbeat_interval_ms, mine.partitioner, mine.admin_client_ids,
            # the ordering is the group's for good: this command never changes it
            Slicing() if current is None or current.slicing is None else current.slicing,
            session.placement,  # where the group is coordinated: unchanged (moves: not here)
            mode if mode is not None or current is None else current.mode,
        )  # fmt: skip
        return change_settings(session, new, timeout_s=timeout_s, progress=progress)


@click.command("group-settings")
@fleet_options
@group_option()
@click.option(
    "--change",
    is_flag=True,
    help="Record this command's --heartbeat-interval, --partitioner and --admin-client-id as "
    "the group's: pause, wait for the holders, record, wait for the old members to stop, lift.",
)
@click.option(
    "--mode",
    type=click.Choice([m.value for m in Mode]),
    default=None,
    help="With --change: the group's delivery mode (default: the recorded one). Members of the "
    "other mode stop (exit 2); start them again with this one.",
)
@click.option(
    "--move",
    is_flag=True,
    help="Move the group's coordination to a window of --span partitions from --first (a "
    "spread group's too): pause, wait for the holders, record, carry each position to its new "
    "home, wait for the old members to stop (exit 6), lift.",
)
@click.option(
    "--span",
    type=click.IntRange(min=1),
    default=None,
    help="With --move: the window's partitions (default: a placed group's own span; a spread "
    "group's one per 10,000 claims).",
)
@click.option(
    "--first",
    type=click.IntRange(min=0),
    default=None,
    help="With --move: the window's first partition (default: the group's home).",
)
@client_id_option
@wait_option(
    "Seconds allowed for each wait: the holders releasing and the old members stopping "
    "(--change and --move), and, with --move, the positions being carried.",
    default=DEFAULT_WAIT_S,
)
@json_option
def group_settings(
    *,
    fleet: FleetSettings,
    group: str | None,
    change: bool,
    mode: str | None,
    move: bool,
    span: int | None,
    first: int | None,
    client_id: str,
    timeout: float,
    as_json: bool,
) -> None:
    """Show the settings a group's members and admins must share (--json: one object), change
    them (--change), or move the group's coordination (--move).

    Members whose settings differ from the group's are refused at start (exit 2); running ones
    stop when the settings change (exit 2): restart them with the new settings. After a move
    they stop and exit 6: restarted (systemd does), they find the group's new placement."""
    if change and move:
        raise click.UsageError("--change and --move are two commands: give one")
    if mode is not None and not change:
        raise click.UsageError("--mode goes with --change")
    if not move and (span is not None or first is not None):
        raise click.UsageError("--span and --first go with --move")
    if as_json and (change or move):
        raise click.UsageError("--json goes with the show form (no --change, no --move)")
    if move:
        click.echo(
            run_move(
                connection(fleet),
                checked("--group", group_of(group, fleet)),
                span=span,
                first=first,
                client_id=checked("--client-id", client_id),
                timeout_s=timeout,
                progress=echo_err,
            )
        )
        return
    click.echo(
        run_group_settings(
            connection(fleet),
            checked("--group", group_of(group, fleet)),
            change=change,
            client_id=checked("--client-id", client_id),
            timeout_s=timeout,
            progress=echo_err,
            as_json=as_json,
            mode=None if mode is None else Mode(mode),
        )
    )
