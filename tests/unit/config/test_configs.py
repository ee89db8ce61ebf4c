"""The example configurations in configs/ stay valid as settings change (no broker)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from marshal_workers.common.errors import ConfigError
from marshal_workers.config.runconfig import run_config
from marshal_workers.config.settings import BY_NAME, load_toml, resolve
from marshal_workers.localkafka.tls import make_certificates

CONFIGS = sorted((Path(__file__).resolve().parents[3] / "configs").glob("*.toml"))
COMMENTED_SETTING = re.compile(r"^#\s*([a-z][a-z0-9_-]*)\s*=")


def test_the_examples_are_there() -> None:
    """local, production, amo and alo examples exist."""
    assert {p.stem for p in CONFIGS} >= {"local", "production", "amo", "alo"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
class TestExample:
    def test_every_key_is_a_known_setting(self, path: Path) -> None:
        """load_toml accepts the file (an unknown key would raise ConfigError)."""
        values, _ = load_toml(path)
        assert set(values) <= set(BY_NAME)

    def test_every_value_is_valid_and_makes_a_run_config(self, path: Path, tmp_path: Path) -> None:
        """Every value passes its setting's checks, and the file gives a complete RunConfig (the
        CA file it names made here, the password it leaves out given as systemd would)."""
        ca = make_certificates(tmp_path / "tls").ca_file
        copy = tmp_path / path.name
        copy.write_text(re.sub(r"/etc/marshal-workers/[\w.-]+\.pem", str(ca), path.read_text()))
        credentials = tmp_path / "credentials"
        credentials.mkdir()
        (credentials / "kafka.sasl.password").write_text("from-a-credential\n")
        config = run_config(resolve({}, copy, environ={"CREDENTIALS_DIRECTORY": str(credentials)}))
        assert config.handler and config.topics and config.group
        if "sasl.username" in config.kafka:
            assert config.kafka["sasl.password"] == "from-a-credential"

    def test_commented_out_settings_are_known_too(self, path: Path) -> None:
        """``# name = value`` lines above any table name real settings (they are meant to be
        uncommented)."""
        for line in path.read_text().splitlines():
            if line.startswith("["):
                break
            found = COMMENTED_SETTING.match(line)
            if found:
                assert found.group(1).replace("-", "_") in BY_NAME, line

    def test_kafka_values_are_strings(self, path: Path) -> None:
        """[kafka] values are written as librdkafka takes them: strings."""
        text = path.read_text()
        if "\n[kafka]" in text:
            table = text.split("\n[kafka]", 1)[1]
            for line in table.splitlines():
                if "=" in line and not line.lstrip().startswith("#"):
                    assert line.split("=", 1)[1].strip().startswith('"'), line


def test_an_unknown_key_is_refused(tmp_path: Path) -> None:
    """The check has teeth: a misspelt setting is a ConfigError naming it."""
    path = tmp_path / "bad.toml"
    path.write_text('on_falure = "dlq"\n')
    with pytest.raises(ConfigError, match="on_falure"):
        load_toml(path)


def test_the_client_id_default_is_named_as_the_setting_names_it() -> None:
    """A comment that names client_id's default names it as the setting's help does
    (FQDN-INSTANCE), never an older name of it."""
    default = re.search(r"Default: ([A-Z-]+)", BY_NAME["client_id"].help)
    assert default is not None and default.group(1) == "FQDN-INSTANCE"
    for path in CONFIGS:
        for line in path.read_text().splitlines():
            if line.startswith("#") and "client_id" in line and "default" in line:
                assert default.group(1) in line, (path.name, line)
