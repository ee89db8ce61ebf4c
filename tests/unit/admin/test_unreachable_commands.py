"""Every `marshal-admin` command that reads the cluster, against a bootstrap nobody listens on:
one line naming the address and the wait, exit 1, and given up within the command's
``--timeout`` (no broker is needed: 127.0.0.1:1 refuses every connection).

A review found `topic list` taking 31 s and `topic describe` 32 s with a line of their own
("cannot read topic metadata"), and `set-position` printing librdkafka's ``KafkaError{...}``
repr, where `status` and `dump` said "cannot reach Kafka at ... within 3s" in 3 s."""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ADMIN = str(Path(sys.executable).with_name("marshal-admin"))
NOWHERE = "127.0.0.1:1"
TIMEOUT_S = 3

COMMANDS: dict[str, list[str]] = {
    "status": ["status", "--group", "g"],
    "dump": ["dump"],
    "dump --group": ["dump", "--group", "g"],
    "group-settings": ["group-settings", "--group", "g"],
    "release-group": ["release-group", "--group", "g", "--for", "60"],
    "retry-record": ["retry-record", "--group", "g", "--topic", "t", "--partition", "0",
                     "--offset", "1"],
    "skip-record": ["skip-record", "--group", "g", "--topic", "t", "--partition", "0",
                    "--offset", "1"],
    "set-position": ["set-position", "--group", "g", "--topic", "t", "--to-latest"],
    "topic list": ["topic", "list"],
    "topic describe": ["topic", "describe", "t"],
}  # fmt: skip


def _run(args: list[str]) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    out = subprocess.run(
        [ADMIN, *args, "--bootstrap-servers", NOWHERE, "--timeout", str(TIMEOUT_S)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return out, time.monotonic() - start


def test_every_reading_command_gives_up_within_its_timeout_with_one_line() -> None:
    """Each command at once (they wait on nothing but their own clients): every one exits 1
    with the same one line, well before 3 x its --timeout."""
    with ThreadPoolExecutor(max_workers=len(COMMANDS)) as pool:
        results = dict(zip(COMMANDS, pool.map(_run, COMMANDS.values()), strict=True))
    wrong = {}
    for name, (out, took) in results.items():
        lines = out.stderr.strip().splitlines()
        said = lines[0] if lines else ""
        if (
            out.returncode != 1
            or len(lines) != 1
            or not said.startswith(
                f"marshal-admin: error: cannot reach Kafka at {NOWHERE} within {TIMEOUT_S}s: "
            )
            or "KafkaError{" in said
            or took > 3 * TIMEOUT_S
        ):
            wrong[name] = (out.returncode, round(took, 1), out.stderr.strip()[-300:])
    assert not wrong, wrong
