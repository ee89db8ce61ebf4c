"""`marshal-admin` and `marshal-audit` read the fleet's TOML with marshal-run's table and
precedence: flag > MARSHAL_* > file > default."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from marshal_workers.common.errors import ConfigError
from marshal_workers.config.runconfig import run_config
from marshal_workers.config.settings import resolve
from marshal_workers.config.toolconfig import fleet_settings
from marshal_workers.protocol.wire import Partitioner

BIN = Path(sys.executable).parent
FLEET_TOML = """\
handler = "marshal_workers.plugins.echo:handle"
mode = "alo"
topic = ["orders"]
group = "shop.billing"
bootstrap_servers = "k1:9092,k2:9092"
coordination_topic = "__marshal_shop"
partitioner = "marshal-go"
heartbeat_interval = 1.001
admin_client_ids = ["ops-1", "ops-2"]

[kafka]
"socket.timeout.ms" = 5000
"""


@pytest.fixture
def fleet_toml(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(FLEET_TOML)
    return path


def test_tools_read_every_fleet_setting_from_the_file(fleet_toml: Path) -> None:
    """Brokers, topic, partitioner, HB, admin ids, [kafka] and the group come from the file."""
    fleet = fleet_settings(fleet_toml, {}, environ={})
    assert fleet.bootstrap_servers == "k1:9092,k2:9092"
    assert fleet.coordination_topic == "__marshal_shop"
    assert fleet.partitioner is Partitioner.MARSHAL_GO
    assert fleet.heartbeat_interval_ms == 1001
    assert fleet.admin_client_ids == {"ops-1", "ops-2"}
    assert dict(fleet.kafka) == {"socket.timeout.ms": "5000"}
    assert fleet.group == "shop.billing"


def test_tools_and_workers_fold_with_the_same_hb_in_ms(fleet_toml: Path) -> None:
    """The admin and marshal-run turn HB into the same whole ms (one conversion, rounded)."""
    worker = run_config(resolve({}, fleet_toml, environ={}))
    assert fleet_settings(fleet_toml, {}, environ={}).heartbeat_interval_ms == (
        worker.heartbeat_interval_ms
    )
    assert worker.heartbeat_interval_ms == 1001


def test_precedence_is_flag_then_env_then_file(fleet_toml: Path) -> None:
    """A flag beats the environment, which beats the file, which beats the default."""
    env = {"MARSHAL_HEARTBEAT_INTERVAL": "3", "MARSHAL_COORDINATION_TOPIC": "__from_env"}
    fleet = fleet_settings(fleet_toml, {"heartbeat_interval": "2"}, environ=env)
    assert fleet.heartbeat_interval_ms == 2000
    assert fleet.coordination_topic == "__from_env"
    assert fleet.partitioner is Partitioner.MARSHAL_GO
    assert fleet_settings(None, {}, environ={}).heartbeat_interval_ms == 10_000


def test_config_file_from_the_environment(fleet_toml: Path) -> None:
    """$MARSHAL_CONFIG names the file when --config is not given, as for marshal-run."""
    fleet = fleet_settings(None, {}, environ={"MARSHAL_CONFIG": str(fleet_toml)})
    assert fleet.coordination_topic == "__marshal_shop"


def test_admin_ids_flag_takes_lists() -> None:
    """--admin-client-id repeated or comma-separated gives one list."""
    fleet = fleet_settings(None, {"admin_client_ids": ("a,b", "c")}, environ={})
    assert fleet.admin_client_ids == {"a", "b", "c"}


def test_bad_file_value_is_refused_naming_the_file(tmp_path: Path) -> None:
    """A bad value in the file is a ConfigError naming the setting and the file."""
    bad = tmp_path / "bad.toml"
    bad.write_text('partitioner = "round-robin"\n')
    with pytest.raises(ConfigError, match=r"partitioner.*bad\.toml"):
        fleet_settings(bad, {}, environ={})


@pytest.mark.parametrize(
    "command",
    [
        ["marshal-admin", "init"],
        ["marshal-admin", "status"],
        ["marshal-admin", "dump"],
        ["marshal-admin", "release-group", "--for", "0"],
        ["marshal-admin", "set-position", "--topic", "t", "--to-latest"],
        ["marshal-audit", "--out", "OUT"],
    ],
)
def test_every_tool_command_takes_config(command: list[str], tmp_path: Path) -> None:
    """Each tool command reads --config: a bad value in the file stops it with exit 2, one
    line naming the file (before any connection is tried)."""
    bad = tmp_path / "fleet.toml"
    bad.write_text('group = "g"\nheartbeat_interval = inf\n')
    args = [str(BIN / command[0]), *(a.replace("OUT", str(tmp_path / "o")) for a in command[1:])]
    done = subprocess.run(
        [*args, "--config", str(bad)], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "heartbeat_interval" in lines[0] and str(bad) in lines[0]
