"""librdkafka's own log: through the project's logging, held back during a
supervisor's start-up (a start-up failure prints one line) and rate limited while running."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from marshal_workers.clients.kafkaconfig import SHARED_DEFAULTS, client_config
from marshal_workers.clients.rdkafka import RDKAFKA_LOG, LogGate
from marshal_workers.common.errors import EXIT_RUNTIME

MARSHAL_RUN = Path(sys.executable).with_name("marshal-run")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def rd_record(fac: str, text: str, level: int = logging.ERROR) -> logging.LogRecord:
    """A record as confluent-kafka makes it: ``"%s [%s] %s" % (fac, client, text)``."""
    return logging.LogRecord(
        RDKAFKA_LOG.name, level, "x", 1, "%s [%s] %s", (fac, "rdkafka#consumer-1", text), None
    )


def passed(gate: LogGate, records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if gate.filter(r)]


def test_every_client_logs_through_the_gated_logger() -> None:
    """The one builder hands every client the project's logger, and the gate is on it."""
    assert client_config("h:1")["logger"] is RDKAFKA_LOG
    assert SHARED_DEFAULTS["logger"] is RDKAFKA_LOG
    assert any(isinstance(f, LogGate) for f in RDKAFKA_LOG.filters)


def test_a_flood_is_rate_limited_per_facility_and_counted() -> None:
    clock = Clock()
    gate = LogGate(burst=3, window_s=10.0, clock=clock)
    flood = [rd_record("FAIL", f"connect failed {i}") for i in range(500)]
    out = passed(gate, flood)
    assert len(out) == 3
    assert passed(gate, [rd_record("REQTMOUT", "timed out")]) == [
        "REQTMOUT [rdkafka#consumer-1] timed out"
    ]
    clock.t += 10.0
    (next_line,) = passed(gate, [rd_record("FAIL", "connect failed again")])
    assert "connect failed again" in next_line and "497 similar lines suppressed" in next_line


def test_while_held_nothing_passes_and_the_release_says_what_was_held() -> None:
    gate = LogGate(burst=3, window_s=10.0, clock=Clock())
    gate.hold()
    assert passed(gate, [rd_record("FAIL", f"refused {i}") for i in range(100)]) == []
    summary = gate.release()
    assert summary is not None
    assert summary.levelno == logging.ERROR
    assert "100 librdkafka lines during start-up" in summary.getMessage()
    assert "refused 99" in summary.getMessage()
    assert gate.release() is None  # nothing held since
    assert len(passed(gate, [rd_record("FAIL", "later")])) == 1


def test_an_unreachable_broker_is_one_line_not_a_flood(tmp_path: Path) -> None:
    """`marshal-run --bootstrap-servers 127.0.0.1:1` printed ~1,600 lines of librdkafka's
    connection errors in 10 s before its error: now its one line and the runtime exit code."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")}
    env["XDG_RUNTIME_DIR"] = str(tmp_path / "run")
    started = time.monotonic()
    done = subprocess.run(
        [
            str(MARSHAL_RUN),
            "--handler",
            "marshal_workers.plugins.echo:handle",
            "--mode",
            "alo",
            "--topic",
            "t",
            "--group",
            "g",
            "--client-id",
            "c",
            "--bootstrap-servers",
            "127.0.0.1:1",
            "--log-format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert time.monotonic() - started < 30
    assert done.returncode == EXIT_RUNTIME, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert len(lines) <= 3, f"{len(lines)} lines: {done.stderr[:2000]}"
    assert lines[-1].startswith("marshal-run: error: cannot reach Kafka at 127.0.0.1:1"), lines
    assert done.stdout == ""
