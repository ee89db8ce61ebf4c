"""What a kill -9 costs in AMO, with real processes and Kafka: about a second of handling per
worker, not batches.

One `marshal-run --mode amo --batch-size 500` member on 2 partitions, the ledger handler at
8 ms a record, a backlog on every partition. Once its children are at work, the member is
killed with SIGKILL (its children die with it); a second member takes the partitions over and
handles the rest. The ledger then shows, per partition, the records nobody handled: those the
killed children had reserved and not handled. A reservation covers about half a second of the
child's own handling (`protocol.reservations`) and one more is asked ahead, so at 8 ms a record
at most ``ceil(AT_RISK_S / 8 ms)`` records per partition, plus one for a reservation's rounding.
Before the reservation was decoupled from the fetch batch, each covered at least a batch of
500 records, and a kill lost up to two batches (8 s of handling) per partition.
"""

from __future__ import annotations

import math
import signal

import pytest

from marshal_workers.common.ledgerfile import find_duplicates
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.reservations import AT_RISK_S
from tests.integration.fleet import Fleet, MakeFleet

pytestmark = pytest.mark.kafka
HB = 1.0
DELAY_MS = 8
PARTITIONS = 2
BACKLOG = 1500  # records per partition: 12 s of handling each, the kill comes after ~2 s
# the bound in records, from the configuration: the reservations in hand and ahead hold about
# AT_RISK_S of handling at 8 ms a record, and each is rounded to whole records
BOUND = math.ceil(AT_RISK_S / (DELAY_MS / 1000)) + 1


@pytest.fixture
def fleet(make_fleet: MakeFleet) -> Fleet:
    return make_fleet(mode="amo", hb=HB, partitions=PARTITIONS, ledger_delay_ms=DELAY_MS)


def handled_per_partition(fleet: Fleet) -> dict[int, int]:
    counts = dict.fromkeys(range(PARTITIONS), 0)
    for row in fleet.ledger():
        counts[row.partition] += 1
    return counts


def test_a_kill_9_loses_about_a_second_of_handling_per_partition_not_batches(
    fleet: Fleet,
) -> None:
    """kill -9 of an AMO member with an 8 ms handler and 500-record batches loses at most
    ``ceil(1 s / 8 ms) + 1`` records per partition, and handles none twice."""
    fleet.produce(PARTITIONS * BACKLOG)
    a = fleet.start("a", "--batch-size", "500")
    # at work on every partition for a while (its reservations sized by its own handling)
    fleet.wait_for(
        lambda: min(handled_per_partition(fleet).values()) >= 250, 60, "a's children at work"
    )
    a.signal(signal.SIGKILL)  # a crash: the member and its children die mid-run
    assert a.wait(10) == -signal.SIGKILL
    fleet.start("b", "--batch-size", "500")
    ends = fleet.end_offsets()
    fleet.wait_for(lambda: fleet.positions_reach(ends, Mode.AMO), 120, "every record reserved")

    def last_records_handled() -> bool:  # b handles in order: its last reservation is done
        seen = {(r.partition, r.offset) for r in fleet.ledger()}
        return all((p, end - 1) in seen for p, end in ends.items())

    fleet.wait_for(last_records_handled, 60, "the last records handled")
    rows = fleet.ledger()
    assert not find_duplicates(rows), "AMO handled a record twice"
    seen = {(r.partition, r.offset) for r in rows}
    lost = {p: sum((p, o) not in seen for o in range(end)) for p, end in ends.items()}
    print(f"kill -9 at {DELAY_MS} ms a record: lost per partition {lost}, bound {BOUND}")
    assert all(n <= BOUND for n in lost.values()), (
        f"lost per partition {lost}: above {BOUND} records (about {AT_RISK_S:g} s of handling)"
    )
