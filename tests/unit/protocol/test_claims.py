"""The claim engine: membership, fair share, and which partition to claim or release next."""

from __future__ import annotations

from marshal_workers.core.planning import fair_share, plan
from marshal_workers.protocol.members import is_claimable, is_member_key, live_members, member_key
from marshal_workers.protocol.rationalizer import ClaimState
from marshal_workers.protocol.wire import ClaimKey

HB = 1000
G = "g"
PARTS = [ClaimKey(G, "orders", p) for p in range(8)]


def held(client: str, last: int, certain: bool = True) -> ClaimState:
    """A claim held by ``client`` whose last heartbeat (or activity) was at ``last``."""
    return ClaimState(
        certain=certain,
        holder_client=client,
        holder_instance=f"{client}-1",
        token=1,
        last_heartbeat=last if certain else None,
        last_activity=last,
    )


def members(*clients: str, at: int = 0) -> dict[ClaimKey, ClaimState]:
    return {member_key(G, c): held(c, at) for c in clients}


class TestMembership:
    def test_member_claims_are_recognised(self) -> None:
        """A member announces itself on the pseudo-topic __member.<client_id>."""
        assert is_member_key(member_key(G, "a")) and not is_member_key(PARTS[0])

    def test_live_members_are_holders_of_non_stale_member_claims(self) -> None:
        """A member whose member claim went stale no longer counts."""
        claims = members("a", "b", at=0) | {member_key(G, "c"): held("c", -5 * HB)}
        assert live_members(claims, G, now_ms=HB, hb_ms=HB) == {"a", "b"}

    def test_other_groups_members_do_not_count(self) -> None:
        """Membership is per group."""
        claims = {member_key("other", "x"): held("x", 0)}
        assert live_members(claims, G, now_ms=0, hb_ms=HB) == set()


class TestClaimability:
    def test_unknown_and_released_partitions_are_claimable(self) -> None:
        """Nobody holds them."""
        released = ClaimState(certain=True, released=True, committed=5)
        assert is_claimable(None, 0, HB) and is_claimable(released, 0, HB)

    def test_claim_is_claimable_only_once_stale(self) -> None:
        """At exactly 2*HB the holder is not stale yet; one ms later it is."""
        state = held("a", 0)
        assert not is_claimable(state, 2 * HB, HB) and is_claimable(state, 2 * HB + 1, HB)

    def test_uncertain_claim_needs_silence(self) -> None:
        """A claim with compacted history is claimable after 2*HB with no record at all."""
        state = held("a", 0, certain=False)
        assert not is_claimable(state, HB, HB) and is_claimable(state, 2 * HB + 1, HB)


class TestFairShare:
    def test_share_is_the_ceiling(self) -> None:
        """8 partitions over 3 members: 3 each at most."""
        assert fair_share(8, 3) == 3 and fair_share(8, 2) == 4 and fair_share(8, 0) == 8

    def test_under_share_claims_a_claimable_partition(self) -> None:
        """A member below its share proposes a partition nobody holds."""
        step = plan(
            client_id="a",
            group=G,
            partitions=PARTS,
            claims=members("a"),
            mine=[],
            now_ms=0,
            hb_ms=HB,
        )
        assert step.claim in PARTS and step.release is None and step.share == 8

    def test_held_partitions_are_not_proposed(self) -> None:
        """A partition held fresh by someone else is never proposed."""
        claims = members("a", "b") | {k: held("b", 0) for k in PARTS[:7]}
        step = plan(
            client_id="a", group=G, partitions=PARTS, claims=claims, mine=[], now_ms=0, hb_ms=HB
        )
        assert step.claim == PARTS[7]

    def test_over_share_releases_one_partition(self) -> None:
        """With a third member, a member holding 4 of 8 releases one (share 3)."""
        claims = members("a", "b", "c") | {k: held("a", 0) for k in PARTS[:4]}
        step = plan(
            client_id="a",
            group=G,
            partitions=PARTS,
            claims=claims,
            mine=PARTS[:4],
            now_ms=0,
            hb_ms=HB,
        )
        assert step.share == 3 and step.release in PARTS[:4] and step.claim is None

    def test_at_share_does_nothing(self) -> None:
        """A member at its share stays put (sticky)."""
        claims = members("a", "b") | {k: held("a", 0) for k in PARTS[:4]}
        step = plan(
            client_id="a",
            group=G,
            partitions=PARTS,
            claims=claims,
            mine=PARTS[:4],
            now_ms=0,
            hb_ms=HB,
        )
        assert step.claim is None and step.release is None

    def test_avoided_partitions_are_skipped(self) -> None:
        """A partition cooling down (or poisoned) is not proposed."""
        step = plan(
            client_id="a",
            group=G,
            partitions=PARTS[:1],
            claims={},
            mine=[],
            now_ms=0,
            hb_ms=HB,
            avoid=PARTS[:1],
        )
        assert step.claim is None

    def test_members_prefer_different_partitions(self) -> None:
        """Rendezvous order spreads first choices: eight members rarely all pick one."""
        firsts = {
            plan(
                client_id=f"m{i}", group=G, partitions=PARTS, claims={}, mine=[], now_ms=0, hb_ms=HB
            ).claim
            for i in range(8)
        }
        assert len(firsts) > 2

    def test_idle_member_is_counted(self) -> None:
        """An announced member with no partitions lowers everyone's share."""
        claims = members("a", "b", "idle")
        step = plan(
            client_id="a", group=G, partitions=PARTS, claims=claims, mine=[], now_ms=0, hb_ms=HB
        )
        assert step.members == 3 and step.share == 3
