"""One broker failure that Kafka rides out costs the fleet no lease (issue 9, item 8).

A three-node cluster (RF 3, min.insync.replicas 2), three members, and HB chosen by the
docs/operating.md's rule from the cluster's own failure detection (`brokercheck.min_heartbeat_s`,
read from the brokers with describe_configs). kill -9 of the node leading coordination partition 0
stalls every coordination write for about broker.session.timeout.ms plus re-election; the leases
must outlast it: no claim lost, no child fenced or restarted, nothing handled twice at once, nothing
skipped.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from marshal_workers.common.ledgerfile import find_gaps, find_overlaps
from marshal_workers.localkafka import LocalKafka
from marshal_workers.log.topicadmin import admin_client
from marshal_workers.supervisor.brokercheck import min_heartbeat_s, read_failure_detection
from tests.integration.fleet import Fleet

pytestmark = pytest.mark.cluster
# the supervisor's log events that mean a lease or a claim was lost (snake_case: the names the
# member core logs; tests/unit/test_event_names.py keeps every name in that form)
TROUBLE = {
    "claim_lost",
    "claim_releasing",
    "child_restarting",
    "lease_expired",
    "heartbeat_interval_too_small",
}


def rule_heartbeat(bootstrap: str) -> float:
    """The least HB docs/operating.md's rule allows on this cluster (asked of its brokers)."""
    deadline = time.monotonic() + 30
    while (detection := read_failure_detection(admin_client(bootstrap), 10.0)) is None:
        assert time.monotonic() < deadline, "the brokers did not describe their configs"
        time.sleep(0.5)
    return min_heartbeat_s(detection)


@pytest.fixture
def fleet(kafka_cluster3: LocalKafka, tmp_path: Path) -> Iterator[Fleet]:
    hb = rule_heartbeat(kafka_cluster3.bootstrap)
    f = Fleet(kafka_cluster3.bootstrap, tmp_path, hb=hb, partitions=6)
    try:
        yield f
    finally:
        f.close()


def troubles(fleet: Fleet) -> list[tuple[object, ...]]:
    """Every lost claim, fenced-and-released claim or restarted child, as (client, event,
    partition, reason)."""
    out = []
    for member in fleet.members:
        for line in member.log_path.read_text().splitlines():
            if line.startswith("{"):
                entry = json.loads(line)
                if entry.get("event") in TROUBLE:
                    out.append(
                        (entry["client_id"], entry["event"], entry.get("partition"),
                         entry.get("reason"))
                    )  # fmt: skip
    return out


def every_claim_has_its_child(fleet: Fleet) -> bool:
    """Whether each member runs as many children as it holds claims (per the log)."""
    counts = fleet.counts()
    return all(len(m.children()) == counts.get(m.client_id, 0) for m in fleet.members)


def test_killing_one_broker_costs_no_lease(fleet: Fleet, kafka_cluster3: LocalKafka) -> None:
    """kill -9 one node mid-run, HB per the rule: every claim, child and position survives."""
    print(f"\nHB by the rule for this cluster: {fleet.hb}s")
    fleet.produce_steadily(300)
    for name in ("a", "b", "c"):
        fleet.start(name)
    fleet.wait_for(lambda: sorted(fleet.counts().values()) == [2, 2, 2], 60, "a 2/2/2 split")
    # A claim is live in the log from the moment it is won; its child starts only once its
    # start position is found and the fork server has forked it, which under load can be
    # seconds later. The children are counted once every claim has its child and every
    # partition has been handled: a first start after the count is not a restart.
    fleet.wait_for(
        lambda: {r["partition"] for r in fleet.ledger()} == set(range(fleet.partitions)),
        30,
        "every partition handled",
    )
    fleet.wait_for(lambda: every_claim_has_its_child(fleet), 30, "a child for every claim")
    children = {m.client_id: sorted(m.children()) for m in fleet.members}
    victim = kafka_cluster3.leader_of(fleet.coordination, 0)
    assert victim is not None
    kafka_cluster3.kill_node(victim)
    killed_at = time.monotonic()
    # the stall, then well past every lease that was running when it began
    fleet.wait_for(lambda: time.monotonic() - killed_at > 2.5 * fleet.hb, 4 * fleet.hb, "time")
    assert troubles(fleet) == []
    assert {m.client_id: sorted(m.children()) for m in fleet.members} == children
    assert sorted(fleet.counts().values()) == [2, 2, 2]
    kafka_cluster3.restart_node(victim)
    fleet.stop_producing()
    fleet.wait_for(fleet.handled_everything, 90, "every record handled")
    for member in fleet.members:
        member.signal(signal.SIGTERM)
    for member in fleet.members:
        assert member.wait(60) == 0, member.log_tail()
    assert troubles(fleet) == []
    rows = fleet.ledger()
    assert not find_overlaps(rows), "two processes handled one partition at the same time"
    expected = {(fleet.topic, p): range(end) for p, end in fleet.end_offsets().items()}
    assert not find_gaps(rows, expected), "ALO skipped records"
