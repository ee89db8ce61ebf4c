"""What `marshal-admin demo` says happens when the killed member comes back is what the fair
share makes happen: a rebalance by graceful releases when the others hold more than their
share, a stand-by when they do not (`make demo-hot`: 4 slices, 3 members)."""

from __future__ import annotations

from collections import Counter

from marshal_workers.admin.demo_run import rejoin_story, returning_share


def test_eight_partitions_three_members_rebalance() -> None:
    """8 partitions held 4/4 by two members: each is over the share of 3 by one."""
    held = Counter({"demo-1": 4, "demo-2": 4})
    assert returning_share(held, 3, 8) == 2
    assert "rebalances by graceful releases" in rejoin_story("demo-3", 2, 3, 8)


def test_four_slices_three_members_stand_by() -> None:
    """4 slices held 2/2: the share of 3 members is 2, nobody releases, demo-3 stands by."""
    held = Counter({"demo-1": 2, "demo-2": 2})
    assert returning_share(held, 3, 4) == 0
    story = rejoin_story("demo-3", 0, 3, 4)
    assert "holds nothing" in story and "fair share of 2" in story
    assert "rebalances" not in story
