"""Two services on one host with default client ids (host lock; item 4, the
default id): different groups both run; a second worker of the same group and id refuses;
the lock files are gone once they stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from marshal_workers.clients.rdkafka import RDKAFKA_LOG
from marshal_workers.config.runconfig import default_client_id
from marshal_workers.log.topicadmin import ensure_coordination_topic

pytestmark = pytest.mark.kafka
MARSHAL_RUN = Path(sys.executable).with_name("marshal-run")


def test_default_ids_of_two_groups_on_one_host_both_run(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Groups A and B, default ids (same host, same instance 0): both start; a second A
    worker with that id exits 2 at once; after TERM no lock file is left."""
    uid = uuid.uuid4().hex[:8]
    coordination, topic = f"__marshal_{uid}", f"data_{uid}"
    ensure_coordination_topic(kafka_bootstrap, coordination, 1)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap, "logger": RDKAFKA_LOG})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")}
    env["XDG_RUNTIME_DIR"] = str(tmp_path / "run")

    def command(group: str) -> list[str]:
        return [
            str(MARSHAL_RUN), "--handler", "marshal_workers.plugins.echo:handle", "--mode", "alo",
            "--topic", topic, "--group", group, "--bootstrap-servers", kafka_bootstrap,
            "--coordination-topic", coordination, "--heartbeat-interval", "1",
            "--log-format", "json",
        ]  # fmt: skip

    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = []
    for group, log in zip((f"A_{uid}", f"B_{uid}"), logs, strict=True):
        with open(log, "wb") as out:
            procs.append(subprocess.Popen(command(group), stdout=out, stderr=out, env=env))
    try:
        deadline = time.monotonic() + 60
        for proc, log in zip(procs, logs, strict=True):
            while b'"supervisor_started"' not in log.read_bytes():
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
        twin = subprocess.run(
            command(f"A_{uid}"), capture_output=True, text=True, timeout=60, env=env, check=False
        )
        assert twin.returncode == 2, twin.stderr
        assert default_client_id("0") in twin.stderr and "already running" in twin.stderr
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(60) for proc in procs]
    assert codes == [0, 0]
    assert list((tmp_path / "run" / "marshal-workers" / "locks").iterdir()) == []
