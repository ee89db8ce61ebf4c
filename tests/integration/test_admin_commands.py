"""`marshal-admin init`, `status` and `dump` end to end: the real CLI against a real broker.

The acceptance scenario: init creates `__marshal` with LogAppendTime; hand-written version-1
records (a claim, its heartbeat, a rival claim and heartbeat, garbage, a claim and release)
then show up in `status --json` and `dump --json` with the fold's verdicts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)

pytestmark = pytest.mark.kafka

ADMIN = str(Path(sys.executable).with_name("marshal-admin"))
GROUP = "G"


def marshal_admin(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run the installed marshal-admin entry point (no MARSHAL_* variables inherited)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")}
    return subprocess.run(
        [ADMIN, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    """The topic's effective config, read with a plain AdminClient."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = admin.describe_configs([resource])
    return {k: v.value for k, v in entries[resource].result(10).items()}


def delete_topic(bootstrap: str, topic: str) -> None:
    """Delete a topic if it exists and wait until it is gone."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.delete_topics([topic], request_timeout=10)[topic].result(10)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{topic} not deleted"
        time.sleep(0.2)


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]]) -> None:
    """Produce records in order to partition 0 with a plain confluent-kafka Producer."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for key, value in records:
        producer.produce(topic, value=value, key=key, partition=0)
    assert producer.flush(30) == 0


def coordination_end(bootstrap: str, topic: str) -> int:
    """The end offset of partition 0 of ``topic`` (what has been written to it)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-reader"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def scenario_records() -> list[tuple[bytes | None, bytes]]:
    """The seven hand-written version-1 records of the acceptance scenario."""
    now = int(time.time())
    g0, g1 = f"{GROUP}/orders/0".encode(), f"{GROUP}/orders/1".encode()
    return [
        (g0, f"ClaimingPartition/1/{now}/A-1/A/{GROUP}/orders/0".encode()),
        (g0, f"Heartbeat/1/{now}/A-1/A/{GROUP}/orders/0/5".encode()),
        (g0, f"ClaimingPartition/1/{now}/B-1/B/{GROUP}/orders/0".encode()),
        (g0, f"Heartbeat/1/{now}/B-1/B/{GROUP}/orders/0/9".encode()),
        (b"junk", b"this is not a marshal message"),
        (g1, f"ClaimingPartition/1/{now}/A-1/A/{GROUP}/orders/1".encode()),
        (g1, f"ReleasingPartition/1/{now}/A-1/A/{GROUP}/orders/1/42".encode()),
    ]


class TestAcceptance:
    def test_init_status_dump_on_hand_written_records(self, kafka_bootstrap: str) -> None:
        """init creates __marshal; status and dump show the fold of hand-written records."""
        delete_topic(kafka_bootstrap, "__marshal")
        common = ["--bootstrap-servers", kafka_bootstrap]
        init = marshal_admin("init", "--partitions", "1", *common)
        assert init.returncode == 0, init.stderr
        assert "created coordination topic __marshal" in init.stdout
        config = topic_config(kafka_bootstrap, "__marshal")
        assert config["message.timestamp.type"] == "LogAppendTime"
        assert config["cleanup.policy"] == "compact"
        assert config["unclean.leader.election.enable"] == "false"

        produce(kafka_bootstrap, "__marshal", scenario_records())
        hb = ["--heartbeat-interval", "60"]
        status = marshal_admin("status", "--group", GROUP, "--json", *hb, *common)
        assert status.returncode == 0, status.stderr
        out: dict[str, Any] = json.loads(status.stdout)
        assert out["group"] == GROUP
        # the junk record's key names another group ("junk"): status folds GROUP's view
        assert (out["malformed"], out["other_groups_records"]) == (0, 1)
        assert out["paused_until"] is None
        held, released = out["claims"]
        assert (held["topic"], held["partition"]) == ("orders", 0)
        assert (held["client_id"], held["instance_id"]) == ("A", "A-1")
        assert held["offset"] == 5
        assert held["state"] in {"fresh", "unknown"}
        assert held["fencing_token"] == 1  # offset 0 is init's record of the partition count
        assert (released["topic"], released["partition"]) == ("orders", 1)
        assert released["state"] == "released"
        assert released["offset"] == 42
        assert released["client_id"] is None
        assert released["instance_id"] is None

        dump = marshal_admin("dump", "--json", *hb, *common)
        assert dump.returncode == 0, dump.stderr
        lines = [json.loads(line) for line in dump.stdout.splitlines()]
        recorded, lines = lines[0], lines[1:]
        assert (recorded["key"], recorded["verdict"]) == ("/coordination-topic", "TopicRecorded")
        assert [(d["partition"], d["offset"]) for d in lines] == [(0, i) for i in range(1, 8)]
        assert [d["verdict"] for d in lines] == [
            "ClaimGranted",
            "HeartbeatAccepted",
            "ClaimRejected",
            "HeartbeatRejected",
            "Malformed",
            "ClaimGranted",
            "Released",
        ]
        assert lines[2]["reason"] == "held by A"
        assert lines[4]["key"] == "junk"
        assert all(d["log_time"].endswith("Z") for d in lines)

        text = marshal_admin("status", "--group", GROUP, *hb, *common)
        assert text.returncode == 0, text.stderr
        assert "released" in text.stdout
        assert "records of other groups, counted not decoded: 1" in text.stdout


class TestInit:
    def test_default_partitions_and_rerun(self, kafka_bootstrap: str) -> None:
        """init makes 4 partitions by default; a second init finds the topic and exits 0."""
        topic = f"coord-{uuid.uuid4().hex[:8]}"
        args = ["--coordination-topic", topic, "--bootstrap-servers", kafka_bootstrap]
        try:
            first = marshal_admin("init", *args)
            assert first.returncode == 0, first.stderr
            assert "4 partition(s), replication factor 1" in first.stdout
            again = marshal_admin("init", *args)
            assert again.returncode == 0, again.stderr
            assert again.stdout.startswith(f"found coordination topic {topic}")
            assert again.stderr == ""
        finally:
            delete_topic(kafka_bootstrap, topic)

    def test_create_time_topic_is_fatal(self, kafka_bootstrap: str) -> None:
        """init on an existing topic with Kafka's defaults warns, and exits 1 on CreateTime."""
        topic = f"coord-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
        try:
            result = marshal_admin(
                "init", "--coordination-topic", topic, "--bootstrap-servers", kafka_bootstrap
            )
            assert result.returncode == 1
            assert "warning: cleanup.policy is delete, should be compact" in result.stderr
            last = result.stderr.strip().splitlines()[-1]
            assert last.startswith(
                "marshal-admin: error: fatal: message.timestamp.type is "
                "CreateTime, must be LogAppendTime"
            )
            assert "Traceback" not in result.stderr
        finally:
            delete_topic(kafka_bootstrap, topic)


class TestStatus:
    def test_lag_against_the_data_topic(self, kafka_bootstrap: str) -> None:
        """lag is the data partition's high watermark minus the committed offset."""
        coord, data = f"coord-{uuid.uuid4().hex[:8]}", f"data-{uuid.uuid4().hex[:8]}"
        args = ["--coordination-topic", coord, "--bootstrap-servers", kafka_bootstrap]
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        admin.create_topics([NewTopic(data, 1, 1)])[data].result(10)
        try:
            assert marshal_admin("init", "--partitions", "1", *args).returncode == 0
            produce(kafka_bootstrap, data, [(None, b"m")] * 10)
            key = f"{GROUP}/{data}/0".encode()
            produce(
                kafka_bootstrap,
                coord,
                [
                    (key, f"ClaimingPartition/1/0/A-1/A/{GROUP}/{data}/0".encode()),
                    (key, f"Heartbeat/1/0/A-1/A/{GROUP}/{data}/0/7".encode()),
                ],
            )
            result = marshal_admin("status", "--group", GROUP, "--json", *args)
            assert result.returncode == 0, result.stderr
            (claim,) = json.loads(result.stdout)["claims"]
            assert (claim["offset"], claim["lag"]) == (7, 3)
        finally:
            delete_topic(kafka_bootstrap, coord)
            delete_topic(kafka_bootstrap, data)


class TestErrors:
    def test_unknown_group_is_an_error(self, kafka_bootstrap: str) -> None:
        """status of a group the coordination log has never named says so, exit 1 (it
        printed an empty table and exited 0)."""
        coord = f"coord-{uuid.uuid4().hex[:8]}"
        args = ["--coordination-topic", coord, "--bootstrap-servers", kafka_bootstrap]
        try:
            assert marshal_admin("init", "--partitions", "1", *args).returncode == 0
            key = f"{GROUP}/orders/0".encode()
            produce(
                kafka_bootstrap,
                coord,
                [(key, f"ClaimingPartition/1/0/A-1/A/{GROUP}/orders/0".encode())],
            )
            error = (
                f"group no.such.group is unknown: {coord} on {kafka_bootstrap} has no record of it"
            )
            for extra in ([], ["--json"]):
                result = marshal_admin("status", "--group", "no.such.group", *extra, *args)
                assert result.returncode == 1, result.stdout
                assert result.stderr.strip() == f"marshal-admin: error: {error}"
                if extra:  # --json answers JSON all the same (and the line on stderr)
                    answer = json.loads(result.stdout)
                    assert answer["group"] == "no.such.group" and answer["known"] is False
                    assert answer["error"] == error and answer["claims"] == []
                else:
                    assert result.stdout == ""
            known = marshal_admin("status", "--group", GROUP, "--json", *args)
            assert known.returncode == 0, known.stderr
            # dump --group and group-settings of a typo printed nothing (or "no recorded
            # settings") and exited 0 (a review): the same line as status, exit 1
            for command in (
                ("dump", "--group", "no.such.group"),
                ("dump", "--group", "no.such.group", "--json"),
                ("group-settings", "--group", "no.such.group"),
            ):
                result = marshal_admin(*command, *args)
                assert result.returncode == 1, (command, result.stdout)
                assert result.stderr.strip() == f"marshal-admin: error: {error}", command
                assert result.stdout == "", command
            for command in (("dump", "--group", GROUP), ("group-settings", "--group", GROUP)):
                assert marshal_admin(*command, *args).returncode == 0, command
            # release-group of a typo paused nothing that runs and said "paused", exit 0, and
            # left a ghost group that status then knew (a review): refused, nothing written
            pause = ("release-group", "--group", "no.such.group", "--for", "10", *args)
            refused = marshal_admin(*pause)
            assert refused.returncode == 1, refused.stdout
            assert refused.stderr.strip() == (
                f"marshal-admin: error: {error}; nothing written (to pause a group before its "
                "first member starts, add --new-group)"
            )
            lift = marshal_admin(*pause[:4], "0", *args)  # nothing to lift, nothing written
            assert lift.returncode == 0, lift.stderr
            assert lift.stdout.startswith("group no.such.group has no pause to lift"), lift.stdout
            still = marshal_admin("status", "--group", "no.such.group", *args)
            assert still.returncode == 1 and "is unknown" in still.stderr
            for group in ("no.such.group", GROUP):  # asked for, or known: paused
                flags = ["--new-group"] if group != GROUP else []
                paused = marshal_admin(*pause[:2], group, *pause[3:], *flags)
                assert paused.returncode == 0, paused.stderr
                assert f"group {group} paused until" in paused.stdout
        finally:
            delete_topic(kafka_bootstrap, coord)

    def test_set_position_of_a_typo_or_of_a_topic_the_group_never_read_is_refused(
        self, kafka_bootstrap: str
    ) -> None:
        """set-position of a group the log has never named, or on a topic the group has no
        claim on, wrote a pause and claims, exited 0, and left a group (or a topic of the
        group) that nothing runs; a group of that name first started later was spread (a
        review): refused, exit 1, nothing written, unless --new-group / --new-topic."""
        coord = f"coord-{uuid.uuid4().hex[:8]}"
        data, other = f"data-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}"
        args = ["--coordination-topic", coord, "--bootstrap-servers", kafka_bootstrap]
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        for name in (data, other):
            admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
        try:
            assert marshal_admin("init", "--partitions", "1", *args).returncode == 0
            key = f"{GROUP}/{data}/0".encode()
            produce(
                kafka_bootstrap,
                coord,
                [(key, f"ClaimingPartition/1/0/A-1/A/{GROUP}/{data}/0".encode())],
            )
            end = coordination_end(kafka_bootstrap, coord)
            log = f"{coord} on {kafka_bootstrap}"
            typo = ("set-position", "--group", "G2", "--topic", data, "--to-latest", *args)
            elsewhere = ("set-position", "--group", GROUP, "--topic", other, "--to-latest", *args)
            for extra in ([], ["--dry-run"]):
                refused = marshal_admin(*typo, *extra)
                assert refused.returncode == 1, refused.stdout
                assert refused.stderr.strip() == (
                    f"marshal-admin: error: group G2 is unknown: {log} has no record of it; "
                    "nothing written (to set where a group starts before its first member "
                    "does, add --new-group)"
                )
                refused = marshal_admin(*elsewhere, *extra)
                assert refused.returncode == 1, refused.stdout
                assert refused.stderr.strip() == (
                    f"marshal-admin: error: group {GROUP} has no claim on topic {other} in "
                    f"{log}; nothing written (to set where the group starts on a topic it has "
                    "not consumed yet, add --new-topic)"
                )
            assert coordination_end(kafka_bootstrap, coord) == end  # nothing written
            for meant in ((*typo, "--new-group"), (*elsewhere, "--new-topic")):
                planned = marshal_admin(*meant, "--dry-run")
                assert planned.returncode == 0, planned.stderr
            known = marshal_admin(
                "set-position", "--group", GROUP, "--topic", data, "--dry-run", "--to-latest", *args
            )
            assert known.returncode == 0, known.stderr
        finally:
            for name in (coord, data, other):
                delete_topic(kafka_bootstrap, name)

    def test_unreachable_broker_is_one_line(self) -> None:
        """status against an unreachable bootstrap exits non-zero with one line, in ~15 s."""
        start = time.monotonic()
        result = marshal_admin("status", "--group", GROUP, "--bootstrap-servers", "127.0.0.1:1")
        assert time.monotonic() - start < 15.0
        assert result.returncode != 0
        assert result.stdout == ""
        assert len(result.stderr.strip().splitlines()) == 1
        assert "cannot reach Kafka at 127.0.0.1:1" in result.stderr
        assert "Traceback" not in result.stderr

    def test_an_unreachable_broker_is_given_up_on_within_the_commands_timeout(self) -> None:
        """--timeout 3 against an unreachable bootstrap: "within 3s", and well before the 10 s
        a command allows by default (it said "within 10s" and took them; a review)."""
        for command in (("status", "--group", GROUP), ("dump", "--group", GROUP)):
            start = time.monotonic()
            result = marshal_admin(*command, "--bootstrap-servers", "127.0.0.1:1", "--timeout", "3")
            assert time.monotonic() - start < 9.0, command
            assert result.returncode == 1, command
            assert result.stderr.startswith(
                "marshal-admin: error: cannot reach Kafka at 127.0.0.1:1 within 3s: "
            ), result.stderr

    def test_missing_coordination_topic_says_run_init(self, kafka_bootstrap: str) -> None:
        """status on a coordination topic that does not exist says to run init."""
        topic = f"missing-{uuid.uuid4().hex[:8]}"
        result = marshal_admin(
            "status",
            "--group",
            GROUP,
            "--coordination-topic",
            topic,
            "--bootstrap-servers",
            kafka_bootstrap,
        )
        assert result.returncode != 0
        assert result.stderr.strip() == (
            f"marshal-admin: error: coordination topic {topic} does not exist on "
            f"{kafka_bootstrap}: run `marshal-admin init`"
        )
