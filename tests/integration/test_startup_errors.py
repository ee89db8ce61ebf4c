"""A start-up error is one line and nothing else, with the documented exit code."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from marshal_workers.common.errors import EXIT_USAGE
from marshal_workers.log.kafkalog import KafkaLog
from marshal_workers.log.topicadmin import ensure_coordination_topic

pytestmark = pytest.mark.kafka
MARSHAL_RUN = Path(sys.executable).with_name("marshal-run")


@pytest.mark.parametrize("heartbeat", ["10", "1"])
def test_missing_data_topic_exits_2_with_only_the_error_line(
    kafka_bootstrap: str, tmp_path: Path, heartbeat: str
) -> None:
    """A --topic that does not exist: exit 2 (a configuration error, docs/operating.md), and
    stderr and stdout hold nothing but the one error line (no `supervisor starting` log line
    first). With
    a heartbeat interval below the cluster's failure detection (1 s), the warning about it
    waits until the supervisor has started: it does not come before the error."""
    coordination = f"__marshal_{uuid.uuid4().hex[:8]}"
    ensure_coordination_topic(kafka_bootstrap, coordination, 1)
    ready = KafkaLog(kafka_bootstrap, coordination)  # its leader is elected: no retry warnings
    try:
        ready.end_offsets(30)
    finally:
        ready.close()
    missing = f"no_such_topic_{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")}
    env["XDG_RUNTIME_DIR"] = str(tmp_path / "run")
    done = subprocess.run(
        [
            str(MARSHAL_RUN),
            "--handler",
            "marshal_workers.plugins.echo:handle",
            "--mode",
            "alo",
            "--topic",
            missing,
            "--group",
            "g",
            "--client-id",
            "c",
            "--bootstrap-servers",
            kafka_bootstrap,
            "--coordination-topic",
            coordination,
            "--log-format",
            "json",
            "--heartbeat-interval",
            heartbeat,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == EXIT_USAGE, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("marshal-run: error: ") and missing in lines[0]
    assert list((tmp_path / "run" / "marshal-workers" / "locks").iterdir()) == []


def test_a_run_refused_at_start_records_nothing(kafka_bootstrap: str, tmp_path: Path) -> None:
    """A run that fails a start-up check (here: its --topic does not exist) writes nothing to
    the coordination log, its group's settings included: the corrected run may then choose
    another heartbeat interval without `group-settings --change`."""
    coordination = f"__marshal_{uuid.uuid4().hex[:8]}"
    ensure_coordination_topic(kafka_bootstrap, coordination, 2)
    log = KafkaLog(kafka_bootstrap, coordination)
    try:
        before = log.end_offsets(30)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")}
        env["XDG_RUNTIME_DIR"] = str(tmp_path / "run")
        done = subprocess.run(
            [str(MARSHAL_RUN), "--handler", "marshal_workers.plugins.echo:handle", "--mode",
             "alo", "--topic", f"no_such_topic_{uuid.uuid4().hex[:8]}", "--group", "g.fresh",
             "--bootstrap-servers", kafka_bootstrap, "--coordination-topic", coordination],
            capture_output=True, text=True, timeout=120, env=env, check=False,
        )  # fmt: skip
        assert done.returncode == EXIT_USAGE, done.stderr
        assert log.end_offsets(30) == before
    finally:
        log.close()
