"""`marshal-admin group-settings --move`: move a group to another placement (a spread group,
over every coordination partition, to a window of ``span`` partitions from ``first``).

A group keeps the layout it was created with: a group from before placement stays spread, and
its members read every partition, until an operator moves it. The move is a settings change
like ``--change`` (`group_settings`), made while the group is paused and nothing of it is held:

1. Pause the group on every partition of the old and the new placement and on its home.
2. Wait until every data claim of the group (on its old home) is released or stale by the
   group's heartbeat interval. Refuse (lift the pause; nothing changed) if a claim's record is
   parked or its position is unknown (`moveplan.refusals`; checked before pausing too).
3. Record the new settings, placed, with a token base above every token the group had
   (`moveplan.moved_token_base`), on those partitions, home first: a member that locates the
   group from now on finds the new placement. From each record on, the fold of that partition
   judges the group's records by the new placement.
4. Carry each data claim's position to its new home while the pause holds: this admin (the
   pausing client, the only one that may claim) claims it there and releases it at
   max(committed, reserved); the pausing client's release sets the position outright, below a
   reservation too (the rationalizer's rule 5). The positions are each old home's as folded up
   to its settings record (after it, a record of a claim whose home moved is not applied
   there), and every old token must be below the token base (else the move stops: another
   admin of the same client id claimed meanwhile). Before each carry the pause must outlast it by
   a margin (2*HB and two writes): it is written again when it would not, and the move stops
   (carrying nothing more) if it ran out. Only a refusal the compaction rule explains is
   claimed again; any other stops the move.
5. Wait until every member that ran on the old placement has left (the pause written again
   first if it would not outlast that wait): each folds the new settings,
   stops gracefully and exits 6 (restartable; started again it locates the new placement and
   waits out the pause).
6. Lift the pause.

So no claim is held while the placement changes, the positions are on the new homes before
anyone but this admin may claim, and the members of the old placement are gone before the
lift. If the command stops after step 3 (a timeout, a crash), the group stays paused (held for
`MOVE_HOLD_S` just before step 3, lifted when the move ends): the command prints every carry
it will make (``to carry:``) before step 3, so
that what is left can be set with ``set-position`` meanwhile (docs/operating.md, "Moving a
group"), or the command run again: it locates the group on its new placement, and if the
pause and the recorded settings are this client id's and the window the same, it finishes
the move (`move_finish`: the carries left, then the lift). Any other move of a paused group
refuses (one line saying what to do), never "nothing to move", nor moves on from there. A
spread group moves only on a topic whose placement is enabled (`init --enable-placement`): a
member from before placement cannot read placed settings and would claim on the old layout.
"""

from __future__ import annotations

from dataclasses import replace

from marshal_workers.admin.move_carries import carry_all, pause_holds
from marshal_workers.admin.move_finish import StoppedMove, stopped_move, unfinished
from marshal_workers.admin.moveplan import (
    Carry,
    MovePlan,
    carries,
    claim_keys,
    count_claims,
    moved_token_base,
    new_placement,
    plan_move,
    refusals,
    written_on,
)
from marshal_workers.admin.pause import lift_pause, pause_for, pause_until
from marshal_workers.admin.session import AdminSession
from marshal_workers.admin.settings_steps import (
    SETTLE_BUDGET_S,
    Progress,
    live_members,
    record_settings,
    recorded,
    wait_for_holders,
    wait_until_none,
)
from marshal_workers.common.errors import ConfigError, MarshalError
from marshal_workers.log.interface import LogError
from marshal_workers.protocol.metadata import METADATA_PARTITION, GroupSettings, placement_text
from marshal_workers.protocol.placement import Placement, spread
from marshal_workers.protocol.rationalizer import pause_of

# From the settings record to the lift the group is held paused this long: a move stopped in
# between (a crash, a refusal) has recorded the new placement with positions not yet carried,
# and a member that claimed once its pause ran out would start at no position (AMO twice, ALO
# with `latest` a skip). Held for days, the group waits for an operator to finish by hand
# (`set-position`, then `release-group --for 0`); the move lifts it when it ends.
MOVE_HOLD_S = 30 * 24 * 3600.0


def move_group(
    session: AdminSession,
    group: str,
    *,
    span: int | None,
    first: int | None,
    timeout_s: float,
    progress: Progress,
) -> str:
    """Steps 1 to 6 of the module docstring; one line saying what moved."""
    settings = recorded(session, group)
    if settings is None:
        raise ConfigError(
            f"group {group} has no recorded settings: start one of its members (it records "
            "them), then move it"
        )
    n = session.log.num_partitions
    old = settings.placement or spread(n, settings.partitioner)
    try:
        target = new_placement(
            group, old, span=span, first=first,
            claims=count_claims(claim_keys(session.worlds, group, old)),
            partitioner=settings.partitioner,
        )  # fmt: skip
    except ValueError as exc:
        raise ConfigError(f"--move: {exc}") from None
    if old.legacy:
        _require_placement_enabled(session)
    if _paused(session, group):  # (a move from a half-carried layout would lose positions)
        stopped = stopped_move(session, group, timeout_s) if _paused_by(session, group) else None
        same = stopped is not None and (span, first) in (
            (None, None), (stopped.new.span, stopped.new.first), (stopped.new.span, None),
            (None, stopped.new.first),
        )  # fmt: skip
        if stopped is not None and same:
            return _finish(session, group, stopped, timeout_s, progress)
        raise MarshalError(
            f"group {group} (at {placement_text(settings.placement)}) is paused: not moved; if "
            "a move stopped after recording, run it again with the same --client-id and "
            "window to finish it, or set each position its 'to carry:' lines printed and not "
            "'carried' (set-position, the same --client-id) before the pause expires, then lift it "
            "(release-group --for 0) and move again if needed"
        )
    if not old.legacy and (old.first, old.span) == (target.first, target.span):
        return f"group {group} is placed at {placement_text(old)} already: nothing to move"
    _refuse(session, group, old, "")  # before anything is written
    session.reader.follow(written_on(group, old, target))
    session.catch_up(timeout_s)
    hb_ms = settings.heartbeat_interval_ms
    # three waits of up to timeout_s (holders, carries, old members), and some
    pause = pause_for(session, group, 3 * timeout_s + SETTLE_BUDGET_S + 4 * hb_ms / 1000)
    if not pause.accepted:
        raise MarshalError(pause.summary())
    progress(pause.summary())
    plan = _plan_when_released(session, group, (old, target), hb_ms, timeout_s, progress)
    before = live_members(session, group, hb_ms)
    _say_carries(plan.carries, progress)  # (what an operator sets by hand if the move stops)
    _hold(session, group, progress)
    _record(session, settings, plan)
    progress(
        f"recorded: placement {placement_text(plan.new)} on partitions {list(plan.partitions)}"
    )
    # each old home's state as folded up to its settings record (after it, a record of a claim
    # whose home moved is no longer applied there), not the plan's from before
    folded = carries(session.worlds, group, old, plan.new)
    _say_carries(tuple(c for c in folded if c not in plan.carries), progress)
    try:
        _tokens_below(session, group, old, plan.new.token_base)
    except MarshalError as exc:
        raise MarshalError(
            f"{exc}; the group is partly moved and stays paused until its pause expires: see "
            "docs/operating.md, 'Moving a group'"
        ) from None
    pause_s = 2 * timeout_s + SETTLE_BUDGET_S + 4 * hb_ms / 1000  # (what an extension gives)
    carry_all(session, group, folded, timeout_s, pause_s, progress)

    pause_holds(session, group, "waiting for the old members", pause_s, progress, timeout_s)

    def still_running() -> list[str]:
        now_members = live_members(session, group, hb_ms)
        return sorted(k.topic.removeprefix("__member.") for k, _ in before & now_members)

    try:
        wait_until_none(session, still_running, timeout_s,
                        "members on the old placement to stop (exit 6)", progress)  # fmt: skip
    except MarshalError as exc:
        raise MarshalError(
            f"{exc}; the group is moved and its positions carried; it stays paused until its "
            "pause expires (stop those members, then lift: release-group --for 0)"
        ) from None
    lift = lift_pause(session, group)
    if not lift.accepted:
        raise MarshalError(f"group moved, but the pause could not be lifted: {lift.refusal}")
    return (
        f"group {group} moved from {placement_text(settings.placement)} to "
        f"{placement_text(plan.new)}; {len(folded)} position{'s' if len(folded) != 1 else ''} "
        "carried; pause lifted"
    )


def _finish(
    session: AdminSession, group: str, move: StoppedMove, timeout_s: float, progress: Progress
) -> str:
    """A stopped move of this admin's, run again (`move_finish`): its settings where they are
    missing, the carries it left, then the pause lifted; one line saying what was finished."""
    left = unfinished(session, group, move, timeout_s=timeout_s, progress=progress)
    if left.lacking:
        again = replace(move.moved, unix_sec=int(session.wall()), instance_id=session.instance_id)
        record_settings(session, again, left.lacking)
        for p in left.lacking:
            taken = session.worlds[p].group_settings.get(group)
            if taken is None or taken.placement != move.new:
                raise MarshalError(
                    f"partition {p} did not take the moved settings: not finished; the group "
                    "stays paused"
                )
        progress(f"recorded: placement {placement_text(move.new)} on partitions "
                 f"{list(left.lacking)} (missing there)")  # fmt: skip
    for carry, there in left.kept:
        progress(
            f"kept: {carry.key.topic}/{carry.key.partition} at {there} on partition "
            f"{carry.new_partition} (set there since the move; it had {carry.offset})"
        )
    _say_carries(left.left, progress)
    pause_s = 2 * timeout_s + SETTLE_BUDGET_S + 4 * session.hb_ms / 1000
    carry_all(session, group, left.left, timeout_s, pause_s, progress)
    lift = lift_pause(session, group)
    if not lift.accepted:
        raise MarshalError(
            f"the move's positions are carried, but the pause could not be lifted: {lift.refusal}"
        )
    return (
        f"group {group}: the stopped move from {placement_text(move.before.placement)} to "
        f"{placement_text(move.new)} is finished; {len(left.left)} positions carried now, "
        f"{left.made} there already, {len(left.kept)} kept as set; pause lifted"
    )


def _plan_when_released(
    session: AdminSession,
    group: str,
    layouts: tuple[Placement, Placement],
    hb_ms: int,
    timeout_s: float,
    progress: Progress,
) -> MovePlan:
    """Steps 2 and the plan of 3, under the pause: wait for the holders, refuse what the
    wait showed, take the token base, check the old tokens below it (else lift the pause).
    ``layouts``: the old placement and the target."""
    old, target = layouts
    wait_for_holders(session, group, hb_ms, timeout_s, "the holders to release", progress)
    try:
        _refuse(session, group, old, "; pause lifted")  # what the wait may have shown
    except MarshalError:
        lift_pause(session, group)
        raise
    plan = plan_move(session.worlds, group, old, _with_token_base(session, target, old, timeout_s))
    try:
        _tokens_below(session, group, old, plan.new.token_base)
    except MarshalError as exc:
        lift_pause(session, group)
        raise MarshalError(f"{exc}; nothing changed; pause lifted") from None
    return plan


def _require_placement_enabled(session: AdminSession) -> None:
    """A spread group moves only on a topic whose placement is enabled: members from before
    placement (which a version-1 topic allows) cannot read placed settings, never exit 6, and
    would go on claiming on the old layout."""
    world = session.worlds.get(METADATA_PARTITION)
    pin = None if world is None else world.topic_record
    if pin is None or not pin.placed:
        raise ConfigError(
            "--move: the coordination topic's placement is not enabled (members from before "
            "placement may run): upgrade every member, then run marshal-admin init "
            "--enable-placement, then move"
        )


def _say_carries(carries: tuple[Carry, ...], progress: Progress) -> None:
    for carry in carries:
        progress(f"to carry: {carry.key.topic}/{carry.key.partition} at {carry.offset} from "
                 f"partition {carry.old_partition} to partition {carry.new_partition}")  # fmt: skip


def _tokens_below(session: AdminSession, group: str, old: Placement, base: int) -> None:
    """Every token of the group's data claims on the old layout is below the moved base (else
    a sink that fences by token would refuse the new holders: stop)."""
    for key in claim_keys(session.worlds, group, old):
        state = session.worlds[old.partition_of(key.topic, key.partition)].claims[key]
        if state.token is not None and state.token >= base:
            raise MarshalError(
                f"{key.topic}/{key.partition}'s token {state.token} is not below the moved "
                f"token base {base}: stopped"
            )


def _paused(session: AdminSession, group: str) -> bool:
    now = session.now_ms()
    return any(pause_of(world, group, now) is not None for world in session.worlds.values())


def _paused_by(session: AdminSession, group: str) -> bool:
    """Whether the group's pause in force on every followed partition is this client id's."""
    return pause_until(session, group) > session.now_ms()


def _refuse(session: AdminSession, group: str, old: Placement, lifted: str) -> None:
    found = refusals(session.worlds, group, old)
    if found:
        raise MarshalError(f"group {group} not moved: {'; '.join(found)}; nothing changed{lifted}")


def _with_token_base(
    session: AdminSession, target: Placement, old: Placement, timeout_s: float
) -> Placement:
    """``target`` with a token base above every token of the old placement: its partitions'
    end offsets now (no claim of the group can be won on them meanwhile: it is paused and
    this admin claims nothing there). Taken after the pause landed on each of them: a
    partition whose records were all deleted reads as end 0 in `end_offsets`, but not with
    the pause's record on it, so its log end counts."""
    try:
        ends = session.log.end_offsets(timeout_s)
    except LogError as exc:
        raise MarshalError(f"reading the coordination partitions' ends: {exc}") from None
    missing = sorted(old.window - set(ends))
    if missing:
        raise MarshalError(f"no end offset for coordination partitions {missing}")
    return replace(target, token_base=moved_token_base(old, ends))


def _record(session: AdminSession, settings: GroupSettings, plan: MovePlan) -> None:
    """Record the moved settings, home first; each partition must have taken them."""
    moved = replace(
        settings,
        unix_sec=int(session.wall()),
        instance_id=session.instance_id,
        client_id=session.client_id,
        placement=plan.new,
    )
    record_settings(session, moved, plan.partitions)
    for p in plan.partitions:
        taken = session.worlds[p].group_settings.get(plan.group)
        if taken is None or taken.placement != plan.new:
            raise MarshalError(
                f"partition {p} did not take the moved settings (the pause expired?): the "
                "group is partly moved; see docs/operating.md, 'Moving a group'"
            )


def _hold(session: AdminSession, group: str, progress: Progress) -> None:
    """Just before the settings are recorded: the pause held for `MOVE_HOLD_S` (lifted when the
    move ends), or the pause lifted and nothing changed."""
    hold = pause_for(session, group, MOVE_HOLD_S)
    if not hold.in_force:
        lift_pause(session, group)
        raise MarshalError(f"holding the pause failed ({hold.summary()}): nothing changed")
    progress(f"held: {hold.summary()} (lifted when the move ends)")
