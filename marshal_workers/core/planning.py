"""The claim engine: which partitions a member should claim or release next (pure).

Each member aims at its fair share, ceil(partitions / live members). Below it, it claims the
claimable partitions it is short of, in one round, trying partitions in its own
rendezvous-hash order so that members starting together mostly pick different partitions.
Above it, it releases its excess (its least preferred partitions) gracefully, each child
finishing its batch, then waits a cooldown before judging again: only the excess moves, never
the whole group. Every decision here is only a proposal: the log decides. Who is live and what
is claimable is read from the fold (`marshal_workers.protocol.members`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from marshal_workers.protocol.members import LogNow, is_claimable, live_members, now_of
from marshal_workers.protocol.rationalizer import ClaimState
from marshal_workers.protocol.wire import ClaimKey


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
            if key not in skip and is_claimable(claims.get(key), now_of(now_ms, key), hb_ms)
        )[:room]
        return Plan(share, len(members), claims=picked)
    return Plan(share, len(members))
