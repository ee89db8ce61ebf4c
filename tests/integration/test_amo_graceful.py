"""At-most-once under graceful operations only, with real processes and Kafka.

Three AMO members on 8 partitions, HB 1 s, a ledger handler of 3 ms a record, records
produced before and during the operations: a member joins (a rebalance), one gets SIGTERM and
is started again (a deploy), another gets SIGTERM. Nothing is killed or frozen, so nothing may
be lost and nothing handled twice. Before the fix (bbccd15) a child told to stop dropped the
batch it had asked for ahead, whose reservation the log held: hundreds of records lost.
"""

from __future__ import annotations

import signal
import time

import pytest

from marshal_workers.common.ledgerfile import find_duplicates
from marshal_workers.protocol.modes import Mode
from tests.integration.fleet import Fleet, MakeFleet

pytestmark = pytest.mark.kafka
HB = 1.0


@pytest.fixture
def fleet(make_fleet: MakeFleet) -> Fleet:
    return make_fleet(mode="amo", hb=HB, ledger_delay_ms=3)


def test_a_join_a_deploy_and_a_sigterm_lose_nothing_and_repeat_nothing(fleet: Fleet) -> None:
    fleet.produce(8 * 500)  # a backlog, so that every operation meets batches in flight
    fleet.produce_steadily(400)
    fleet.start("a")
    b = fleet.start("b")
    fleet.wait_split([4, 4])
    c = fleet.start("c")  # a member joins: a and b release over their share
    fleet.wait_split([2, 3, 3])
    b.signal(signal.SIGTERM)  # a deploy: b stops and comes back
    assert b.wait(30) == 0, b.log_tail()
    fleet.start("b")
    fleet.wait_split([2, 3, 3])
    c.signal(signal.SIGTERM)  # c leaves for good
    assert c.wait(30) == 0, c.log_tail()
    fleet.wait_split([4, 4])
    fleet.stop_producing()
    ends = fleet.end_offsets()

    fleet.wait_for(lambda: fleet.positions_reach(ends, Mode.AMO), 90, "every record reserved")
    deadline = time.monotonic() + 30  # the last batches reserved are handled soon after
    while not fleet.handled_everything() and time.monotonic() < deadline:
        time.sleep(0.2)
    rows = fleet.ledger()
    assert not find_duplicates(rows), "AMO handled a record twice"
    seen = {(r.partition, r.offset) for r in rows}
    lost = sorted((p, o) for p, end in ends.items() for o in range(end) if (p, o) not in seen)
    assert lost == [], f"{len(lost)} of {sum(ends.values())} records lost, first {lost[:5]}"
