"""The systemd unit files: what the runtime relies on is set, and `systemd-analyze verify`
accepts them where it exists."""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from marshal_workers.common.errors import (
    EXIT_COORDINATION_CHANGED,
    EXIT_GO_FLEET,
    EXIT_PLACEMENT_MOVED,
)
from marshal_workers.config.settings import BY_NAME

UNITS = Path(__file__).resolve().parents[3] / "systemd"
SERVICE = UNITS / "marshal-worker@.service"
TARGET = UNITS / "marshal-workers.target"


def parse(path: Path) -> dict[str, dict[str, list[str]]]:
    """Section -> key -> every value given (systemd allows repeated keys)."""
    sections: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    section = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        sections[section][key.strip()].append(value.strip())
    return sections


def seconds(text: str) -> float:
    return float(text.removesuffix("s"))


class TestServiceUnit:
    def test_notify_watchdog_and_who_may_notify(self) -> None:
        """Type=notify, only the main process may notify, a watchdog is asked for."""
        service = parse(SERVICE)["Service"]
        assert service["Type"] == ["notify"]
        assert service["NotifyAccess"] == ["main"]
        assert seconds(service["WatchdogSec"][0]) >= 30

    def test_stop_is_graceful_and_outlasts_the_supervisors_own_stop(self) -> None:
        """TERM to the supervisor only, KILL to the rest at the end, after --stop-timeout."""
        service = parse(SERVICE)["Service"]
        assert service["KillMode"] == ["mixed"]
        assert seconds(service["TimeoutStopSec"][0]) > BY_NAME["stop_timeout"].default + 10
        assert service["ExecReload"] == ["/bin/kill -HUP $MAINPID"]

    def test_restarts_on_failure_but_not_on_configuration_errors(self) -> None:
        """Restart=on-failure; exit codes 2 (configuration), 3 (handler load), 4 (the
        coordination topic's partition count changed: a restart would adopt it) and 5 (a Marshal
        Go fleet writes to the group) stay down; 6 (the group's placement moved) is restarted:
        the new instance finds the new placement."""
        service = parse(SERVICE)["Service"]
        assert service["Restart"] == ["on-failure"]
        prevented = set(service["RestartPreventExitStatus"][0].split())
        assert prevented == {"2", "3", str(EXIT_COORDINATION_CHANGED), str(EXIT_GO_FLEET)}
        assert str(EXIT_PLACEMENT_MOVED) not in prevented

    def test_instance_names_the_client_and_its_environment_file(self) -> None:
        """--instance %i (client id HOSTNAME-%i), a common and a per-instance env file."""
        service = parse(SERVICE)["Service"]
        assert service["ExecStart"] == ["/usr/bin/env marshal-run --instance %i"]
        assert service["EnvironmentFile"] == [
            "-/etc/marshal-workers/common.env",
            "-/etc/marshal-workers/%i.env",
        ]
        assert service["User"] == ["marshal-workers"]
        assert service["NoNewPrivileges"] == ["yes"]
        assert service["ProtectSystem"] == ["strict"]

    def test_instances_belong_to_the_target(self) -> None:
        """Enabling an instance wants it from the target; stopping the target stops it."""
        unit = parse(SERVICE)
        assert unit["Unit"]["PartOf"] == ["marshal-workers.target"]
        assert unit["Install"]["WantedBy"] == ["marshal-workers.target"]
        assert parse(TARGET)["Install"]["WantedBy"] == ["multi-user.target"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_analyze_verify_accepts_the_units(tmp_path: Path) -> None:
    """systemd-analyze verify finds nothing to say about an instance and the target."""
    for unit in (SERVICE, TARGET):
        shutil.copy(unit, tmp_path / unit.name)
    instance = tmp_path / "marshal-worker@7.service"
    shutil.copy(SERVICE, instance)
    result = subprocess.run(
        ["systemd-analyze", "verify", str(instance), str(tmp_path / TARGET.name)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    ours = [line for line in result.stderr.splitlines() if "marshal-worker" in line]
    assert result.returncode == 0, result.stderr
    assert ours == [], result.stderr
