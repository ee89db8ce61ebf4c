"""A supervisor that sees Marshal Go records for its own group refuses to run
(Go fleets are migrated from, never shared with: docs/design.md#the-coordination-log), against
real Kafka with records written in Go's exact format, keyless."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from marshal_workers.clients.rdkafka import RDKAFKA_LOG
from marshal_workers.common.errors import EXIT_GO_FLEET
from marshal_workers.log.partitioncount import write_topic_record
from tests.integration.go_fleet import create_go_topic, fixture_lines, write_go_records

pytestmark = pytest.mark.kafka
MARSHAL_RUN = Path(sys.executable).with_name("marshal-run")


def _command(bootstrap: str, coordination: str, group: str, topic: str) -> list[str]:
    return [
        str(MARSHAL_RUN),
        "--handler", "marshal_workers.plugins.echo:handle", "--mode", "alo", "--topic", topic,
        "--group", group, "--client-id", "ours-1", "--bootstrap-servers", bootstrap,
        "--coordination-topic", coordination, "--heartbeat-interval", "1",
        "--log-format", "json",
    ]  # fmt: skip


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")}
    env["XDG_RUNTIME_DIR"] = str(tmp_path / "run")
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return env


def test_compacted_topic_refuses_go_records(kafka_bootstrap: str) -> None:
    """Why a Go fleet cannot even write to our `__marshal`: compaction refuses keyless records."""
    topic = create_go_topic(kafka_bootstrap, 1, compacted=True)
    errors = write_go_records(kafka_bootstrap, topic, 1, fixture_lines("g", "t")[:1])
    assert errors and errors[0] is not None and "INVALID_RECORD" in errors[0].name()


def test_supervisor_refuses_a_group_a_go_fleet_writes_to(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Go records of another group are left alone; a Go record of our group stops a running
    supervisor, and a new one refuses at start: exit 5, one line naming Marshal Go."""
    uid = uuid.uuid4().hex[:8]
    group, topic = f"g_{uid}", f"data_{uid}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap, "logger": RDKAFKA_LOG})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    coordination = create_go_topic(kafka_bootstrap, 2)
    # as `marshal-admin init` would: members refuse a topic whose partition count is not pinned
    write_topic_record(kafka_bootstrap, coordination, 2, "test-init", 30.0)
    write_go_records(kafka_bootstrap, coordination, 2, fixture_lines(f"other_{uid}", topic))
    log_path = tmp_path / "run.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            _command(kafka_bootstrap, coordination, group, topic),
            stdout=out, stderr=out, env=_env(tmp_path), start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while b'"supervisor_started"' not in log_path.read_bytes():
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "the supervisor did not start"
            time.sleep(0.1)
        # A Go consumer of our group heartbeats: keyless, Go's partitioner.
        write_go_records(kafka_bootstrap, coordination, 2, fixture_lines(group, topic)[-3:-2])
        assert proc.wait(60) == EXIT_GO_FLEET, log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    last = log_path.read_text().splitlines()[-1]
    assert last.startswith("marshal-run: error: a Marshal Go fleet is writing to group")
    assert all(json.loads(line)["event"] for line in log_path.read_text().splitlines()[:-1])

    again = subprocess.run(
        _command(kafka_bootstrap, coordination, group, topic),
        capture_output=True, text=True, timeout=120, env=_env(tmp_path), check=False,
    )  # fmt: skip
    assert again.returncode == EXIT_GO_FLEET, again.stderr
    *before, error = again.stderr.splitlines()
    assert again.stdout == "" and group in error and "Marshal Go" in error
    # only warnings come first: this (delete-policy) topic is not compacted, and HB = 1 s is
    # small for the local broker's failure detection
    warned = {json.loads(line)["event"] for line in before}
    assert warned <= {"coordination_topic_setting", "heartbeat_interval_too_small"}
