"""Finishing a move that stopped after it recorded the new placement (`group_move`, steps 3,
4 and 6), when ``--move`` is run again by the same admin.

A move that stops between recording and lifting (a crash, a timeout, a refusal) leaves the
group held paused for days, on its new placement, with some positions not carried yet. Run
again with the same admin client id (and the same window, or no ``--span``/``--first``), the
command recognises that state from home's records alone (`stopped_move`):

- the settings accepted last on home are placed, written by this client id, and the
  settings accepted before them had another placement: a move's record (not a ``--change``,
  which keeps the placement, nor a copy);
- the pause in force on home is this client id's and was written before that record: the
  move's hold (`group_move._hold`). A pause written after it (a ``release-group`` once the
  move was done, say) is an operator's: the group is then not a stopped move, and the
  rerun refuses as any move of a paused group does.

It then finishes what the first run left (`unfinished`):

1. *The old placement*: the settings before the move's record on home (the cleaner keeps every
   placed settings record and the newest spread one, so they are there).
2. *The settings everywhere*: a partition of either layout that did not take the move's
   settings (the first run stopped while recording them, home first) gets them now (a record of
   this second: the first writer rule accepts it from the admin whose pause is in force).
3. *The positions*: the old and new partitions are read again from their start, judged by the
   old placement where no settings say otherwise: each old home's state is what it was when
   the move's record reached it (after it, that partition judges the group's records by the new
   placement and applies none of a claim whose home moved), the positions the first run
   planned (`moveplan.carries`).
4. *What is left* (`moveplan.left_to_carry`): a claim on its new home won after the move's
   record there (only this admin may claim while paused) holds a carry (its planned
   position) or a position set since by an operator (kept and named); any other state there
   is from before the move (a window the group lived in before, or the claim's old home) and
   is carried over. `group_move` carries them (`move_carries`) and lifts the pause.

The first run's wait for the old members (step 5) is not repeated: the members that ran on
the old layout are not known any more. Safety does not need it once every partition of
either layout holds the moved settings (step 2): from that record on no reader applies a claim
of the group on a partition that is not its new home, no claim was held when the record was
written, and a member still on the old layout exits 6 at its next fold.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

from marshal_workers.admin.moveplan import Carry, carries, left_to_carry, written_on
from marshal_workers.admin.session import AdminSession
from marshal_workers.common.errors import MarshalError
from marshal_workers.log.interface import LogError
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.metadata import GroupSettings, placement_text
from marshal_workers.protocol.placement import Placement, PlacementBook, home, spread


@dataclass(frozen=True, slots=True)
class StoppedMove:
    """A stopped move of this admin's: the settings before it and its own (on home)."""

    before: GroupSettings
    moved: GroupSettings

    @property
    def new(self) -> Placement:
        """Where the move goes."""
        assert self.moved.placement is not None
        return self.moved.placement


@dataclass(frozen=True, slots=True)
class Unfinished:
    """What a stopped move left: the partitions lacking its settings, and of the carries it
    planned those not made (``left``), those holding a position set since (``kept``, with it),
    and how many are made."""

    lacking: tuple[int, ...]
    left: tuple[Carry, ...]
    kept: tuple[tuple[Carry, int], ...]
    made: int


def stopped_move(session: AdminSession, group: str, timeout_s: float) -> StoppedMove | None:
    """This admin's stopped move of ``group``, read from home's start (the module's two
    conditions); None if home shows none."""
    at = home(group, session.log.num_partitions)
    settings: list[tuple[int, GroupSettings]] = []  # accepted on home: (offset, settings)
    pauses: list[ev.GroupPaused] = []

    def seen(event: ev.Event) -> None:
        if isinstance(event, ev.GroupSettingsRecorded) and event.group == group:
            settings.append((event.coord_offset, event.settings))
        elif isinstance(event, ev.GroupPaused) and event.group == group:
            pauses.append(event)

    _read_from_start(session, [at], timeout_s, seen)
    moves = [
        (offset, was, now)
        for (_, was), (offset, now) in pairwise(settings)
        if now.placement is not None and now.placement != was.placement
    ]
    if not moves or not pauses:
        return None
    offset, before, moved = moves[-1]
    if settings[-1][1].placement != moved.placement or moved.client_id != session.client_id:
        return None  # (another admin's move)
    if moved.mode is None:  # the readable half of the move's pair: the group's mode after it
        moved = replace(moved, mode=settings[-1][1].mode)
    hold = pauses[-1]  # the pause in force (the caller found the group paused by this client)
    if hold.coord_offset > offset or hold.message.client_id != session.client_id:
        return None  # a pause written since the move's record: not the move's hold
    return StoppedMove(before, moved)


def unfinished(
    session: AdminSession,
    group: str,
    move: StoppedMove,
    *,
    timeout_s: float,
    progress: Callable[[str], object],
) -> Unfinished:
    """Steps 1 to 4 of the module docstring, what is read (`group_move` writes)."""
    n = session.log.num_partitions
    before, new = move.before, move.new
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
    since: dict[int, int] = {}  # where the move's settings were accepted, by partition

    def seen(event: ev.Event) -> None:
        if (
            isinstance(event, ev.GroupSettingsRecorded)
            and event.group == group
            and event.settings.placement == new
        ):
            since.setdefault(event.coord_partition, event.coord_offset)

    partitions = written_on(group, old, new)
    _read_from_start(session, partitions, timeout_s, seen)
    lacking = tuple(p for p in partitions if p not in since)
    planned = carries(session.worlds, group, old, new)
    left, kept = left_to_carry(session.worlds, planned, _claimed_since(since, new))
    return Unfinished(lacking, left, kept, len(planned) - len(left) - len(kept))


def _claimed_since(since: Mapping[int, int], new: Placement) -> Callable[[int, int | None], bool]:
    """Whether a claim on partition p whose token is t was won after the move's settings record
    there (the token is the placement's base plus the winning record's offset)."""

    def claimed(partition: int, token: int | None) -> bool:
        at = since.get(partition)
        return at is not None and token is not None and token - new.token_base > at

    return claimed


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
