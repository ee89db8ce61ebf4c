"""The fleet's [kafka] table (librdkafka's names) as the Java client's, for Spark's Kafka source:
what a secured cluster needs is translated, what cannot be faithfully is refused (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from marshal_workers.audit.javakafka import JavaTranslationError, java_options

SCRAM = {
    "security.protocol": "sasl_ssl",
    "sasl.mechanisms": "SCRAM-SHA-512",
    "sasl.username": "auditor",
    "sasl.password": 'pa"ss\\word',
    "ssl.ca.location": "/etc/ca.pem",
    "client.id": "audit",
    "fetch.wait.max.ms": "100",
}


def test_sasl_scram_over_tls_becomes_a_jaas_line_and_a_pem_truststore() -> None:
    """SCRAM user and password become sasl.jaas.config (quotes and backslashes escaped), the CA
    file a PEM truststore; the options carry Spark's kafka. prefix; librdkafka tuning the Java
    client names otherwise is listed as left out."""
    options = java_options(SCRAM)
    props = options.properties
    assert props["security.protocol"] == "SASL_SSL"
    assert props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert props["sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="auditor" password="pa\\"ss\\\\word";'
    )
    assert props["ssl.truststore.type"] == "PEM"
    assert props["ssl.truststore.location"] == "/etc/ca.pem"
    assert props["client.id"] == "audit"
    assert options.left_out == ("fetch.wait.max.ms",)
    assert options.spark()["kafka.sasl.mechanism"] == "SCRAM-SHA-512"


def test_plain_and_mutual_tls_and_no_hostname_check(tmp_path: Path) -> None:
    """PLAIN takes the PlainLoginModule; client certificate and key files become an inline PEM
    keystore; endpoint identification none is the Java client's empty string."""
    (tmp_path / "c.pem").write_text("CERT")
    (tmp_path / "k.pem").write_text("KEY")
    props = java_options(
        {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u",
         "sasl.password": "p", "ssl.certificate.location": str(tmp_path / "c.pem"),
         "ssl.key.location": str(tmp_path / "k.pem"), "ssl.key.password": "kp",
         "ssl.endpoint.identification.algorithm": "none"}
    ).properties  # fmt: skip
    assert props["sasl.jaas.config"].startswith("org.apache.kafka.common.security.plain.")
    assert props["ssl.keystore.certificate.chain"] == "CERT"
    assert props["ssl.keystore.key"] == "KEY" and props["ssl.key.password"] == "kp"
    assert props["ssl.endpoint.identification.algorithm"] == ""


def test_plaintext_passes_nothing_secure() -> None:
    """No [kafka] table, or a plaintext one: no security options."""
    assert java_options({}).properties == {}
    assert "sasl.jaas.config" not in java_options({"sasl.username": "u"}).properties


@pytest.mark.parametrize(
    "table",
    [
        {"security.protocol": "SASL_SSL", "sasl.mechanisms": "OAUTHBEARER",
         "sasl.oauthbearer.method": "oidc"},
        {"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"},
        {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-256"},
    ],
)  # fmt: skip
def test_what_cannot_be_given_faithfully_is_refused(table: dict[str, str]) -> None:
    """OAUTHBEARER, no certificate check, SCRAM without its password: exit 2, never a read with
    weaker security than the fleet's."""
    with pytest.raises(JavaTranslationError) as caught:
        java_options(table)
    assert caught.value.exit_code == 2
