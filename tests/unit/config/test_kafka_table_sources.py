"""The [kafka] table from the TOML file, systemd credentials and MARSHAL_KAFKA_* variables (the
later winning), and a table librdkafka refuses is a configuration error (exit 2) at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from marshal_workers.common.errors import ConfigError
from marshal_workers.config.kafkatable import env_property, property_env
from marshal_workers.config.settings import resolve
from tests.unit.config.test_setting_checks import RUN, UNREACHABLE, _one_error_line, _run

SCRAM = (
    '"security.protocol" = "SASL_PLAINTEXT"\n"sasl.mechanisms" = "SCRAM-SHA-512"\n'
    '"sasl.username" = "worker"\n'
)


def _toml(tmp_path: Path, kafka: str) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(f"[kafka]\n{kafka}")
    return path


@pytest.mark.parametrize(
    ("variable", "name"),
    [("MARSHAL_KAFKA_SASL_PASSWORD", "sasl.password"),
     ("MARSHAL_KAFKA_SSL_CA_LOCATION", "ssl.ca.location"),
     ("MARSHAL_KAFKA_SSL__KEY", "ssl_key"),
     ("MARSHAL_KAFKA_SASL_OAUTHBEARER_CLIENT_ID", "sasl.oauthbearer.client.id")],
)  # fmt: skip
def test_the_naming_rule_both_ways(variable: str, name: str) -> None:
    """Lower case, _ is a dot, __ is an underscore; and back."""
    assert env_property(variable) == name
    assert property_env(name) == variable


def test_environment_over_credentials_over_the_file(tmp_path: Path) -> None:
    """The password from a credential file, the user from the environment over the file's;
    the local Kafka's own MARSHAL_KAFKA_* variables are not properties."""
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "kafka.sasl.password").write_text("from-credential\n")
    (creds / "unrelated").write_text("x")
    toml = _toml(tmp_path, SCRAM)
    env = {
        "CREDENTIALS_DIRECTORY": str(creds),
        "MARSHAL_KAFKA_SASL_USERNAME": "from-env",
        "MARSHAL_KAFKA_DIR": "/tmp/kafka",
        "MARSHAL_KAFKA_JVM_OPTS": "-Xmx1g",
    }
    kafka = resolve({}, toml, environ=env).kafka
    assert kafka["sasl.password"] == "from-credential"
    assert kafka["sasl.username"] == "from-env"
    assert "dir" not in kafka and "jvm.opts" not in kafka


def test_a_value_from_a_file_variable_and_both_forms_refused(tmp_path: Path) -> None:
    """MARSHAL_KAFKA_X_FILE reads the value (one trailing newline dropped); giving X and
    X_FILE both is refused; a file that cannot be read is named, its content never."""
    (tmp_path / "pw").write_text("s3cret-value\n")
    toml = _toml(tmp_path, SCRAM)
    env = {"MARSHAL_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "pw")}
    assert resolve({}, toml, environ=env).kafka["sasl.password"] == "s3cret-value"
    with pytest.raises(ConfigError, match="keep one"):
        resolve({}, toml, environ={**env, "MARSHAL_KAFKA_SASL_PASSWORD": "x"})
    with pytest.raises(ConfigError, match="cannot read"):
        resolve({}, toml, environ={"MARSHAL_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "no")})


@pytest.mark.parametrize(
    "kafka",
    [
        '"security.protocol" = ["SASL_SSL"]\n',
        '"sasl.mechanisms" = ["SCRAM-SHA-512", "PLAIN"]\n',
        '"ssl" = { ca = "x" }\n',
        '"enable.ssl.certificate.verification" = "maybe"\n',
        SCRAM.replace("SCRAM-SHA-512", "SCRAM-SHA-999") + '"sasl.password" = "pw"\n',
        '"security.protocol" = "SASL_SSL"\n"ssl.ca.location" = "/nonexistent/ca.pem"\n'
        '"sasl.mechanisms" = "PLAIN"\n"sasl.username" = "u"\n"sasl.password" = "pw"\n',
    ],
)
def test_a_table_librdkafka_refuses_is_a_configuration_error(tmp_path: Path, kafka: str) -> None:
    """A list where librdkafka wants text, a bad boolean, an unknown mechanism under SASL, a CA
    file that cannot be read: refused when the configuration is read (exit 2), not later."""
    with pytest.raises(ConfigError) as caught:
        resolve({}, _toml(tmp_path, kafka), environ={})
    assert caught.value.exit_code == 2 and "\n" not in str(caught.value)


def test_marshal_run_with_an_unknown_mechanism_exits_2(tmp_path: Path) -> None:
    """Under systemd exit 1 restarts forever; a bad setting is exit 2, one line."""
    toml = tmp_path / "fleet.toml"
    toml.write_text(
        f'bootstrap_servers = "{UNREACHABLE}"\n[kafka]\n'
        + SCRAM.replace("SCRAM-SHA-512", "SCRAM-SHA-999")
        + '"sasl.password" = "pw-4711"\n'
    )
    done = _run([*RUN, "--config", str(toml)])
    line = _one_error_line(done)
    assert done.returncode == 2 and "SCRAM-SHA-999" in line and "pw-4711" not in line
