"""Who is live in a group, and which claims could be won: what every reader of the log agrees on.

Members announce themselves by holding a *member claim*: an ordinary Marshal claim on the
pseudo-topic ``__member.<client_id>`` (partition 0) of their group, heartbeated like any other.
So an idle member is counted, and every reader of the log agrees on who is live: the holders
of member claims that are not stale. What a member does with this is planned in
`marshal_workers.core.planning`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from marshal_workers.protocol.rationalizer import ClaimState
from marshal_workers.protocol.wire import ClaimKey

MEMBER_PREFIX = "__member."


def member_key(group: str, client_id: str) -> ClaimKey:
    """The claim by which ``client_id`` announces itself in ``group``."""
    return ClaimKey(group, f"{MEMBER_PREFIX}{client_id}", 0)


def is_member_key(key: ClaimKey) -> bool:
    """Whether a claim is a member announcement rather than a data partition."""
    return key.topic.startswith(MEMBER_PREFIX)


def _silent_for(state: ClaimState, now_ms: int) -> int | None:
    last = state.last_seen
    return None if last is None else now_ms - last


def is_live(state: ClaimState | None, now_ms: int, hb_ms: int) -> bool:
    """Whether someone holds the claim and is not stale at ``now_ms``."""
    if state is None or state.holder_client is None:
        return False
    silent = _silent_for(state, now_ms)
    return silent is not None and silent <= 2 * hb_ms


def is_claimable(state: ClaimState | None, now_ms: int, hb_ms: int) -> bool:
    """Whether a claim on it could win at ``now_ms`` (the log still decides)."""
    if state is None:
        return True
    if not state.certain:  # compacted history: needs seen activity, then 2*HB of silence
        silent = _silent_for(state, now_ms)
        return silent is not None and silent > 2 * hb_ms
    return not is_live(state, now_ms, hb_ms)


LogNow = int | Callable[[ClaimKey], int]


def now_of(now_ms: LogNow, key: ClaimKey) -> int:
    """The log time at which to judge ``key``: one for all, or its own partition's."""
    return now_ms if isinstance(now_ms, int) else now_ms(key)


def live_members(
    claims: Mapping[ClaimKey, ClaimState], group: str, now_ms: LogNow, hb_ms: int
) -> set[str]:
    """Client ids whose member claim in ``group`` is live."""
    return {
        state.holder_client
        for key, state in claims.items()
        if key.group == group
        and is_member_key(key)
        and state.holder_client is not None
        and is_live(state, now_of(now_ms, key), hb_ms)
    }
