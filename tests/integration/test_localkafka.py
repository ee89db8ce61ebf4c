"""Integration tests of marshal_workers.localkafka against real Kafka 4.2 JVMs."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, ShareConsumer
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from marshal_workers.localkafka import LocalKafka
from marshal_workers.localkafka.probe import quiet_admin

_QUIET = logging.getLogger("tests.localkafka.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def _eventually(what: str, condition: Callable[[], Any], timeout: float = 45.0) -> Any:
    """Poll `condition` until it returns something truthy; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.25)


def _create_topic(bootstrap: str, topic: str, partitions: int, replication: int) -> None:
    """Create `topic` and wait until every partition has a leader."""
    admin = quiet_admin(bootstrap)
    futures = admin.create_topics([NewTopic(topic, partitions, replication)], request_timeout=30)
    futures[topic].result(timeout=60)

    def all_led() -> bool:
        described = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if described is None or described.error is not None:
            return False
        parts = described.partitions.values()
        return len(parts) == partitions and all(p.leader >= 0 for p in parts)

    _eventually(f"leaders for {topic}", all_led)


def _produce(bootstrap: str, topic: str, values: list[bytes], acks: str = "all") -> None:
    """Produce `values` to partition 0 and assert each was acknowledged without error."""
    errors: list[KafkaError] = []
    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "message.timeout.ms": 60000,
        "logger": _QUIET,
    }
    producer = Producer(settings)

    def delivered(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=delivered)
    assert producer.flush(90) == 0, "messages still in flight"
    assert errors == []


def _consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """Read `count` values from the start of `topic` with a fresh consumer group."""
    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"localkafka-test-{uuid.uuid4()}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "logger": _QUIET,
    }
    consumer = Consumer(settings)
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value() or b"")
    finally:
        consumer.close()
    return values


# --- one node: a real round trip -----------------------------------------------------------


@pytest.mark.kafka
def test_produce_then_consume_round_trip(kafka_bootstrap: str) -> None:
    """Records produced to the single node come back, in order, to a consumer group."""
    topic = f"roundtrip-{uuid.uuid4().hex[:8]}"
    _create_topic(kafka_bootstrap, topic, partitions=1, replication=1)
    sent = [f"record-{i}".encode() for i in range(20)]
    _produce(kafka_bootstrap, topic, sent)
    assert _consume(kafka_bootstrap, topic, len(sent)) == sent


@pytest.mark.kafka
def test_a_share_consumer_reads_every_record(kafka_bootstrap: str) -> None:
    """Share groups are on: a ShareConsumer with explicit acknowledgement gets every record."""
    topic = f"share-{uuid.uuid4().hex[:8]}"
    group = f"share-{uuid.uuid4().hex[:8]}"
    _create_topic(kafka_bootstrap, topic, partitions=1, replication=1)
    sent = [f"record-{i}".encode() for i in range(20)]
    _produce(kafka_bootstrap, topic, sent)
    earliest = ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[earliest])
    admin = quiet_admin(kafka_bootstrap)  # kept alive until its future is done
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
    consumer = ShareConsumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "logger": _QUIET,
        }
    )
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])

        def read_some() -> bool:
            for message in consumer.poll(0.5):
                assert message.error() is None, message.error()
                got.append(message.value())
                consumer.acknowledge(message)
            consumer.commit_sync(30)
            return len(got) >= len(sent)

        _eventually("every record through the share group", read_some)
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)


@pytest.mark.kafka
def test_topics_are_not_auto_created(kafka_bootstrap: str) -> None:
    """Metadata for an unknown topic does not create it (auto.create.topics.enable=false)."""
    admin = quiet_admin(kafka_bootstrap)
    topic = f"absent-{uuid.uuid4().hex[:8]}"
    admin.list_topics(topic=topic, timeout=10)
    assert topic not in admin.list_topics(timeout=10).topics


# --- the CLI: start, status, stop (twice) --------------------------------------------------


def _admin_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `marshal-admin ARGS` (the installed script, or the same entry point via -c)."""
    script = Path(sys.executable).parent / "marshal-admin"
    if script.exists():
        argv = [str(script), *args]
    else:
        entry = "from marshal_workers.admin.cli import main; main()"
        argv = [sys.executable, "-c", entry, *args]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=240, check=False, cwd=cwd, env=env
    )


def _gone(pid: int) -> bool:
    """Whether `pid` has exited (a zombie awaiting its reaper counts as exited)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.kafka
def test_cli_start_status_stop_lifecycle(tmp_path: Path) -> None:
    """start prints bootstrap.servers= last; status sees it; stop returns once the JVM is gone,
    and a second stop exits 1 saying where it looked; no JVM is left."""
    where = str(tmp_path / "kafka")
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}  # its note of the cluster
    started = _admin_cli("kafka", "start", "--dir", where, env=env)
    assert started.returncode == 0, started.stderr
    last = started.stdout.strip().splitlines()[-1]
    assert last.startswith("bootstrap.servers=127.0.0.1:")
    try:
        again = _admin_cli("kafka", "start", "--dir", where, env=env)
        assert again.returncode == 0 and "already running" in again.stderr
        assert again.stdout.strip().splitlines()[-1] == last

        status = _admin_cli("kafka", "status", "--dir", where, "--json")
        assert status.returncode == 0, status.stderr
        data = json.loads(status.stdout)
        assert data["running"] is True and f"bootstrap.servers={data['bootstrap']}" == last
        pids = [node["pid"] for node in data["nodes"]]
        assert all(node["alive"] for node in data["nodes"]) and len(pids) == 1
        assert _admin_cli("kafka", "status", "--dir", where).returncode == 0
    finally:
        first_stop = _admin_cli("kafka", "stop", "--dir", where, env=env)
    assert first_stop.returncode == 0, first_stop.stderr
    assert all(_gone(pid) for pid in pids), "kafka stop returned before the JVM was gone"
    again = _admin_cli("kafka", "stop", "--dir", where, env=env)
    assert again.returncode == 1 and where in again.stderr, again.stderr  # nothing stopped
    assert _admin_cli("kafka", "status", "--dir", where).returncode == 1
    leftovers = [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if where in " ".join(p.info["cmdline"] or []) and not _gone(p.pid)
    ]
    assert leftovers == []


@pytest.mark.kafka
def test_stop_from_another_directory_finds_the_cluster_started(tmp_path: Path) -> None:
    """`kafka start` in one directory (its default ./.marshal/kafka), `kafka stop` in another
    with no --dir: it stops that cluster, says which, and returns once the JVM is gone; run
    again, it finds nothing and exits 1 naming where it looked."""
    here, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "MARSHAL_KAFKA_DIR"}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    started = _admin_cli("kafka", "start", cwd=here, env=env)
    assert started.returncode == 0, started.stderr
    status = _admin_cli("kafka", "status", "--json", cwd=here, env=env)
    pids = [node["pid"] for node in json.loads(status.stdout)["nodes"]]
    try:
        stopped = _admin_cli("kafka", "stop", cwd=elsewhere, env=env)
        assert stopped.returncode == 0, stopped.stderr
        assert str(here / ".marshal" / "kafka") in stopped.stderr
        assert all(_gone(pid) for pid in pids), "kafka stop returned before the JVM was gone"
        again = _admin_cli("kafka", "stop", cwd=elsewhere, env=env)
        assert again.returncode == 1, again.stderr
        assert str(elsewhere / ".marshal" / "kafka") in again.stderr
    finally:
        _admin_cli("kafka", "stop", "--dir", str(here / ".marshal" / "kafka"), env=env)


# --- three nodes: leader failover ----------------------------------------------------------


@pytest.mark.cluster
def test_three_nodes_all_answer(kafka_cluster3: LocalKafka) -> None:
    """All three nodes are alive and each is listed as a broker."""
    assert kafka_cluster3.alive() == {1: True, 2: True, 3: True}
    admin = quiet_admin(kafka_cluster3.bootstrap)
    assert sorted(admin.list_topics(timeout=10).brokers) == [1, 2, 3]


@pytest.mark.cluster
def test_killing_a_partition_leader_elects_another_and_acks_all_still_works(
    kafka_cluster3: LocalKafka,
) -> None:
    """kill -9 the leader: a new leader is elected, acks=all produce succeeds, restart rejoins."""
    cluster = kafka_cluster3
    topic = f"failover-{uuid.uuid4().hex[:8]}"
    _create_topic(cluster.bootstrap, topic, partitions=1, replication=3)
    _produce(cluster.bootstrap, topic, [b"before"])
    old_leader = cluster.leader_of(topic, 0)
    assert old_leader in (1, 2, 3)

    cluster.kill_node(old_leader)
    assert cluster.alive()[old_leader] is False

    def new_leader() -> int | None:
        leader = cluster.leader_of(topic, 0)
        return leader if leader not in (None, old_leader) else None

    elected = _eventually("a new leader", new_leader)
    assert elected != old_leader
    _produce(cluster.bootstrap, topic, [b"after"], acks="all")

    cluster.restart_node(old_leader)
    assert cluster.alive() == {1: True, 2: True, 3: True}
    assert _consume(cluster.bootstrap, topic, 2) == [b"before", b"after"]
