"""`status` after a group moved to a window that keeps one of its old partitions.

The old partition's world still holds the moved claim's state from before the move (released,
its position frozen), and the new home holds the claim now. Listed from every world the group
is read on, the claim showed twice: its live state and the frozen one, with a lag that grows
for ever (a monitor alerting on lag would never clear). A claim is listed from its home only.
"""

from __future__ import annotations

from dataclasses import replace

from marshal_workers.protocol.groupstatus import group_status
from marshal_workers.protocol.placement import Placement
from marshal_workers.protocol.wire import (
    ClaimingPartition,
    Heartbeat,
    ReleaseGroup,
    ReleasingPartition,
)
from tests.unit.protocol.partitionlog import ADMIN, group_log

N, G = 4, "g"
OLD, NEW = Placement(N, 0, 2), replace(Placement(N, 0, 3), token_base=100)
TP = next(i for i in range(200) if OLD.partition_of("t", i) != NEW.partition_of("t", i))
BEFORE, AFTER = OLD.partition_of("t", TP), NEW.partition_of("t", TP)


def test_a_moved_claim_is_listed_once_from_its_new_home() -> None:
    log = group_log(G, NEW, N)
    for p in log.worlds:
        if p in OLD.window or p == 0:
            log.settings(p, 1000, OLD, "w")
    log.message(BEFORE, 2000, ClaimingPartition(2, "w-1", "w", G, "t", TP))
    log.message(BEFORE, 2500, Heartbeat(3, "w-1", "w", G, "t", TP, 500))
    log.message(BEFORE, 3000, ReleasingPartition(4, "w-1", "w", G, "t", TP, 500))
    for p in log.worlds:  # the move: pause, the new settings, the carry, the lift
        log.message(p, 5000, ReleaseGroup(5, "adm-1", ADMIN, G, "", 0, 10_000))
    for p in log.worlds:
        log.settings(p, 6000, NEW, ADMIN)
    log.message(AFTER, 7000, ClaimingPartition(7, "adm-1", ADMIN, G, "t", TP))
    log.message(AFTER, 7100, ReleasingPartition(7, "adm-1", ADMIN, G, "t", TP, 500))
    for p in log.worlds:
        log.message(p, 8000, ReleaseGroup(8, "adm-1", ADMIN, G, "", 0, 8))
    log.message(AFTER, 9000, ClaimingPartition(8, "x-1", "x", G, "t", TP))
    log.message(AFTER, 9500, Heartbeat(9, "x-1", "x", G, "t", TP, 900))
    assert BEFORE in log.worlds and ("t" in {k.topic for k in log.worlds[BEFORE].claims})
    status = group_status(G, log.worlds, 1000, 10_000, {("t", TP): 1000})
    listed = [(c.partition, c.state, c.client_id, c.offset, c.lag) for c in status.claims]
    assert listed == [(TP, "fresh", "x", 900, 100)]
