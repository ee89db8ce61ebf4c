"""`topic list` and `topic describe` after a group moved to another placement.

They fold the whole log, every group's records on every coordination partition. A moved
group's claims keep their state from before the move on their old coordination partitions
(released at the carried offset, frozen, until the cleaner), beside their live state on the new
homes: listed from every partition, each moved claim showed twice, a stale `released` row with
a lag growing for ever beside the live one (found by review on a real broker). A group's claim
is listed from its home now, as its members (and `status`) take it.
"""

from __future__ import annotations

from dataclasses import replace

from marshal_workers.admin.topic_view import work_by_topic
from marshal_workers.protocol.placement import Placement, home
from marshal_workers.protocol.rationalizer import RationalizerConfig
from marshal_workers.protocol.wire import (
    ClaimingPartition,
    Heartbeat,
    ReleaseGroup,
    ReleasingPartition,
)
from tests.unit.protocol.partitionlog import ADMIN, PartitionLog

N, G, OTHER, HB = 8, "g4", "g9", 1000
H = home(G, N)
OLD = Placement(N, H, 1)
NEW = replace(Placement(N, (H + 3) % N, 1), token_base=1000)
PARTS = range(4)


def whole_log() -> PartitionLog:
    """Every coordination partition folded as a whole-log view folds it (no group's view)."""
    config = RationalizerConfig(HB, num_partitions=N, admin_client_ids=frozenset({ADMIN}))
    return PartitionLog(config, range(N), G)


def moved() -> PartitionLog:
    """g4 placed at its home, working on t1's 4 partitions, moved to another partition (the
    reviewer's `--move --first 3 --span 1`), and claimed there again by its restarted member;
    g9, never moved, works on t1 too."""
    log = whole_log()
    log.settings(H, 1000, OLD, "w")
    other = Placement(N, home(OTHER, N), 1)
    log.settings(home(OTHER, N), 1000, other, "v", OTHER)
    for tp in PARTS:
        log.message(H, 2000, ClaimingPartition(2, "w-1", "w", G, "t1", tp))
        log.message(H, 2100, Heartbeat(2, "w-1", "w", G, "t1", tp, 10 * tp))
    for p in sorted({H, *NEW.window}):  # the move: pause, releases, settings, carries, lift
        log.message(p, 5000, ReleaseGroup(5, "adm-1", ADMIN, G, "", 0, 10_000))
    for tp in PARTS:
        log.message(H, 5100, ReleasingPartition(5, "w-1", "w", G, "t1", tp, 10 * tp))
    for p in sorted({H, *NEW.window}):
        log.settings(p, 6000, NEW, ADMIN)
    for tp in PARTS:
        at = NEW.partition_of("t1", tp)
        log.message(at, 7000, ClaimingPartition(7, "adm-1", ADMIN, G, "t1", tp))
        log.message(at, 7100, ReleasingPartition(7, "adm-1", ADMIN, G, "t1", tp, 10 * tp))
    for p in sorted({H, *NEW.window}):
        log.message(p, 8000, ReleaseGroup(8, "adm-1", ADMIN, G, "", 0, 8))
    for tp in PARTS:
        at = NEW.partition_of("t1", tp)
        log.message(at, 9000, ClaimingPartition(9, "w-2", "w", G, "t1", tp))
        log.message(at, 9100, Heartbeat(9, "w-2", "w", G, "t1", tp, 10 * tp + 5))
        mine = other.partition_of("t1", tp)
        log.message(mine, 9000, ClaimingPartition(9, "v-1", "v", OTHER, "t1", tp))
        log.message(mine, 9100, Heartbeat(9, "v-1", "v", OTHER, "t1", tp, 7))
    return log


def test_a_moved_group_is_listed_once_per_partition_from_its_home_now() -> None:
    """Each of the moved group's claims once, live (its old partition's frozen `released`
    copy left out); the group that never moved as before."""
    log = moved()
    assert H not in NEW.window and any(k.group == G for k in log.worlds[H].claims)
    work = work_by_topic(log.worlds, HB, 9500)["t1"]
    rows = [(w.partition, w.group, w.holder, w.state, w.offset) for w in work]
    assert rows == [
        row
        for tp in PARTS
        for row in ((tp, G, "w", "fresh", 10 * tp + 5), (tp, OTHER, "v", "fresh", 7))
    ]


def test_only_one_group_s_work_is_its_home_s_too() -> None:
    """The refold of one group (`only`) leaves the old copies out the same way."""
    log = moved()
    work = work_by_topic(log.worlds, HB, 9500, G)["t1"]
    assert [(w.partition, w.state) for w in work] == [(tp, "fresh") for tp in PARTS]
