"""No output carries a secret's value, whatever the key's spelling: secret-looking keys are
judged by their shape (words close to password, secret, key, token, jaas, credential, or a key
close to one of librdkafka's sensitive properties), and error lines show ``'***'`` instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from marshal_workers.common.errors import ConfigError
from marshal_workers.common.secrets import is_secret_key, redact_text, shown
from marshal_workers.config.settings import resolve

SECRET_SPELLINGS = [
    "sasl.password", "sasl.pasword", "sasl.passwrod", "SASL.PASSWORD", "sasl_password",
    "sasl-password", "saslpassword", "saslpasword", "sasl.passwd", "sasl.pwd", "sasl.pw",
    "sasl.pass", "sasl.passwort", "sasl.p4ssword", "ssl.key.password", "ssl.keystore.password",
    "ssl.key.pem", "ssl_key", "sasl.oauthbearer.client.secret", "sasl.oauthbearer.client.secert",
    "sasl.oauthbearer.config", "sasl.jaas.config", "sasl.jas.config", "sasl.token", "sasl.tokn",
    "credential", "credentail", "sasl.credentials", "api.key", "apikey", "api.ky", "my.secrets",
    "sasl.oauthbearer.clientsecret", "ssl.keystorepassword", "sasl.passphrase", " sasl.password ",
]  # fmt: skip
PLAIN_KEYS = [
    "security.protocol", "sasl.mechanisms", "sasl.mechanism", "sasl.username", "ssl.ca.location",
    "enable.ssl.certificate.verification", "ssl.endpoint.identification.algorithm", "client.id",
    "socket.timeout.ms", "debug", "linger.ms", "acks", "compression.type", "bootstrap.servers",
    "statistics.interval.ms", "message.max.bytes", "fetch.wait.max.ms", "queued.min.messages",
    "socket.keepalive.enable", "session.timeout.ms", "sasl.kerberos.service.name",
    "isolation.level", "enable.idempotence", "ssl.certificate.location", "broker.address.family",
]  # fmt: skip
PASSWORD = "worker-secret-7f3a9c"


@pytest.mark.parametrize("key", SECRET_SPELLINGS)
def test_every_spelling_of_a_secret_key_is_a_secret(key: str) -> None:
    """Misspelled, squashed, upper-cased or leetspeak: still a secret's key."""
    assert is_secret_key(key)
    assert PASSWORD not in shown(key, PASSWORD)


def test_the_common_plain_properties_are_shown() -> None:
    """The properties an operator debugs with (protocol, mechanism, user, CA file) show their
    values: the rule does not hide everything."""
    assert [k for k in PLAIN_KEYS if is_secret_key(k)] == []


@pytest.mark.parametrize("key", ["sasl.pasword", "sasl.password", "ssl.key.pasword", "sasl_pwd"])
def test_a_mistyped_or_refused_secret_key_names_the_key_not_the_value(
    tmp_path: Path, key: str
) -> None:
    """A [kafka] key librdkafka refuses (a typo) is one line naming the key and the file; the
    value is shown as '***'."""
    toml = tmp_path / "fleet.toml"
    toml.write_text(
        f'[kafka]\n"security.protocol" = "SASL_SSL"\n"sasl.mechanisms" = "SCRAM-SHA-256"\n'
        f'"{key}" = "{PASSWORD}"\n"sasl.username" = "worker"\n"bogus.setting" = "x"\n'
    )
    with pytest.raises(ConfigError) as caught:
        resolve({}, toml, environ={})
    line = str(caught.value)
    assert PASSWORD not in line and "\n" not in line


def test_text_with_a_secret_value_or_a_jaas_line_is_redacted() -> None:
    """A library's message that quotes a value, or a JAAS line, loses the secret."""
    table = {"sasl.pasword": PASSWORD, "sasl.username": "worker"}
    text = f'Invalid value "{PASSWORD}" for configuration property "sasl.pasword"'
    assert PASSWORD not in redact_text(text, table)
    jaas = 'ScramLoginModule required username="worker" password="hunter22";'
    assert "hunter22" not in redact_text(jaas) and 'username="worker"' in redact_text(jaas)


def test_a_read_tables_secrets_never_reach_a_log_line_or_the_error_line(tmp_path: Path) -> None:
    """Once the [kafka] table is read, its secret values are taken out of every log line
    (structlog and the standard library's) and of the command's one error line."""
    import io  # noqa: PLC0415
    import logging  # noqa: PLC0415

    import structlog  # noqa: PLC0415

    from marshal_workers.common.logs import configure_logging  # noqa: PLC0415

    toml = tmp_path / "fleet.toml"
    toml.write_text(f'[kafka]\n"sasl.username" = "w"\n"sasl.pasword" = "{PASSWORD}x"\n')
    with pytest.raises(ConfigError):  # a typo: refused, but the value is remembered
        resolve({}, toml, environ={})
    out = io.StringIO()
    configure_logging(json=True, stream=out)
    structlog.get_logger().warning("kafka_error", detail=f"bad login {PASSWORD}x for w")
    logging.getLogger("marshal_workers.log.kafkalog").warning("text %s", f"{PASSWORD}x")
    assert PASSWORD not in out.getvalue() and "bad login *** for w" in out.getvalue()
    assert PASSWORD not in redact_text(f"error: Kafka: {PASSWORD}x refused")
