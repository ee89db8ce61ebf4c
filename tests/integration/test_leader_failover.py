"""A three-node cluster: kill -9 the leader of `__marshal` while a fleet works.

No double claim (no two processes on one partition at once, per the ledger), no record
skipped (ALO), and no lost coordination write: every claim a supervisor saw granted when it
folded the log up to its own record is still granted in a fresh fold of the whole log.
"""

from __future__ import annotations

import json
import signal
import time

import pytest

from marshal_workers.common.ledgerfile import find_gaps, find_overlaps
from marshal_workers.localkafka import LocalKafka
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.kafkalog import KafkaLog
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.rationalizer import RationalizerConfig
from marshal_workers.protocol.wire import ClaimKey
from tests.integration.fleet import Fleet, MakeFleet

pytestmark = pytest.mark.cluster
HB = 2.0


@pytest.fixture
def fleet(kafka_cluster3: LocalKafka, make_fleet: MakeFleet) -> Fleet:
    return make_fleet(bootstrap=kafka_cluster3.bootstrap, hb=HB)


def granted_claims(fleet: Fleet) -> set[tuple[ClaimKey, int, str]]:
    """(claim, token, client) of every ClaimGranted in a fresh fold of the whole log."""
    log = KafkaLog(fleet.bootstrap, fleet.coordination)
    reader = FoldedLog(log, RationalizerConfig(int(fleet.hb * 1000), log.num_partitions))
    events: list[ev.Event] = []
    reader.catch_up(60, on_event=events.append)
    log.close()
    return {(e.key, e.token, e.client_id) for e in events if isinstance(e, ev.ClaimGranted)}


def claims_seen_won(fleet: Fleet) -> set[tuple[ClaimKey, int, str]]:
    """What the supervisors logged as won, after folding the log up to their own claim."""
    won = set()
    for member in fleet.members:
        for line in member.log_path.read_text().splitlines():
            if not line.startswith("{"):
                continue
            entry = json.loads(line)
            if entry.get("event") == "claim_won":
                key = ClaimKey(entry["group"], entry["topic"], entry["partition"])
                won.add((key, entry["token"], entry["client_id"]))
    return won


def test_killing_the_coordination_leader_loses_no_write_and_makes_no_double_claim(
    fleet: Fleet, kafka_cluster3: LocalKafka
) -> None:
    """kill -9 the leader of a __marshal partition mid-run, restart it; all stays sound."""
    fleet.produce_steadily(300)
    fleet.start("a")
    fleet.start("b")
    fleet.wait_for(lambda: sorted(fleet.counts().values()) == [4, 4], 40, "a 4/4 split")
    fleet.wait_for(
        lambda: len({r.client_id for r in fleet.ledger()}) == 2, 30, "both members handling"
    )
    leader = kafka_cluster3.leader_of(fleet.coordination, 0)
    assert leader is not None
    kafka_cluster3.kill_node(leader)
    killed_at = time.monotonic()
    new_leader = None
    while new_leader in (None, leader) and time.monotonic() - killed_at < 60:
        time.sleep(0.5)
        new_leader = kafka_cluster3.leader_of(fleet.coordination, 0)
    print(
        f"\n__marshal partition 0: leader {leader} killed, {new_leader} leads after "
        f"{time.monotonic() - killed_at:.1f}s"
    )
    time.sleep(3 * HB)  # the fleet works on through the failover
    kafka_cluster3.restart_node(leader)
    fleet.wait_for(lambda: sum(fleet.counts().values()) == 8, 60, "all 8 partitions held")
    fleet.stop_producing()
    fleet.wait_for(fleet.handled_everything, 60, "every record handled")
    for member in fleet.members:
        member.signal(signal.SIGTERM)
    for member in fleet.members:
        assert member.wait(40) == 0, member.log_tail()
    rows = fleet.ledger()
    assert not find_overlaps(rows), "two processes handled one partition at the same time"
    expected = {(fleet.topic, p): range(end) for p, end in fleet.end_offsets().items()}
    assert not find_gaps(rows, expected), "ALO skipped records"
    seen = claims_seen_won(fleet)
    assert seen, "no claim was logged"
    missing = seen - granted_claims(fleet)
    assert not missing, f"claims seen granted are not granted in the log: {missing}"
