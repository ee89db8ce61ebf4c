"""AMO losses after a group moved to another placement (pure).

The claim's records from before the move stay on its old coordination partition (until the
cleaner), and the claim lives on at its new home. Keyed by data partition alone, the loss
tracker took the two partitions' records for one history: a reader that got the new home's
records before the old one's (`status` polls every partition; which answers first is chance)
saw the old grant "take over" the live claim, a `taken_over` loss of the live holder's last
reservations, lost at its last heartbeat + 2*HB (in the future) and taken by itself. Each
coordination partition's records are one history in offset order, and a view of the group
counts each claim's losses on its home now, as its members take the claim from there.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from marshal_workers.protocol import events as ev
from marshal_workers.protocol.amolosses import AmoLosses
from marshal_workers.protocol.groupstatus import group_status
from marshal_workers.protocol.placement import Placement
from marshal_workers.protocol.wire import (
    ClaimingMessages,
    ClaimingPartition,
    ClaimKey,
    Heartbeat,
    ReleaseGroup,
    ReleasingPartition,
)
from tests.unit.protocol.partitionlog import ADMIN, PartitionLog, group_log

N, G, HB = 4, "g", 1000
OLD, NEW = Placement(N, 0, 2), replace(Placement(N, 0, 3), token_base=100)
TP = next(i for i in range(200) if OLD.partition_of("t", i) != NEW.partition_of("t", i))
BEFORE, AFTER = OLD.partition_of("t", TP), NEW.partition_of("t", TP)
KEY = ClaimKey(G, "t", TP)


def moved(reserving_after: bool = True) -> PartitionLog:
    """A placed group's AMO claim reserved and released under the move's pause on its old
    home, carried to its new home, and claimed there by the same client again (restarted)."""
    log = group_log(G, NEW, N)
    for p in log.worlds:
        if p in OLD.window or p == 0:
            log.settings(p, 1000, OLD, "w")
    log.message(BEFORE, 2000, ClaimingPartition(2, "w-1", "w", G, "t", TP))
    log.message(BEFORE, 2100, Heartbeat(2, "w-1", "w", G, "t", TP, 0))
    log.message(BEFORE, 2200, ClaimingMessages(2, "w-1", "w", G, "t", TP, 10))
    log.message(BEFORE, 2300, Heartbeat(2, "w-1", "w", G, "t", TP, 10))
    log.message(BEFORE, 2400, ClaimingMessages(2, "w-1", "w", G, "t", TP, 20))
    log.message(BEFORE, 2500, Heartbeat(2, "w-1", "w", G, "t", TP, 20))
    for p in log.worlds:  # the move: pause, the holder releases, the new settings, the carry
        log.message(p, 5000, ReleaseGroup(5, "adm-1", ADMIN, G, "", 0, 10_000))
    log.message(BEFORE, 5100, ReleasingPartition(5, "w-1", "w", G, "t", TP, 20))
    for p in log.worlds:
        log.settings(p, 6000, NEW, ADMIN)
    log.message(AFTER, 7000, ClaimingPartition(7, "adm-1", ADMIN, G, "t", TP))
    log.message(AFTER, 7100, ReleasingPartition(7, "adm-1", ADMIN, G, "t", TP, 20))
    for p in log.worlds:  # the lift
        log.message(p, 8000, ReleaseGroup(8, "adm-1", ADMIN, G, "", 0, 8))
    log.message(AFTER, 9000, ClaimingPartition(9, "w-2", "w", G, "t", TP))
    log.message(AFTER, 9100, Heartbeat(9, "w-2", "w", G, "t", TP, 20))
    if reserving_after:
        log.message(AFTER, 9200, ClaimingMessages(9, "w-2", "w", G, "t", TP, 30))
        log.message(AFTER, 9300, Heartbeat(9, "w-2", "w", G, "t", TP, 30))
        log.message(AFTER, 9400, ClaimingMessages(9, "w-2", "w", G, "t", TP, 40))
        log.message(AFTER, 9500, Heartbeat(9, "w-2", "w", G, "t", TP, 40))
    return log


def interleavings(log: PartitionLog) -> dict[str, list[ev.Event]]:
    """Every partition's events, each partition's in offset order: the new home's first, the
    old's first, and one by one."""
    old, new = log.events[BEFORE], log.events[AFTER]
    rest = [e for p, es in log.events.items() if p not in (BEFORE, AFTER) for e in es]
    alternating = [e for pair in zip(old, new, strict=False) for e in pair]
    alternating += old[len(new) :] + new[len(old) :]
    return {
        "old first": [*old, *new, *rest],
        "new first": [*new, *old, *rest],
        "alternating": [*alternating, *rest],
    }


@pytest.mark.parametrize("order", ["old first", "new first", "alternating"])
def test_a_moved_live_claim_loses_nothing_whichever_partition_is_read_first(order: str) -> None:
    """The old home's grant does not take over the live claim on the new home: no loss."""
    log = moved()
    losses = AmoLosses(HB)
    losses.add_all(interleavings(log)[order])
    now = 9600
    status = group_status(G, log.worlds, HB, now, {("t", TP): 50}, losses)
    assert [(c.partition, c.client_id, c.state) for c in status.claims] == [(TP, "w", "fresh")]
    assert status.claims[0].amo_last_loss is None
    assert status.amo_losses == (0, 0)


@pytest.mark.parametrize("order", ["old first", "new first", "alternating"])
def test_each_coordination_partition_is_its_own_history(order: str) -> None:
    """The tracker keeps a claim's intervals per coordination partition: the live interval on
    the new home is open, the pre-move one on the old home ended with its release."""
    log = moved()
    losses = AmoLosses(HB)
    losses.add_all(interleavings(log)[order])
    assert losses.last_loss(KEY, 9600, AFTER) is None
    assert losses.last_loss(KEY, 9600, BEFORE) is None
    assert losses.totals(G, 9600) == (0, 0)
    assert losses.keys(G) == [KEY]


def test_a_crash_after_the_move_is_counted_on_the_new_home_once() -> None:
    """The live holder crashed after the move: its loss is the new home's, counted once, and
    the old home's history (released cleanly before the move) adds nothing."""
    log = moved()
    at = 9500 + 2 * HB + 1
    for order, events in interleavings(log).items():
        losses = AmoLosses(HB)
        losses.add_all(events)
        status = group_status(G, log.worlds, HB, at, {("t", TP): 50}, losses)
        loss = status.claims[0].amo_last_loss
        assert loss is not None, order
        assert (loss.instance_id, loss.start, loss.end, loss.cause) == (
            "w-2", 20, 40, "lease_expired",
        ), order  # fmt: skip
        assert status.amo_losses == (1, 20), order


def test_a_loss_left_on_the_old_home_is_not_the_groups_now() -> None:
    """A holder that lost a range on the old home before the move (its claim went stale and
    the move carried what it had reserved): the status lists the claim from its new home,
    and its loss count is the claims' on their homes now (the old home's copy of the claim is
    left over from before the move, as the claim row is)."""
    log = group_log(G, NEW, N)
    for p in log.worlds:
        if p in OLD.window or p == 0:
            log.settings(p, 1000, OLD, "w")
    log.message(BEFORE, 2000, ClaimingPartition(2, "w-1", "w", G, "t", TP))
    log.message(BEFORE, 2100, ClaimingMessages(2, "w-1", "w", G, "t", TP, 10))
    log.message(BEFORE, 2200, Heartbeat(2, "w-1", "w", G, "t", TP, 0))
    for p in log.worlds:
        log.message(p, 5000, ReleaseGroup(5, "adm-1", ADMIN, G, "", 0, 10_000))
    for p in log.worlds:
        log.settings(p, 6000, NEW, ADMIN)
    log.message(AFTER, 7000, ClaimingPartition(7, "adm-1", ADMIN, G, "t", TP))
    log.message(AFTER, 7100, ReleasingPartition(7, "adm-1", ADMIN, G, "t", TP, 10))
    for order, events in interleavings(log).items():
        losses = AmoLosses(HB)
        losses.add_all(events)
        status = group_status(G, log.worlds, HB, 7200, {("t", TP): 50}, losses)
        assert [(c.partition, c.client_id, c.state) for c in status.claims] == [
            (TP, None, "released")
        ], order
        assert status.claims[0].amo_last_loss is None, order
        assert status.amo_losses == (0, 0), order
        # the tracker itself still knows the old home's loss (whole-log readers: the audit's view)
        old = losses.last_loss(KEY, 7200, BEFORE)
        assert old is not None and (old.start, old.end, old.cause) == (None, 10, "lease_expired")
