"""`marshal-admin topic create` and `marshal-admin produce`: make a topic and
write records to it on any cluster, from a file or stdin, with --json saying what was done."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from marshal_workers.clients.rdkafka import RDKAFKA_LOG

pytestmark = pytest.mark.kafka
ADMIN = str(Path(sys.executable).with_name("marshal-admin"))


def admin(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")}
    return subprocess.run(
        [ADMIN, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def read_all(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, str | None, str]]:
    """Every record of ``topic``: (partition, key, value), in partition and offset order."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "probe", "logger": RDKAFKA_LOG}
    )
    out: list[tuple[int, str | None, str]] = []
    try:
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), 10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            while len([r for r in out if r[0] == p]) < high - low:
                msg = consumer.poll(10)
                assert msg is not None and msg.error() is None
                key = msg.key().decode() if msg.key() is not None else None
                out.append((p, key, msg.value().decode()))
    finally:
        consumer.close()
    return out


@pytest.fixture
def topic() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def test_topic_create_makes_the_partitions_asked_for(kafka_bootstrap: str, topic: str) -> None:
    done = admin("topic", "create", topic, "--partitions", "3", "--bootstrap-servers",
                 kafka_bootstrap, "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said == {"topic": topic, "created": True, "partitions": 3, "replication_factor": 1}
    meta = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(topic, timeout=10)
    assert len(meta.topics[topic].partitions) == 3

    again = admin("topic", "create", topic, "--partitions", "3", "--bootstrap-servers",
                  kafka_bootstrap)  # fmt: skip
    assert again.returncode == 1
    assert again.stderr.strip() == (
        f"marshal-admin: error: topic {topic} already exists on {kafka_bootstrap} (3 partitions)"
    )
    text = admin("topic", "create", topic, "--partitions", "3", "--if-not-exists",
                 "--bootstrap-servers", kafka_bootstrap)  # fmt: skip
    assert text.returncode == 0, text.stderr
    assert text.stdout.strip() == f"topic {topic} exists: 3 partition(s)"


def test_produce_key_tab_value_lines_from_a_file(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    assert admin("topic", "create", topic, "--partitions", "2", "--bootstrap-servers",
                 kafka_bootstrap).returncode == 0  # fmt: skip
    lines = tmp_path / "records.txt"
    lines.write_text("a\tfirst\nb\tsecond\n\nno key here\na\tthird, with\ta tab\n")
    done = admin("produce", topic, "--file", str(lines), "--bootstrap-servers",
                 kafka_bootstrap, "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["topic"] == topic and said["records"] == 4
    assert sum(p["records"] for p in said["partitions"].values()) == 4
    got = read_all(kafka_bootstrap, topic, 2)
    assert sorted((k or "", v) for _, k, v in got) == sorted(
        [("a", "first"), ("b", "second"), ("", "no key here"), ("a", "third, with\ta tab")]
    )
    assert [k for _, k, v in got if v == "no key here"] == [None]
    # one key, one partition, in the order written
    a_parts = {p for p, k, _ in got if k == "a"}
    assert len(a_parts) == 1
    assert [v for _, k, v in got if k == "a"] == ["first", "third, with\ta tab"]
    for p, counts in said["partitions"].items():
        assert counts["records"] == len([r for r in got if r[0] == int(p)])


def test_produce_json_lines_from_stdin_keyed_by_a_field(kafka_bootstrap: str, topic: str) -> None:
    assert admin("topic", "create", topic, "--partitions", "1", "--bootstrap-servers",
                 kafka_bootstrap).returncode == 0  # fmt: skip
    stdin = '{"id": "o-1", "total": 5}\n{"id": 7, "total": 9}\n'
    done = admin("produce", topic, "--key-field", "id", "--bootstrap-servers", kafka_bootstrap,
                 stdin=stdin)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"produced 2 record(s) to {topic} (partition 0: 2)"
    got = read_all(kafka_bootstrap, topic, 1)
    assert got == [
        (0, "o-1", '{"id": "o-1", "total": 5}'),
        (0, "7", '{"id": 7, "total": 9}'),
    ]


def test_produce_refuses_bad_input_and_missing_topics_writing_nothing(
    kafka_bootstrap: str, topic: str
) -> None:
    missing = admin("produce", topic, "--bootstrap-servers", kafka_bootstrap, stdin="x\n")
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        f"marshal-admin: error: topic {topic} does not exist on {kafka_bootstrap}: "
        f"create it with `marshal-admin topic create {topic} --partitions N`"
    )
    assert admin("topic", "create", topic, "--partitions", "1", "--bootstrap-servers",
                 kafka_bootstrap).returncode == 0  # fmt: skip
    bad = admin("produce", topic, "--key-field", "id", "--bootstrap-servers", kafka_bootstrap,
                stdin='{"id": 1}\n{"no": 2}\n')  # fmt: skip
    assert bad.returncode == 2
    assert "line 2" in bad.stderr and "'id'" in bad.stderr
    assert len(bad.stderr.splitlines()) == 1
    assert read_all(kafka_bootstrap, topic, 1) == []


def test_topic_list_and_describe_name_the_groups_working_on_a_topic(
    kafka_bootstrap: str, topic: str
) -> None:
    """topic list: each data topic, its partitions and the groups of the coordination log with
    claims on it (not the coordination topic, whose name need not start with ``__``: it was
    listed as a data topic, a review); topic describe: each partition's watermarks and each
    group's claim; dump --group: only that group's records."""
    coord = f"marshal-coord-{uuid.uuid4().hex[:8]}"
    where = ["--bootstrap-servers", kafka_bootstrap, "--coordination-topic", coord]
    assert admin("init", "--partitions", "1", *where).returncode == 0
    assert admin("topic", "create", topic, "--partitions", "2",
                 "--bootstrap-servers", kafka_bootstrap).returncode == 0  # fmt: skip
    assert admin("produce", topic, "--bootstrap-servers", kafka_bootstrap,
                 stdin="k\ta\nk\tb\nk\tc\n").returncode == 0  # fmt: skip
    from marshal_workers.log.kafkalog import KafkaLog  # noqa: PLC0415
    from marshal_workers.protocol.wire import (  # noqa: PLC0415
        ClaimingPartition,
        Heartbeat,
        encode,
        record_key,
    )

    log = KafkaLog(kafka_bootstrap, coord)
    try:
        for group, client in (("g.one", "w1"), ("g.two", "w2")):
            for msg in (ClaimingPartition(1, f"{client}-i", client, group, topic, 1),
                        Heartbeat(1, f"{client}-i", client, group, topic, 1, 1)):  # fmt: skip
                log.append(0, record_key(msg), encode(msg), 10)
    finally:
        log.close()
    listed = admin("topic", "list", "--json", *where)
    assert listed.returncode == 0, listed.stderr
    mine = [t for t in json.loads(listed.stdout)["topics"] if t["topic"] == topic]
    assert mine == [{"topic": topic, "partitions": 2, "groups": ["g.one", "g.two"]}]
    names = [t["topic"] for t in json.loads(listed.stdout)["topics"]]
    assert coord not in names and not any(name.startswith("__") for name in names), names
    described = admin("topic", "describe", topic, "--json", *where)
    assert described.returncode == 0, described.stderr
    parts = {p["partition"]: p for p in json.loads(described.stdout)["partitions"]}
    highs = {p: part["high"] for p, part in parts.items()}
    assert sum(highs.values()) == 3 and parts[0]["claims"] == []
    assert [(c["group"], c["holder"], c["offset"]) for c in parts[1]["claims"]] == [
        ("g.one", "w1", 1),
        ("g.two", "w2", 1),
    ]
    table = admin("topic", "describe", topic, *where)
    assert table.returncode == 0 and "g.one" in table.stdout and "HIGH" in table.stdout
    dumped = admin("dump", "--group", "g.two", "--json", *where)
    assert dumped.returncode == 0, dumped.stderr
    messages = [json.loads(line)["message"] for line in dumped.stdout.splitlines()]
    assert len(messages) == 2 and all("/g.two/" in m for m in messages), messages


def test_topic_describe_folds_each_group_with_its_recorded_heartbeat_interval(
    kafka_bootstrap: str, topic: str
) -> None:
    """A group recorded with HB = 1 s (changed from 10 s): w1's claim goes stale 2 s after its
    heartbeat and w2's later claim wins, as the group's members fold it. topic describe folded
    every group with one interval (10 s by default): w2's claim was rejected there, and w1
    shown holding the partition (stale) while status showed w2; the whole-log dump then took
    the group's first settings, not its newest (two reviews)."""
    from marshal_workers.config.runconfig import RunConfig  # noqa: PLC0415
    from marshal_workers.fleet.groupcheck import own_settings  # noqa: PLC0415
    from marshal_workers.log.kafkalog import KafkaLog  # noqa: PLC0415
    from marshal_workers.protocol.metadata import encode_metadata, metadata_key  # noqa: PLC0415
    from marshal_workers.protocol.modes import Mode  # noqa: PLC0415
    from marshal_workers.protocol.wire import (  # noqa: PLC0415
        ClaimingPartition,
        Heartbeat,
        encode,
        record_key,
    )

    coord = f"__marshal_{uuid.uuid4().hex[:8]}"
    where = ["--bootstrap-servers", kafka_bootstrap, "--coordination-topic", coord]
    assert admin("init", "--partitions", "1", *where).returncode == 0
    assert admin("topic", "create", topic, "--partitions", "2",
                 "--bootstrap-servers", kafka_bootstrap).returncode == 0  # fmt: skip
    group = "g.fast"
    settings = own_settings(RunConfig("h:h", Mode.ALO, (topic,), group, "w1",
                                      heartbeat_interval=1.0))  # fmt: skip
    before = replace(settings, heartbeat_interval_ms=10_000)  # changed since: the newest counts
    log = KafkaLog(kafka_bootstrap, coord)
    try:
        for recorded in (before, settings):
            log.append(0, metadata_key(recorded), encode_metadata(recorded), 10)
        for client in ("w1", "w2"):
            if client == "w2":
                time.sleep(3.5)  # w1's claim stale by the group's 1 s (2·HB), not by 10 s
            for msg in (ClaimingPartition(1, f"{client}-i", client, group, topic, 1),
                        Heartbeat(1, f"{client}-i", client, group, topic, 1, 0)):  # fmt: skip
                log.append(0, record_key(msg), encode(msg), 10)
    finally:
        log.close()
    status = admin("status", "--group", group, "--json", *where)
    assert status.returncode == 0, status.stderr
    held = [c["client_id"] for c in json.loads(status.stdout)["claims"] if c["topic"] == topic]
    assert held == ["w2"], status.stdout
    described = admin("topic", "describe", topic, "--json", *where)
    assert described.returncode == 0, described.stderr
    parts = {p["partition"]: p for p in json.loads(described.stdout)["partitions"]}
    # (its freshness is the clock's: HB = 1 s, and each command takes about that to start)
    assert [(c["group"], c["holder"]) for c in parts[1]["claims"]] == [(group, "w2")], parts[1]
    for extra in ([], ["--group", group]):  # the whole log's dump as the group's own
        dumped = admin("dump", "--json", *extra, *where)
        assert dumped.returncode == 0, dumped.stderr
        entries = [json.loads(line) for line in dumped.stdout.splitlines()]
        claims = [e["verdict"] for e in entries if e["message"].startswith("ClaimingPartition")]
        assert claims == ["ClaimGranted", "ClaimGranted"], (extra, entries)
