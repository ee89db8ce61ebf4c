"""The operator on a three-node local cluster, in one module because
a three-node cluster is slow to start: `init` on a brand-new cluster, `status` with a node
down (it degrades, never goes silent), and `kafka start` bringing back only the dead node,
with its data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from marshal_workers.clients.rdkafka import RDKAFKA_LOG
from marshal_workers.localkafka import LocalKafka
from marshal_workers.log.kafkalog import KafkaLog
from marshal_workers.protocol.wire import (
    ClaimingPartition,
    ClaimKey,
    Heartbeat,
    coordination_partition,
    encode,
    record_key,
)

pytestmark = [pytest.mark.kafka, pytest.mark.cluster]
MARSHAL_ADMIN = Path(sys.executable).with_name("marshal-admin")
DATA_PARTITIONS = 6
RECORDS = 60


def admin_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")}
    return subprocess.run(
        [str(MARSHAL_ADMIN), *args],
        capture_output=True, text=True, timeout=timeout, env=env, check=False,
    )  # fmt: skip


def test_init_on_a_brand_new_cluster_creates_the_topic_at_once(
    kafka_cluster3: LocalKafka,
) -> None:
    """The first command on the new cluster: init creates the topic and reads its config back
    (it used to fail with "Unknown topic or partition" while the brokers caught up)."""
    done = admin_cli(
        "init", "--bootstrap-servers", kafka_cluster3.bootstrap,
        "--coordination-topic", f"__marshal_{uuid.uuid4().hex[:8]}", "--partitions", "4",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("created coordination topic"), done.stdout


def _setup_group(bootstrap: str) -> tuple[str, str, str]:
    """A coordination topic, a data topic (replication factor 1: its partitions live on one
    node each) with records, and a group holding every data partition."""
    uid = uuid.uuid4().hex[:8]
    coordination, topic, group = f"__marshal_{uid}", f"data_{uid}", f"g_{uid}"
    init = admin_cli(
        "init", "--bootstrap-servers", bootstrap, "--coordination-topic", coordination,
        "--partitions", "2",
    )  # fmt: skip
    assert init.returncode == 0, init.stderr
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": RDKAFKA_LOG})
    admin.create_topics([NewTopic(topic, DATA_PARTITIONS, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "logger": RDKAFKA_LOG})
    for i in range(RECORDS):
        producer.produce(topic, f"r{i}".encode(), partition=i % DATA_PARTITIONS)
    assert producer.flush(30) == 0
    log = KafkaLog(bootstrap, coordination)
    try:
        for p in range(DATA_PARTITIONS):
            key = ClaimKey(group, topic, p)
            home = coordination_partition(topic, p, log.num_partitions)
            for msg in (
                ClaimingPartition(1, "i-1", "w1", group, topic, p),
                Heartbeat(1, "i-1", "w1", group, topic, p, 3),
            ):
                log.append(home, record_key(msg), encode(msg), 10)
            assert key.partition == p
    finally:
        log.close()
    return coordination, topic, group


def _ends(bootstrap: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", "logger": RDKAFKA_LOG})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), 10, cached=False)[1]
            for p in range(DATA_PARTITIONS)
        }
    finally:
        c.close()


def test_status_with_a_node_down_then_start_brings_back_only_that_node(
    kafka_cluster3: LocalKafka,
) -> None:
    """A node is killed: `status --json` still prints every claim, marks the result
    incomplete and names the partitions it could not read; the table says so too. Then
    `kafka start --dir` restarts only the dead node, with the cluster's id, ports and data."""
    bootstrap = kafka_cluster3.bootstrap
    coordination, topic, group = _setup_group(bootstrap)
    before = json.loads(
        admin_cli("kafka", "status", "--dir", str(kafka_cluster3.directory), "--json").stdout
    )
    victim = kafka_cluster3.leader_of(topic, 0)
    assert victim is not None
    kafka_cluster3.kill_node(victim)
    common = ["--bootstrap-servers", bootstrap, "--coordination-topic", coordination]
    done = admin_cli("status", "--group", group, "--json", "--timeout", "20", *common)
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert len(status["claims"]) == DATA_PARTITIONS
    assert status["complete"] is False
    assert any(f"{topic}[0]" in what for what in status["unavailable"]), status["unavailable"]
    table = admin_cli("status", "--group", group, "--timeout", "20", *common)
    assert table.returncode == 0 and "INCOMPLETE: could not read:" in table.stdout

    started = admin_cli("kafka", "start", "--dir", str(kafka_cluster3.directory), "--nodes", "3")
    assert started.returncode == 0, started.stderr
    assert started.stdout.splitlines()[-1] == f"bootstrap.servers={bootstrap}"
    after = json.loads(
        admin_cli("kafka", "status", "--dir", str(kafka_cluster3.directory), "--json").stdout
    )
    assert after["running"] is True and after["cluster_id"] == before["cluster_id"]
    pids = {n["node_id"]: n["pid"] for n in after["nodes"]}
    old = {n["node_id"]: n["pid"] for n in before["nodes"]}
    assert {i: p for i, p in pids.items() if i != victim} == {
        i: p for i, p in old.items() if i != victim
    }, "a live node was restarted"
    assert pids[victim] != old[victim]
    assert sum(_ends(bootstrap, topic).values()) == RECORDS, "records were lost"
    back = admin_cli("status", "--group", group, "--json", "--timeout", "30", *common)
    assert json.loads(back.stdout)["complete"] is True, back.stdout
