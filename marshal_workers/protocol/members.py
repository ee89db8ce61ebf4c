"""The claim engine: which partition a member should claim or release next (pure).

Members announce themselves by holding a *member claim*: an ordinary Marshal claim on the
pseudo-topic ``__member.<client_id>`` (partition 0) of their group, heartbeated like any other.
So an idle member is counted, and every reader of the log agrees on who is live: the holders
of member claims that are not stale.

Each member aims at its fair share, ceil(partitions / live members). Below it, it claims the
claimable partitions it is short of, in one round, trying partitions in its own
rendezvous-hash order so that members starting together mostly pick different partitions.
Above it, it releases its excess (its least preferred partitions) gracefully, each child
finishing its batch, then waits a cooldown before judging again: only the excess moves, never
the whole group. Every decision here is only a proposal: the log decides.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

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


def _now_of(now_ms: LogNow, key: ClaimKey) -> int:
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
        and is_live(state, _now_of(now_ms, key), hb_ms)
    }


def fair_share(partitions: int, members: int) -> int:
    """ceil(partitions / members), with at least one member (this one) counted."""
    members = max(1, members)
    return -(-partitions // members)


def preference(client_id: str, key: ClaimKey) -> int:
    """Rendezvous rank of a partition for a client: lower is preferred."""
    digest = hashlib.md5(f"{client_id}/{key}".encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "big")


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do next: claim some partitions, release some, or nothing."""

    share: int
    members: int
    claims: tuple[ClaimKey, ...] = ()
    releases: tuple[ClaimKey, ...] = ()

    @property
    def release(self) -> ClaimKey | None:
        """The first partition to release (the least preferred), if any."""
        return self.releases[0] if self.releases else None

    @property
    def claim(self) -> ClaimKey | None:
        """The first partition to claim, if any."""
        return self.claims[0] if self.claims else None


def plan(
    *,
    client_id: str,
    group: str,
    partitions: Iterable[ClaimKey],
    claims: Mapping[ClaimKey, ClaimState],
    mine: Iterable[ClaimKey],
    now_ms: LogNow,
    hb_ms: int,
    avoid: Iterable[ClaimKey] = (),
    limit: int = 1,
) -> Plan:
    """The next step toward this member's fair share.

    ``partitions`` are the data partitions of the group's topics, ``mine`` what this member
    holds now (or is claiming), ``avoid`` partitions it must not claim for a while (cooling
    down after a release or a refusal, or poisoned by repeated handler failures). ``now_ms`` is
    the log time now, or a function giving it for a claim (its own coordination partition's
    clock). At most ``limit`` claims are proposed at once (a whole share in one round).
    """
    wanted = sorted(partitions, key=lambda k: preference(client_id, k))
    held = set(mine)
    members = live_members(claims, group, now_ms, hb_ms) | {client_id}
    share = fair_share(len(wanted), len(members))
    if len(held) > share:
        excess = sorted(held, key=lambda k: preference(client_id, k), reverse=True)
        return Plan(share, len(members), releases=tuple(excess[: len(held) - share]))
    if len(held) < share:
        skip = held | set(avoid)
        room = min(limit, share - len(held))
        picked = tuple(
            key
            for key in wanted
            if key not in skip and is_claimable(claims.get(key), _now_of(now_ms, key), hb_ms)
        )[:room]
        return Plan(share, len(members), claims=picked)
    return Plan(share, len(members))
