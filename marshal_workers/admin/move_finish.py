"""Finishing a move that stopped after it recorded the new placement (`group_move`, steps 4
and 6), when ``--move`` is run again by the same admin.

A move that stops between recording and lifting (a crash, a timeout, a refusal) leaves the
group paused for days, on its new placement, with some positions not carried yet. Run again
with the same admin client id (and the same window, or no ``--span``/``--first``), the command
finds that state: the group paused by this client id on every partition it follows, and its
settings on home placed by this client id. It then finishes what the first run left:

1. *The old placement.* Home's accepted settings before the move's record (`previous_settings`:
   the cleaner keeps every placed settings record and the newest spread one, so it is there);
   none found: refused, nothing written.
2. *The positions.* The old and new partitions are read again from their start, judged by the
   old placement where no settings say otherwise: each old home's state is what it was when
   the move's settings record reached it (after that record the fold of that partition judges
   the group's records by the new placement and applies none of a claim whose home moved),
   the positions the first run would have carried (`moveplan.carries`).
3. *What is left* (`moveplan.left_to_carry`): a position already on its new home (the first run
   carried it) is kept; one that an operator set there meanwhile (``set-position``) is kept
   and named; the rest are carried by `group_move` as the first run would have
   (`move_carries`), each under the pause;
4. which then lifts the pause.

The first run's wait for the old members (step 5) is not repeated: it cannot be, the members
that ran on the old layout are not known any more. Nothing depends on it for safety: every old
partition holds the moved settings, so from that record on no reader applies a claim of the
group on a partition that is not its new home, and a member still on the old layout exits 6
at its next fold of it; until it does it holds nothing (every claim was released or stale
before the record).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from marshal_workers.admin.moveplan import Carry, carries, left_to_carry, written_on
from marshal_workers.admin.session import AdminSession
from marshal_workers.common.errors import MarshalError
from marshal_workers.log.interface import LogError
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.metadata import GroupSettings, placement_text
from marshal_workers.protocol.placement import Placement, PlacementBook, home, spread


def own_stopped_move(
    session: AdminSession, settings: GroupSettings, paused_by_me: bool
) -> Placement | None:
    """The placement a stopped move of this admin recorded for the group, if the group is in
    that state (``paused_by_me``: its pause in force on every followed partition is this client
    id's); None otherwise."""
    placed = settings.placement
    if placed is None or not paused_by_me or settings.client_id != session.client_id:
        return None
    return placed


def previous_settings(session: AdminSession, group: str, timeout_s: float) -> GroupSettings | None:
    """The group's settings accepted on its home before the ones accepted last (the move's),
    read from home's start; None if home shows none before them."""
    at = home(group, session.log.num_partitions)
    world = session.worlds.get(at)
    new = None if world is None else world.group_settings.get(group)
    accepted: list[GroupSettings] = []

    def seen(event: ev.Event) -> None:
        if isinstance(event, ev.GroupSettingsRecorded) and event.group == group:
            accepted.append(event.settings)

    _read_from_start(session, [at], timeout_s, seen)
    if new is None:
        return None
    earlier = [s for s in accepted if s.placement != new.placement]
    return earlier[-1] if earlier else None


@dataclass(frozen=True, slots=True)
class Unfinished:
    """What a stopped move left: the settings before it, and of the carries it planned those
    not made (``left``), those whose new home holds another position (``kept``, with it), and
    how many are made."""

    before: GroupSettings
    left: tuple[Carry, ...]
    kept: tuple[tuple[Carry, int], ...]
    made: int


def unfinished(
    session: AdminSession,
    group: str,
    new: Placement,
    *,
    timeout_s: float,
    progress: Callable[[str], object],
) -> Unfinished:
    """Steps 1 to 3 of the module docstring (the carries themselves are `group_move`'s)."""
    before = previous_settings(session, group, timeout_s)
    if before is None:
        raise MarshalError(
            f"group {group} is paused after a move to {placement_text(new)} by this admin, but "
            "its home shows no settings from before the move: not finished; set the positions "
            "its 'to carry:' lines printed and not 'carried' (set-position), then lift the "
            "pause (release-group --for 0)"
        )
    n = session.log.num_partitions
    old = before.placement or spread(n, before.partitioner)
    progress(
        f"finishing the stopped move of group {group} from {placement_text(before.placement)} "
        f"to {placement_text(new)}"
    )
    cfg = session.reader.config
    known = {g: p for g, p in cfg.placements.entries if g != group}
    if before.placement is not None:
        known[group] = before.placement  # (spread: judged spread where nothing says otherwise)
    session.reader.config = replace(cfg, placements=PlacementBook.of(known))
    _read_from_start(session, written_on(group, old, new), timeout_s)
    planned = carries(session.worlds, group, old, new)
    left, kept = left_to_carry(session.worlds, planned)
    for carry, there in kept:
        progress(
            f"kept: {carry.key.topic}/{carry.key.partition} at {there} on partition "
            f"{carry.new_partition} (set there since; the move had {carry.offset})"
        )
    return Unfinished(before, left, kept, len(planned) - len(left) - len(kept))


def _read_from_start(
    session: AdminSession,
    partitions: Sequence[int],
    timeout_s: float,
    on_event: Callable[[ev.Event], object] | None = None,
) -> None:
    """Follow exactly ``partitions`` with new worlds, folded from their first record."""
    session.reader.follow(partitions, from_start=True)
    try:
        session.reader.catch_up(timeout_s, on_event=on_event)
    except LogError as exc:
        raise MarshalError(str(exc)) from None
