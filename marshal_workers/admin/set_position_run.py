"""`marshal-admin set-position`: move a group's position on a topic, as the protocol says.

Theory of operation ("Setting Consumer Group Position" in the Marshal protocol)
--------------------------------------------------------------------------------
1. Plan: the target offsets (`admin.targets`) next to the current positions in the fold.
   ``--dry-run`` stops here and writes nothing. A group whose ordering cuts partitions into
   slices (``--ordering key`` or ``unordered``: `protocol.slicing`) has one claim per slice of
   a partition, each with its own position: every slice of a partition is moved to the
   partition's target (a slice takes the partition's records and keeps its own, so the same
   offset is the same point in the partition for each). A target at the partition's end
   (``--to-latest``; ``--to-datetime`` where no record is later) is marked: it is read again
   before step 4 (see there).
2. Pause the group: ReleaseGroup on every coordination partition, expiring after the wait
   timeout plus a margin, so that a crashed admin does not pause the group for ever (it is
   renewed if the moves outlast it).
3. Wait until every claim on the partitions to move is released or stale: the workers release
   their claims when they see the pause, and nobody but the pausing admin may claim.
4. For each partition, as the admin client: ClaimingPartition (it wins: the claim is released
   and the group paused by this client), Heartbeat with the new offset (the pausing client's
   heartbeat sets the position outright, an AMO reservation included), ReleasingPartition at
   the new offset. The move is taken as the fold has it once the claim is held: the holders
   handled on while step 3 waited, so the position to restore on a failure is the one found
   then, not the plan's, and a target at the end is the end read once step 3 is done (once
   per partition, before the first claim), never below the position found (the end read for
   the plan is behind what the holders handled meanwhile: setting it moved the group back, in
   AMO handling those records twice).
5. Lift the pause (a ReleaseGroup whose expire time has passed); the workers claim again and
   start at the new offsets.

A group this client has paused already for longer than the run needs (the days-long hold of
a move that stopped before carrying every position, docs/operating.md "Moving a group", or a
long `release-group` pause) keeps that pause: step 2 writes nothing and step 5 does not lift
it. Replacing it with this run's short pause and lifting that would let members claim at
once: during a stopped move, at positions not carried yet. A pause of this client's that would
lapse during the run is the run's to extend and to lift, as before.

If step 3 times out, nothing has moved: the pause is lifted and the command fails. If a step
of 4 fails, the partitions touched so far get their old positions back by the same dance (an
old AMO reservation too: reserved again after the heartbeat, and kept because those claims are
released only after the pause is lifted), the pause is lifted, and the command fails with one
line saying what was restored (and what a partition with no position before was left at:
`_restore`). Every step is decided by the fold of the log up to its record.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from marshal_workers.admin.connection import Connection, group_session, unknown_group
from marshal_workers.admin.pause import (
    PauseOutcome,
    lift_pause,
    others_pause,
    pause_for,
    pause_until,
)
from marshal_workers.admin.session import AdminError, AdminSession
from marshal_workers.admin.targets import (
    KafkaOffsetSource,
    TargetSpec,
    compute_targets,
    end_target_now,
)
from marshal_workers.common.errors import MarshalError
from marshal_workers.fleet.offsetsink import KafkaOffsetSink
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.groupstatus import group_known, group_topics, iso_ms
from marshal_workers.protocol.members import is_claimable
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import World, claim_label, resume_offset
from marshal_workers.protocol.slicing import split_topic
from marshal_workers.protocol.wire import ClaimKey

Progress = Callable[[str], None]
EndOf = Callable[[int], int]  # a partition's target at its end, read now (`end_target_now`)
MOVE_BUDGET_S = 30.0  # pause time allowed for the moves, beyond the wait for the holders
END_READ_S = 10.0  # the pause kept this much longer per end to read (a watermark request's wait)


def _quiet(_: str) -> None:
    pass


class MoveError(MarshalError):
    """A step of the move was refused by the log."""


# ---- the plan ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionMove:
    """One partition: where the group stands on it now, and where it should go."""

    partition: int
    committed: int | None
    reserved: int | None
    holder: str | None
    state: str
    target: int
    claim_topic: str | None = None  # the slice's claim (``orders+key.2of4``); None: whole
    to_end: bool = False  # target: the end as read for the plan; read again before it is set

    @property
    def old(self) -> int | None:
        """The position to restore: the committed offset (the reservation, if only that)."""
        return self.committed if self.committed is not None else self.reserved

    @property
    def slice_name(self) -> str | None:
        """The slice's name (``key.2of4``), None for a whole partition."""
        if self.claim_topic is None:
            return None
        part = split_topic(self.claim_topic)[1]
        return part.name if part is not None else self.claim_topic

    @property
    def where(self) -> str:
        """The partition, and its slice if it is one: ``3`` or ``3 key.2of4``."""
        name = self.slice_name
        return str(self.partition) if name is None else f"{self.partition} {name}"

    def to_json(self) -> dict[str, object]:
        """The move as a JSON object."""
        return {
            "partition": self.partition,
            "slice": self.slice_name,
            "current": self.committed,
            "reserved": self.reserved,
            "holder": self.holder,
            "state": self.state,
            "target": self.target,
            "target_is_end": self.to_end,
        }


@dataclass(frozen=True, slots=True)
class PositionPlan:
    """The moves of one topic of one group."""

    group: str
    topic: str
    moves: tuple[PartitionMove, ...]

    def key(self, move: PartitionMove) -> ClaimKey:
        """The claim a move sets: the partition's, or its slice's."""
        return ClaimKey(self.group, move.claim_topic or self.topic, move.partition)

    def to_json(self, *, dry_run: bool) -> dict[str, object]:
        """The plan as a JSON object."""
        return {
            "group": self.group,
            "topic": self.topic,
            "dry_run": dry_run,
            "partitions": [m.to_json() for m in self.moves],
        }


def make_plan(
    session: AdminSession,
    group: str,
    topic: str,
    targets: Mapping[int, int],
    ends: Collection[int] = (),
) -> PositionPlan:
    """The plan from the fold as it is now (freshness judged at the session's `now_ms`): one
    move per claim, that is per partition, or per slice of each partition of a sliced group.
    The partitions in ``ends`` have their end as target (`Targets.ends`)."""
    now = session.now_ms()
    claim_topics: list[str | None] = [*slice_topics(session, group, topic)] or [None]
    moves = []
    for p, target in sorted(targets.items()):
        for claim_topic in claim_topics:
            state = session.state(ClaimKey(group, claim_topic or topic, p))
            moves.append(
                PartitionMove(
                    p,
                    state.committed if state else None,
                    state.reserved if state else None,
                    state.holder_client if state else None,
                    claim_label(state, now, session.hb_ms),
                    target,
                    claim_topic,
                    p in ends,
                )
            )
    return PositionPlan(group, topic, tuple(moves))


def slice_topics(session: AdminSession, group: str, topic: str) -> list[str]:
    """The claim topics of ``topic``'s slices if ``group``'s recorded ordering cuts its
    partitions into slices, else [] (the group claims whole partitions)."""
    for world in session.worlds.values():
        settings = world.group_settings.get(group)
        if settings is not None and settings.slicing is not None and settings.slicing.sliced:
            return settings.slicing.claim_topics(topic)
    return []


def render_plan(plan: PositionPlan) -> str:
    """The plan as a table."""
    head = ("PARTITION", "CURRENT", "RESERVED", "TARGET", "STATE", "HOLDER")
    rows = [
        [
            m.where,
            _cell(m.committed),
            _cell(m.reserved),
            f"{m.target}*" if m.to_end else str(m.target),
            m.state,
            _cell(m.holder),
        ]
        for m in plan.moves
    ]
    widths = [max(len(r[i]) for r in [list(head), *rows]) for i in range(len(head))]
    lines = [f"group {plan.group}, topic {plan.topic}"]
    for row in [list(head), *rows]:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    if any(m.to_end for m in plan.moves):
        lines.append(
            "* the end now: read again once the holders have released, and never set below "
            "the position then"
        )
    return "\n".join(lines)


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


# ---- the dance ---------------------------------------------------------------------------


@dataclass
class _Pause:
    """The pause this run holds, renewed when the moves outlast it."""

    session: AdminSession
    group: str
    outcome: PauseOutcome

    def keep(self, seconds: float) -> None:
        """Make sure the pause lasts at least ``seconds`` more (MoveError if refused)."""
        if self.outcome.until_ms - self.session.now_ms() >= seconds * 1000:
            return
        self.outcome = pause_for(self.session, self.group, seconds + MOVE_BUDGET_S)
        if not self.outcome.accepted:
            raise MoveError(f"renewing the pause: {self.outcome.summary()}")


@dataclass(frozen=True, slots=True)
class Moved:
    """What a run set: one line saying so, and the moves as made (each with the position it
    found and the target it set, which for a target at the end is not the plan's)."""

    summary: str
    moves: tuple[PartitionMove, ...]


def set_position(
    session: AdminSession,
    plan: PositionPlan,
    *,
    timeout_s: float,
    progress: Progress = _quiet,
    end_of: EndOf | None = None,
) -> Moved:
    """Steps 2 to 5 of the module docstring; return what moved. ``end_of`` reads a target at
    the end again (None: the plan's end stands, raised to the position found if below it).

    MarshalError (after lifting the pause, and after restoring what had moved) if the pause
    is refused, the holders do not release within ``timeout_s``, or a step fails."""
    group = plan.group
    others_pause(session, group, "nothing moved")
    need_s = timeout_s + MOVE_BUDGET_S + 2 * session.hb_ms / 1000
    held = pause_until(session, group)  # a pause of this client's own, outlasting the run: kept
    end = _Ending(session, group, held - session.now_ms() >= need_s * 1000)
    if end.kept:
        outcome = PauseOutcome(group, held // 1000, ())
        progress(f"group {group} is paused by this client until {iso_ms(held)}: kept")
    else:
        try:
            outcome = pause_for(session, group, need_s)
        except AdminError as exc:
            problem = end.lift()
            raise MarshalError(
                f"could not pause: {exc}; nothing moved; {problem or end.said}"
            ) from None
        if not outcome.accepted:
            raise MarshalError(outcome.summary())
        progress(outcome.summary())
    pause = _Pause(session, group, outcome)
    ends = _released(session, plan, timeout_s, progress, end, _Ends(end_of), pause)
    touched: list[PartitionMove] = []  # as made (`_as_found`)
    current: PartitionMove | None = None
    try:
        for current in plan.moves:
            pause.keep(_step_budget_s(session))
            key = plan.key(current)
            _acquire(session, key)
            move = _as_found(session, key, current, ends)
            touched.append(move)  # from its first heartbeat on, the position may change
            _set(session, key, move.target)
            progress(f"partition {move.where}: {_cell(move.old)} -> {move.target}")
    except MarshalError as exc:
        where = f" at partition {current.where}" if current is not None else ""
        problems = _restore(session, plan, touched, pause, end, progress)
        if problems:
            detail = f"restore incomplete: {'; '.join(problems)}"
        elif touched:
            parts = ", ".join(m.where for m in touched)
            detail = f"old offsets restored on partition(s) {parts}; {end.said}"
        else:
            detail = f"nothing had moved; {end.said}"
        raise MarshalError(f"set-position failed{where} ({exc}); {detail}") from None
    problem = end.lift()
    if problem is not None:
        raise MarshalError(f"the new positions are set, but {problem}")
    moved = ", ".join(f"{m.where}: {_cell(m.old)} -> {m.target}" for m in touched)
    return Moved(f"group {group} topic {plan.topic} moved ({moved}); {end.said}", tuple(touched))


@dataclass
class _Ends:
    """The ends of the partitions, each read once (`EndOf`), after the holders have released
    (`_released`), so at or above what they handled (every slice of a partition gets the same
    one)."""

    end_of: EndOf | None
    read: dict[int, int] = field(default_factory=dict)

    def of(self, move: PartitionMove) -> int:
        """``move``'s partition's end now (the plan's if there is no `EndOf`)."""
        if self.end_of is None:
            return move.target
        if move.partition not in self.read:
            self.read[move.partition] = self.end_of(move.partition)
        return self.read[move.partition]

    def read_all(self, moves: Iterable[PartitionMove]) -> None:
        """Read the ends of ``moves``' partitions now (each once)."""
        for move in moves:
            self.of(move)


def _released(
    session: AdminSession,
    plan: PositionPlan,
    timeout_s: float,
    progress: Progress,
    end: _Ending,
    ends: _Ends,
    pause: _Pause,
) -> _Ends:
    """Wait until the holders have released, then read every end the plan moves to (none
    handles on under the pause), before the steps: a slow broker's answer is not spent out of
    a step's pause budget. A failure lifts the pause: nothing has moved."""
    try:
        _wait_released(session, plan, timeout_s, progress)
        reads = {m.partition for m in plan.moves if m.to_end}
        if reads:  # (each read may take a watermark request's 10 s)
            pause.keep(_step_budget_s(session) + END_READ_S * len(reads))
        ends.read_all(m for m in plan.moves if m.to_end)
    except MarshalError as exc:
        problem = end.lift()
        raise MarshalError(f"{exc}; nothing moved; {problem or end.said}") from None
    return ends


def _as_found(
    session: AdminSession, key: ClaimKey, move: PartitionMove, ends: _Ends
) -> PartitionMove:
    """``move`` as this client finds it once it holds the claim: the position the holder left
    (what a failure restores; it handled on after the plan) and, for a target at the end, the
    end now, never below that position (in AMO a reservation counts: it may be handled)."""
    state = session.state(key)
    found = replace(
        move,
        committed=state.committed if state else None,
        reserved=state.reserved if state else None,
    )
    if not move.to_end:
        return found
    return replace(found, target=max(ends.of(move), resume_offset(state, Mode.AMO) or 0))


def _step_budget_s(session: AdminSession) -> float:
    return 5.0 + 2 * session.hb_ms / 1000


def _wait_released(
    session: AdminSession, plan: PositionPlan, timeout_s: float, progress: Progress
) -> None:
    """Fold until no live holder is left on the partitions to move; MoveError on timeout."""
    deadline = session.monotonic() + timeout_s
    shown: dict[str, str] | None = None
    while True:
        now = session.now_ms()
        busy: dict[str, str] = {}
        for move in plan.moves:
            key = plan.key(move)
            state = session.state(key)
            if not is_claimable(state, now, session.hb_ms) and not session.holds(key):
                busy[move.where] = (state.holder_client if state else None) or "?"
        if not busy:
            return
        if busy != shown:
            shown = busy
            held = ", ".join(f"{p} ({c})" for p, c in sorted(busy.items()))
            progress(f"waiting for the holders to release {len(busy)} partition(s): {held}")
        remaining = deadline - session.monotonic()
        if remaining <= 0:
            held = ", ".join(f"{p} by {c}" for p, c in sorted(busy.items()))
            raise MoveError(f"gave up after {timeout_s:.0f}s: still held: {held}")
        session.poll(min(0.2, remaining))


def _acquire(session: AdminSession, key: ClaimKey) -> None:
    """Hold ``key`` as this admin: claim it, retrying for a little while if the log says a
    holder is not stale yet (our estimate of log time may run a little ahead)."""
    deadline = session.monotonic() + _step_budget_s(session)
    while not session.holds(key):
        verdict = session.write(session.claiming(key))
        if isinstance(verdict, ev.ClaimGranted) or session.holds(key):
            return
        reason = str(getattr(verdict, "reason", type(verdict).__name__))
        if session.monotonic() >= deadline or reason == "group paused":
            raise MoveError(f"claim refused: {reason}")
        session.poll(min(0.5, session.hb_ms / 4000))


def _expect(verdict: ev.Event, kind: type[ev.Event], what: str) -> None:
    if not isinstance(verdict, kind):
        raise MoveError(f"{what} refused: {getattr(verdict, 'reason', type(verdict).__name__)}")


def _set(session: AdminSession, key: ClaimKey, offset: int) -> None:
    """Heartbeat ``offset`` and release at ``offset``, holding the claim while the group is
    paused by this client (so the position is set outright, a reservation cleared)."""
    _expect(session.write(session.heartbeat(key, offset)), ev.HeartbeatAccepted, "heartbeat")
    _expect(session.write(session.releasing(key, offset)), ev.Released, "release")
    state = session.state(key)
    if state is None or state.committed != offset or state.reserved is not None:
        raise MoveError("the position did not take (was the pause still in force?)")


def _restore(
    session: AdminSession,
    plan: PositionPlan,
    touched: list[PartitionMove],
    pause: _Pause,
    end: _Ending,
    progress: Progress,
) -> list[str]:
    """Put the old positions of ``touched`` back, end the pause (`_Ending`); return what went
    wrong.

    A claim won but not yet used (its heartbeat never went out) changed no position: it is
    only released, at the position it had (one with none is left held, to go stale). A
    partition that had no position before has none to
    go back to: its claim is released at the target, which sets it there (said "left at", in
    the progress and in the failure's line). Every release waits for the lift, so that
    reservations are kept. Under a pause that is kept there is no lift: the claims are left
    held, to go stale (2*HB), and such a partition keeps what the log has (said "left at"
    that, or "left with no position"). A
    release by the pausing client would set the position outright (a restored reservation
    lost), and during a stopped move it would look like an operator's setting to the move's
    rerun, which keeps those: a state restored there may be one from before the move (a
    window the group lived in before), which the rerun must carry over. So after a failed run
    during a stopped move the rerun carries the move's positions on what it touched (set them
    again first to keep an operator's)."""
    problems: list[str] = []
    held: list[tuple[ClaimKey, int, str]] = []  # a claim to end, its offset, what that leaves
    done = {plan.key(m) for m in touched}
    for move in plan.moves:
        key = plan.key(move)
        state = session.state(key)
        if key not in done and session.holds(key) and state and state.committed is not None:
            held.append((key, state.committed, f"restored to {state.committed}"))
    try:
        pause.keep(_step_budget_s(session) * max(1, len(touched)))
    except MarshalError as exc:
        problems.append(str(exc))
    for move in touched:
        key = plan.key(move)
        old = move.old
        try:
            if old is None:  # nothing to go back to; do not leave the claim held
                left = _left_without_old(session, key, move.target, end.kept)
                if session.holds(key):
                    held.append((key, move.target, left))
                short = left.replace("left with no position", "left with none")
                problems.append(f"partition {move.where} had no position before ({short})")
                continue
            _acquire(session, key)
            _expect(session.write(session.heartbeat(key, old)), ev.HeartbeatAccepted, "heartbeat")
            held.append((key, old, f"restored to {old}"))
            if move.reserved is not None and move.reserved > old:
                reserve = session.write(session.reserving(key, move.reserved))
                _expect(reserve, ev.MessagesClaimed, "reservation")
        except MarshalError as exc:
            problems.append(f"partition {move.where}: {exc}")
    problem = end.lift()
    if problem is not None:
        problems.append(problem)
    for key, offset, said in held:  # after the lift, so that a restored reservation is kept
        if end.kept:  # no lift: see the docstring
            progress(f"partition {_where(key)}: {said} (its claim goes stale)")
            continue
        try:
            _expect(session.write(session.releasing(key, offset)), ev.Released, "release")
            progress(f"partition {_where(key)}: {said}")
        except MarshalError as exc:
            problems.append(f"partition {_where(key)}: {exc}")
    return problems


def _left_without_old(session: AdminSession, key: ClaimKey, target: int, kept: bool) -> str:
    """What a partition with no position before is left with: the target, where this client's
    release after the lift sets it; under a kept pause (no release) what the log has."""
    if session.holds(key) and not kept:
        return f"left at {target}"
    state = session.state(key)
    if state is None or state.committed is None:
        return "left with no position"
    return f"left at {state.committed}"


def _where(key: ClaimKey) -> str:
    part = split_topic(key.topic)[1]
    return str(key.partition) if part is None else f"{key.partition} {part.name}"


@dataclass(frozen=True)
class _Ending:
    """How the run ends its pause: lifted, unless the group was paused by this client before
    it began, for longer than the run needs (``kept``: a stopped move's hold of days, which
    keeps members from claiming positions that move has not carried yet, or a long
    `release-group` pause)."""

    session: AdminSession
    group: str
    kept: bool

    @property
    def said(self) -> str:
        # (no advice to lift it: during a stopped move the move's rerun lifts it, and a lift
        # before that would leave the move unfinishable by a rerun)
        return "pause kept (this client's from before the run)" if self.kept else "pause lifted"

    def lift(self) -> str | None:
        """Lift the pause unless it is kept; None if done, else why not (the pause then simply
        expires)."""
        if self.kept:
            return None
        try:
            outcome = lift_pause(self.session, self.group)
        except AdminError as exc:
            return f"the pause could not be lifted ({exc}): it expires by itself"
        if not outcome.accepted:
            return f"the pause could not be lifted ({outcome.refusal}): it expires by itself"
        return None


# ---- the command -------------------------------------------------------------------------


def unknown_target(
    worlds: Mapping[int, World], group: str, topic: str, new_group: bool, new_topic: bool
) -> Literal["group", "topic"] | None:
    """What set-position of ``group`` on ``topic`` would name that the log does not, refused
    as a likely typo: "group" (the log has no record of it; allowed by ``new_group``), "topic"
    (the group has no claim on it; allowed by ``new_topic`` or ``new_group``), or None.
    Written anyway, a typo left a group, or a topic of the group, that nothing runs: `topic
    list` named it, and a group of that name first started later was spread (a review)."""
    if not group_known(worlds, group):
        return None if new_group else "group"
    if new_topic or new_group or topic in group_topics(worlds, group):
        return None
    return "topic"


def run_set_position(
    conn: Connection,
    group: str,
    topic: str,
    spec: TargetSpec,
    *,
    dry_run: bool,
    as_json: bool,
    client_id: str,
    timeout_s: float,
    progress: Progress = _quiet,
    new_group: bool = False,
    new_topic: bool = False,
) -> str:
    """`marshal-admin set-position`: the plan (``dry_run``), or the move; returns the output.
    A group the log has never named, or a topic it has no claim on, is refused (MarshalError,
    nothing written) unless ``new_group`` or ``new_topic`` says it is meant."""
    source = KafkaOffsetSource(conn.bootstrap_servers, conn.kafka, timeout_s)
    try:  # kept open: a target at the end is read again before it is set
        targets = compute_targets(source, topic, spec)
        with group_session(conn, group, client_id, timeout_s) as (session, adopted):
            unknown = unknown_target(session.worlds, group, topic, new_group, new_topic)
            if unknown is not None:
                log = f"{conn.coordination_topic} on {conn.bootstrap_servers}"
                raise MarshalError(
                    f"{unknown_group(conn, group)}; nothing written (to set where a group "
                    "starts before its first member does, add --new-group)"
                    if unknown == "group"
                    else f"group {group} has no claim on topic {topic} in {log}; nothing "
                    "written (to set where the group starts on a topic it has not consumed "
                    "yet, add --new-topic)"
                )
            plan = make_plan(session, group, topic, targets.offsets, targets.ends)
            if dry_run:
                admins = adopted.admin_client_ids
                if admins is not None and client_id not in admins:
                    progress(
                        f"warning: {client_id} is not an admin client: the pause would be refused"
                    )
                return json.dumps(plan.to_json(dry_run=True)) if as_json else render_plan(plan)
            progress(render_plan(plan))
            moved = set_position(
                session,
                plan,
                timeout_s=timeout_s,
                progress=progress,
                end_of=lambda p: end_target_now(source, topic, spec, p),
            )
    finally:
        source.close()
    done = replace(plan, moves=moved.moves)
    _commit_to_kafka(conn, done, progress)
    if as_json:
        return json.dumps({**done.to_json(dry_run=False), "done": True, "summary": moved.summary})
    return moved.summary


def _commit_to_kafka(conn: Connection, plan: PositionPlan, progress: Progress) -> None:
    """Best effort: show the new positions to kafka-consumer-groups at once."""
    sink = KafkaOffsetSink(conn.bootstrap_servers, plan.group, conn.kafka)
    try:
        targets: dict[int, int] = {}  # a partition's lowest: a slice set to an end read again
        for m in plan.moves:  # may be left past the others where it had handled further
            targets[m.partition] = min(m.target, targets.get(m.partition, m.target))
        error = sink.commit_now([(plan.topic, p, target) for p, target in sorted(targets.items())])
    finally:
        sink.close()
    if error is not None:
        progress(f"note: committing the new offsets to Kafka's group offsets failed: {error}")
