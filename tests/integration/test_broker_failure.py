"""One broker failure that Kafka rides out costs the fleet no lease.

A three-node cluster of combined nodes (broker and controller; RF 3, min.insync.replicas 2),
three members, and HB chosen by docs/operating.md's rule from the cluster's own failure detection
(`brokercheck.min_heartbeat_s`, read from the brokers with describe_configs). kill -9 of the node
leading the controller quorum stalls every coordination write for a controller failover plus
broker.session.timeout.ms plus re-election (10.1 s measured, against 5.8-7.3 s for another node;
a CI run that killed the coordination leader, which was then perhaps the quorum's too, lost a
claim under the rule that left the failover out); the leases must outlast it: no claim lost, no
child fenced or restarted, nothing handled twice at once, nothing skipped.
"""

from __future__ import annotations

import json
import signal
import time
from datetime import datetime

import pytest

from marshal_workers.common.ledgerfile import find_gaps, find_overlaps
from marshal_workers.fleet.brokercheck import min_heartbeat_s, read_failure_detection
from marshal_workers.localkafka import LocalKafka
from marshal_workers.log.topicadmin import admin_client
from tests.integration.fleet import Fleet, MakeFleet

pytestmark = pytest.mark.cluster
# the supervisor's log events that mean a lease or a claim was lost (snake_case: the names the
# member core logs; tests/unit/project/test_event_names.py keeps every name in that form)
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
    while isinstance(detection := read_failure_detection(admin_client(bootstrap), 10.0), str):
        assert time.monotonic() < deadline, "the brokers did not describe their configs"
        time.sleep(0.5)
    return min_heartbeat_s(detection)


@pytest.fixture
def fleet(kafka_cluster3: LocalKafka, make_fleet: MakeFleet) -> Fleet:
    hb = rule_heartbeat(kafka_cluster3.bootstrap)
    return make_fleet(bootstrap=kafka_cluster3.bootstrap, hb=hb, partitions=6)


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


def heartbeat_gaps(fleet: Fleet, seconds: float) -> dict[int, float]:
    """Watch the fold for ``seconds``: per data partition, the longest log-time gap (s) between a
    holder's heartbeats seen, counting from the last one before the watch to the first after."""
    last: dict[int, int] = {}
    gaps: dict[int, float] = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        fleet.reader.poll(0.2)
        for world in fleet.reader.worlds.values():
            for key, state in world.claims.items():
                if key.topic != fleet.topic or state.last_heartbeat is None:
                    continue
                before = last.get(key.partition)
                if before is not None and state.last_heartbeat > before:
                    gap = (state.last_heartbeat - before) / 1000
                    gaps[key.partition] = max(gaps.get(key.partition, 0.0), gap)
                last[key.partition] = state.last_heartbeat
    return gaps


def client_lines_since(fleet: Fleet, since: float, last: int = 8) -> str:
    """The last librdkafka lines each member logged after wall time ``since``: why a write
    stalled as long as it did, when a lease was lost after all."""
    out = []
    for member in fleet.members:
        lines = []
        for line in member.log_path.read_text().splitlines():
            if line.startswith("{") and '"marshal_workers.librdkafka"' in line:
                entry = json.loads(line)
                stamp = datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00"))
                if stamp.timestamp() >= since:
                    lines.append(f"  {entry['timestamp']} {entry['event'][:160]}")
        out.append(f"{member.client_id}:\n" + "\n".join(lines[-last:]))
    return "\n".join(out)


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
        lambda: {r.partition for r in fleet.ledger()} == set(range(fleet.partitions)),
        30,
        "every partition handled",
    )
    fleet.wait_for(lambda: every_claim_has_its_child(fleet), 30, "a child for every claim")
    children = {m.client_id: sorted(m.children()) for m in fleet.members}
    # The worst single failure of a cluster of combined nodes: the node leading the controller
    # quorum. Every coordination write stalls (each node follows every partition, and acks=all
    # waits for it) until the other voters have elected a new controller and that one has
    # fenced the dead broker a session timeout later.
    victim = kafka_cluster3.quorum_leader()
    assert victim is not None, "no node of the cluster says it leads the controller quorum"
    kafka_cluster3.kill_node(victim)
    killed_at, killed_wall = time.monotonic(), time.time()
    # the stall, then well past every lease that was running when it began; the log-time gaps
    # between heartbeats are what a rival's claim is judged by (stale past 2*HB)
    gaps = heartbeat_gaps(fleet, 2.5 * fleet.hb - (time.monotonic() - killed_at))
    print(f"longest heartbeat gaps in log time across the stall (s): {sorted(gaps.items())}")
    assert troubles(fleet) == [], (
        f"heartbeat gaps (s): {gaps}, stale past {2 * fleet.hb}s; the clients after the kill:\n"
        + client_lines_since(fleet, killed_wall)
    )
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
