"""The plan of a group's move to another placement (pure: what `group_move` writes, and why
it may not).

A move (`marshal-admin group-settings --move`) changes where a group's claims are coordinated
while the group is paused and no claim of it is held. What it writes follows from the fold of
the old placement's partitions alone:

- the new placement: ``span`` partitions from ``first``, for the topic's N, with the group's
  partitioner, and a ``token_base`` above every fencing token the group had: a token is its
  placement's base plus the offset of the record that won (or took over) the claim, on the
  claim's partition, so every old token is below the old base plus that partition's end
  offset (`moved_token_base`); a sink that fences by token then takes the new holders' writes;
- where its settings go: every partition of old and new placement and the group's home, so that
  every reader of either judges the group's records by the new placement from then on;
- each data claim's position, carried to the claim's new home: ``resume_offset(state, AMO)``
  = max(committed, reserved), which an ALO group (nothing reserved) reads as its committed
  position; a record an operator skipped (not yet moved past) is carried past;
- refusals: a claim whose record is parked (its holder runs nothing until an operator decides)
  or whose position is unknown after compaction: the move would forget the first and guess the
  second. The operator resolves them first (`skip-record`, `retry-record`, `set-position`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from marshal_workers.protocol.members import is_member_key
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.placement import Placement, auto_span, home, reads
from marshal_workers.protocol.rationalizer import World, resume_offset
from marshal_workers.protocol.recordfailures import active
from marshal_workers.protocol.wire import ClaimKey, Partitioner


@dataclass(frozen=True, slots=True)
class Carry:
    """A data claim's position, to be set on its new home."""

    key: ClaimKey
    old_partition: int
    new_partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class MovePlan:
    """What a move writes: the new placement, the partitions its settings (and pause) go on,
    and each position carried."""

    group: str
    old: Placement
    new: Placement
    partitions: tuple[int, ...]  # home first (a member that locates the group finds it there)
    carries: tuple[Carry, ...]


def moved_token_base(old: Placement, ends: Mapping[int, int]) -> int:
    """A token base above every fencing token of the old placement: max over its partitions
    of (old base + that partition's end offset) (``ends``: each partition's next offset)."""
    return max((old.token_base + ends[p] for p in old.window), default=old.token_base)


def new_placement(
    group: str,
    old: Placement,
    *,
    span: int | None,
    first: int | None,
    claims: int,
    partitioner: Partitioner,
    token_base: int = 0,
) -> Placement:
    """The placement to move to: ``span`` (else a placed group's own span, a spread group's
    auto span for ``claims``) partitions from ``first`` (else the group's home) of the old
    placement's N, with ``token_base`` (`moved_token_base` once the old partitions' ends are
    known); ValueError (one line) for numbers that are no placement. (A placed group moved
    with the auto span would change span unasked, and its members configured with their span
    restart into exit 2.)"""
    n = old.partitions
    own = auto_span(claims, n) if old.legacy else old.span
    chosen_span = own if span is None else span
    start = home(group, n) if first is None else first
    return Placement(n, start, chosen_span, token_base, partitioner)  # (checked there)


def claim_keys(worlds: Mapping[int, World], group: str, old: Placement) -> list[ClaimKey]:
    """The group's data claims the fold knows, each on its old home (member claims aside)."""
    found = {
        key
        for p, world in worlds.items()
        for key in world.claims
        if key.group == group
        and not is_member_key(key)
        and old.partition_of(key.topic, key.partition) == p
    }
    return sorted(found)


def refusals(worlds: Mapping[int, World], group: str, old: Placement) -> list[str]:
    """Why the group may not move now (one short reason per claim), or nothing."""
    out = []
    for key in claim_keys(worlds, group, old):
        world = worlds[old.partition_of(key.topic, key.partition)]
        state = world.claims[key]
        position = resume_offset(state, Mode.AMO)
        poison = active(world.poison.get(key), position)
        if state.position_unknown and position is None:
            out.append(f"{key.topic}/{key.partition}: position unknown (set it: set-position)")
        elif poison is not None and poison.parked and not poison.skipped:
            out.append(
                f"{key.topic}/{key.partition}: record {poison.offset} parked "
                "(resolve it: skip-record or retry-record)"
            )
    return out


def carries(
    worlds: Mapping[int, World], group: str, old: Placement, new: Placement
) -> tuple[Carry, ...]:
    """Each data claim with a position, and where its position goes."""
    out = []
    for key in claim_keys(worlds, group, old):
        at = old.partition_of(key.topic, key.partition)
        world = worlds[at]
        position = resume_offset(world.claims[key], Mode.AMO)
        if position is None:
            continue  # never handled: a new holder starts where any first holder would
        poison = active(world.poison.get(key), position)
        if poison is not None and poison.skipped:
            position = max(position, poison.offset + 1)  # what its holder would have done
        out.append(Carry(key, at, new.partition_of(key.topic, key.partition), position))
    return tuple(out)


def left_to_carry(
    worlds: Mapping[int, World],
    planned: Iterable[Carry],
    claimed_since: Callable[[int, int | None], bool],
) -> tuple[tuple[Carry, ...], tuple[tuple[Carry, int], ...]]:
    """Of a stopped move's ``planned`` carries: those not made yet, and those whose new home
    holds a position set since the move by an operator (kept, with it). A claim on its new home
    counts only if it was won since the move's settings record there (``claimed_since(partition,
    token)``: only the pausing admin may claim, so it is a carry or a ``set-position``) and
    released since (a claim won and never released holds its position from before); any other
    state there is from before the move (a window the group lived in before, the claim's old
    home) and is carried over."""
    left: list[Carry] = []
    kept: list[tuple[Carry, int]] = []
    for carry in planned:
        world = worlds.get(carry.new_partition)
        state = None if world is None else world.claims.get(carry.key)
        if (
            state is None
            or not state.released  # won and never released (the run died between): its
            or not claimed_since(carry.new_partition, state.token)  # position is older
        ):
            left.append(carry)
            continue
        there = resume_offset(state, Mode.AMO)
        if there is None:
            left.append(carry)
        elif there != carry.offset:
            kept.append((carry, there))
    return tuple(left), tuple(kept)


def written_on(group: str, old: Placement, new: Placement) -> tuple[int, ...]:
    """The partitions a move pauses and records its settings on: every partition of either
    placement and the group's home, home first."""
    at = home(group, new.partitions)
    rest = sorted((reads(group, old) | reads(group, new)) - {at})
    return (at, *rest)


def plan_move(worlds: Mapping[int, World], group: str, old: Placement, new: Placement) -> MovePlan:
    """The move of ``group`` from ``old`` to ``new`` as the fold of the old partitions
    (``worlds``) says: its partitions and its carried positions."""
    return MovePlan(group, old, new, written_on(group, old, new), carries(worlds, group, old, new))


def count_claims(keys: Iterable[ClaimKey]) -> int:
    """The claims an auto span counts: the data claims, and one for the members."""
    return sum(1 for _ in keys) + 1
