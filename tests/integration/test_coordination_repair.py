"""Coordination topics an operator (or a hostile writer) damaged, on real Kafka: a partition
emptied by DeleteRecords is caught up at once by `status` and by a starting member; a forged
CoordinationTopic record (the pinned partition count) is re-pinned by `marshal-admin
repin-partition-count`, which refuses when the log's claims disagree with the broker."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from marshal_workers.common.errors import EXIT_COORDINATION_CHANGED
from marshal_workers.log.partitioncount import read_topic_record
from marshal_workers.protocol.metadata import TOPIC_RECORD_KEY
from tests.integration.fleet import Fleet, MakeFleet
from tests.integration.test_fleet_ops import grow

pytestmark = pytest.mark.kafka
HB = 1.0


@pytest.fixture
def fleet(make_fleet: MakeFleet) -> Fleet:
    return make_fleet(hb=HB, partitions=4, coordination_partitions=3)


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


def forge_pin(bootstrap: str, topic: str, count: int) -> None:
    """A hostile (or mistaken) writer's CoordinationTopic record with ``count``."""
    producer = Producer({"bootstrap.servers": bootstrap})
    value = f"CoordinationTopic/1/1/forger/forger/{count}".encode()
    producer.produce(topic, value=value, key=TOPIC_RECORD_KEY, partition=0)
    assert producer.flush(30) == 0


def error_line(member_log: Path) -> str:
    (line,) = [
        s for s in member_log.read_text().splitlines() if s.startswith("marshal-run: error:")
    ]
    return line


def test_a_forged_pinned_count_is_repinned_at_the_brokers_count(fleet: Fleet) -> None:
    """A forged CoordinationTopic record (7 partitions, the topic has 3): the running member
    goes on, a new one exits 4 and init refuses. `repin-partition-count --dry-run` says what
    it would write; `repin-partition-count` re-pins 3, and then a new member runs and init
    passes."""
    a = fleet.start("a")
    fleet.wait_split([4])
    forge_pin(fleet.bootstrap, fleet.coordination, 7)
    b = fleet.start("b")
    assert b.wait(60) == EXIT_COORDINATION_CHANGED, b.log_tail()
    assert "has 3 partitions but 7 were recorded at init" in error_line(b.log_path)
    assert fleet.admin("init").returncode == 1
    assert a.proc.poll() is None, a.log_tail()

    dry = fleet.admin("repin-partition-count", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "the broker's metadata shows 3 partition(s); the pinned count is 7" in dry.stdout
    assert f"the claims of 1 group(s) fit 3 partitions ({fleet.group})" in dry.stdout
    assert "would re-pin" in dry.stdout
    again = fleet.start("b")
    assert again.wait(60) == EXIT_COORDINATION_CHANGED, again.log_tail()

    done = fleet.admin("repin-partition-count")
    assert done.returncode == 0, done.stderr
    assert f"re-pinned {fleet.coordination} at 3 partitions" in done.stdout
    assert read_topic_record(fleet.bootstrap, fleet.coordination, 20.0).partitions == 3  # type: ignore[union-attr]
    c = fleet.start("c")
    fleet.wait_split([2, 2])
    assert c.proc.poll() is None and a.proc.poll() is None
    init = fleet.admin("init")
    assert init.returncode == 0, init.stderr
    assert "partition count pinned at 3 (as recorded at init)" in init.stdout
    nothing = fleet.admin("repin-partition-count")
    assert nothing.returncode == 0 and "nothing to do" in nothing.stdout


def test_repinning_a_topic_that_really_grew_is_refused(make_fleet: MakeFleet) -> None:
    """The topic gained a partition (2 -> 3): the running member exits 4, and re-pinning is
    refused (exit 1), since the group's claims are coordinated for the recorded 2."""
    grown = make_fleet(hb=HB, partitions=8, coordination_partitions=2)
    a = grown.start("a")
    grown.wait_split([8])
    grow(grown.bootstrap, grown.coordination, 3)
    assert a.wait(60) == EXIT_COORDINATION_CHANGED, a.log_tail()
    refused = grown.admin("repin-partition-count")
    assert refused.returncode == 1, refused.stdout
    (line,) = refused.stderr.strip().splitlines()
    assert f"refusing to re-pin {grown.coordination} at 3" in line
    assert f"the claims of {grown.group} are coordinated for the recorded 2" in line
    assert read_topic_record(grown.bootstrap, grown.coordination, 20.0).partitions == 2  # type: ignore[union-attr]
