"""Carrying a moved group's positions to their new homes, under the admin's pause (`group_move`
step 4, and the finish of a stopped move, `move_finish`).

Only the pausing client may claim while the pause is in force: each carry is a claim of the
data claim on its new home by this admin and a release at the carried position (the pausing
client's release sets it outright, the rationalizer's rule 5). Before each carry the pause must
outlast it by a margin (2*HB and two writes): it is written again when it would not, and the
carries stop if it ran out. Only a refusal the compaction rule explains is claimed again.
"""

from __future__ import annotations

from collections.abc import Callable

from marshal_workers.admin.moveplan import Carry
from marshal_workers.admin.pause import pause_for, pause_until
from marshal_workers.admin.session import AdminSession
from marshal_workers.common.errors import MarshalError
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.groupstatus import iso_ms
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import resume_offset

CLAIM_TRIES = 3  # a claim refused on a compacted home is tried again after 2*HB of silence
COMPACTED = "history compacted"  # the one refusal a carry retries (the rationalizer's words)
Progress = Callable[[str], None]  # (`settings_steps.Progress`: not imported, a shorter chain)


def carry_all(
    session: AdminSession,
    group: str,
    carries: tuple[Carry, ...],
    timeout_s: float,
    pause_s: float,
    progress: Progress,
) -> None:
    """Claim each carried claim on its new home and release it at its position, each under a
    pause in force (`_pause_holds`). On a home whose history the cleaner shortened a claim
    never seen there is uncertain: the first claim only counts as activity, and one after 2*HB
    of silence wins; so the claims refused for that reason are claimed again, together, after
    one such wait (`CLAIM_TRIES` rounds at most). Any other refusal stops the move."""
    deadline = session.monotonic() + timeout_s
    left = list(carries)
    for _ in range(CLAIM_TRIES):
        refused: list[tuple[Carry, ev.Event]] = []
        for carry in left:
            what = f"{carry.key.topic}/{carry.key.partition} was carried"
            pause_holds(session, group, what, pause_s, progress)
            verdict = session.write(session.claiming(carry.key), carry.new_partition)
            if not isinstance(verdict, ev.ClaimGranted):
                if not str(getattr(verdict, "reason", "")).startswith(COMPACTED):
                    _refused(session, group, carry, verdict)
                refused.append((carry, verdict))
                continue
            offset = _at_least_the_log(session, carry)
            released = session.write(session.releasing(carry.key, offset), carry.new_partition)
            if not isinstance(released, ev.Released):
                _refused(session, group, carry, released)
            progress(f"carried {carry.key.topic}/{carry.key.partition} at {offset} to "
                     f"partition {carry.new_partition}")  # fmt: skip
        if not refused:
            return
        wait_s = 2.2 * session.hb_ms / 1000
        if session.monotonic() + wait_s > deadline:
            break
        left = [carry for carry, _ in refused]
        progress(f"{len(left)} claims refused on compacted homes: claiming again in {wait_s:g}s")
        end = session.monotonic() + wait_s
        while (remaining := end - session.monotonic()) > 0:
            session.poll(min(0.2, remaining))
    _refused(session, group, *refused[0])


def _at_least_the_log(session: AdminSession, carry: Carry) -> int:
    """Where a carry releases its claim, just won: its planned position; on a claim whose new
    home is its old one, or what the log holds there now if that is further (the pausing
    admin's release sets a position outright). A holder the wait judged stale by the newest
    log time of all partitions may have gone on there, its brokers' clock behind, and
    reserved or committed past the plan before releasing (a review): released at the plan,
    those records would be handed out again. (On another partition the state is from an
    earlier layout, or an operator's: the plan is today's.)"""
    if carry.new_partition != carry.old_partition:
        return carry.offset
    state = session.worlds[carry.new_partition].claims.get(carry.key)
    there = None if state is None else resume_offset(state, Mode.AMO)
    return carry.offset if there is None else max(carry.offset, there)


def pause_holds(
    session: AdminSession,
    group: str,
    before: str,
    pause_s: float,
    progress: Progress,
    need_s: float = 0.0,
) -> None:
    """Before a step (``before``: what it does): the pause must outlast ``need_s`` and a
    margin (2*HB and two writes); write it again (``pause_s`` from now) if it would not; stop,
    doing nothing more, if it ran out."""
    now = session.now_ms()
    until = pause_until(session, group)
    if until <= now:
        raise MarshalError(
            f"the pause of group {group} ran out before {before}: stopped; its members may "
            "claim now; set the positions not carried ('to carry:' lines above) with "
            "set-position at once"
        )
    margin_ms = 2 * session.hb_ms + 2 * session.write_timeout_s * 1000 + need_s * 1000
    if until - now >= margin_ms:
        return
    extended = pause_for(session, group, max(pause_s, need_s + margin_ms / 1000))
    if not extended.in_force:
        raise MarshalError(
            f"extending the pause of group {group} failed ({extended.summary()}): stopped "
            f"before {before}; run the move again (same --client-id and window), or set the "
            "positions not carried ('to carry:' lines above) with set-position and the same "
            "--client-id, before the pause expires"
        )
    progress(f"pause extended: {extended.summary()}")


def _refused(session: AdminSession, group: str, carry: Carry, verdict: ev.Event) -> None:
    reason = getattr(verdict, "reason", type(verdict).__name__)
    until = pause_until(session, group)
    still = (
        f"the group stays paused until {iso_ms(until)} (log time): run the move again "
        "(same --client-id and window; after 2*HB if the claim is held by this client), or set "
        "the positions not carried ('to carry:' lines above) with set-position and the same "
        "--client-id meanwhile"
        if until > session.now_ms()
        else "the group's pause has run out: set the positions not carried ('to carry:' lines "
        "above) with set-position at once"
    )
    raise MarshalError(
        f"carrying {carry.key.topic}/{carry.key.partition}'s position {carry.offset} to "
        f"partition {carry.new_partition} was refused ({reason}): stopped; {still}"
    )
