"""Coordination topics an operator (or a hostile writer) damaged, on real Kafka: a partition
emptied by DeleteRecords is caught up at once by `status` and by a starting member; a forged
CoordinationTopic record (the pinned partition count) is re-pinned by `marshal-admin
repin-partition-count`, which refuses when the log's claims disagree with the broker."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from tests.integration.fleet import Fleet

pytestmark = pytest.mark.kafka
HB = 1.0


@pytest.fixture
def fleet(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(kafka_bootstrap, tmp_path, hb=HB, partitions=4, coordination_partitions=3)
    try:
        yield f
    finally:
        f.close()


def delete_all_records(bootstrap: str, topic: str, partitions: list[int]) -> dict[int, int]:
    """DeleteRecords up to the end of each of ``partitions`` (after setting cleanup.policy to
    compact,delete: a compact-only topic refuses DeleteRecords); return the ends."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in (("cleanup.policy", "compact,delete"), ("retention.ms", "-1"))
    ]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "delete-probe"})
    try:
        ends = {
            p: probe.get_watermark_offsets(TopicPartition(topic, p), 10, cached=False)[1]
            for p in partitions
        }
    finally:
        probe.close()
    assert all(end > 0 for end in ends.values()), ends
    futures = admin.delete_records([TopicPartition(topic, p, end) for p, end in ends.items()])
    for future in futures.values():
        future.result(30)
    return ends


def test_a_partition_emptied_by_delete_records_is_caught_up(fleet: Fleet) -> None:
    """Every record of coordination partitions 1 and 2 deleted (start == end > 0): `status`
    answers complete at once (it waited out its timeout for a record that never came), and a
    member starting on the topic catches up and claims (it waited 60 s and exited 1)."""
    a = fleet.start("a")
    fleet.wait_split([4])
    a.signal(signal.SIGTERM)
    assert a.wait(30) == 0, a.log_tail()
    delete_all_records(fleet.bootstrap, fleet.coordination, [1, 2])

    started = time.monotonic()
    status = fleet.admin("status", "--group", fleet.group, "--json", "--timeout", "20")
    took = time.monotonic() - started
    assert status.returncode == 0, status.stderr
    view = json.loads(status.stdout)
    assert view["complete"], view["unavailable"]
    assert took < 15, f"status took {took:.1f}s"

    b = fleet.start("b")
    fleet.wait_for(lambda: "caught_up" in b.log_path.read_text(), 30, "b caught up")
    fleet.wait_split([4])
    assert b.proc.poll() is None, b.log_tail()
