"""The fleet's ``[kafka]`` table (librdkafka properties) as the Java client's, for Spark.

`marshal-audit` reads the coordination log through Spark's Kafka source, whose options are the
Java client's properties with a ``kafka.`` prefix. The two clients name the same connection
settings differently, so `java_options` translates what a secured cluster needs:

=========================================  ===================================================
librdkafka                                 Java client
=========================================  ===================================================
security.protocol                          security.protocol
sasl.mechanisms (or sasl.mechanism)        sasl.mechanism
sasl.username, sasl.password               sasl.jaas.config (PlainLoginModule for PLAIN,
                                           ScramLoginModule for SCRAM-SHA-256/512)
ssl.ca.location                            ssl.truststore.type=PEM, ssl.truststore.location
ssl.ca.pem                                 ssl.truststore.type=PEM, ssl.truststore.certificates
ssl.certificate.location, ssl.key.location ssl.keystore.type=PEM, ssl.keystore.certificate.chain
 (and ssl.key.password)                    and ssl.keystore.key (the files' PEM), ssl.key.password
ssl.endpoint.identification.algorithm      the same (``none`` is the empty string)
client.id, the timeouts and back-offs      the same names
=========================================  ===================================================

A property with no Java counterpart that matters for reaching the cluster (OAUTHBEARER, GSSAPI
keytabs, ``enable.ssl.certificate.verification=false``) is refused (`JavaTranslationError`,
exit 2): the audit must not read with weaker security than the fleet. Client tuning the Java
client names otherwise (fetch sizes, librdkafka's queues) is left out and listed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from marshal_workers.common.errors import ConfigError

SPARK_PREFIX: Final = "kafka."
SAME_NAME: Final = frozenset(
    {
        "security.protocol", "client.id", "request.timeout.ms", "reconnect.backoff.ms",
        "reconnect.backoff.max.ms", "retry.backoff.ms", "socket.connection.setup.timeout.ms",
        "metadata.max.age.ms", "connections.max.idle.ms", "ssl.key.password",
        "sasl.kerberos.service.name",
    }
)  # fmt: skip
_LOGIN_MODULES: Final = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# Reaching the cluster depends on these; there is no faithful Java translation.
_REFUSED: Final = ("sasl.oauthbearer.", "sasl.kerberos.keytab", "sasl.kerberos.principal")
_HANDLED: Final = frozenset(
    {
        "sasl.mechanisms", "sasl.mechanism", "sasl.username", "sasl.password", "ssl.ca.location",
        "ssl.ca.pem", "ssl.certificate.location", "ssl.key.location",
        "ssl.endpoint.identification.algorithm", "enable.ssl.certificate.verification",
    }
)  # fmt: skip


class JavaTranslationError(ConfigError):
    """A ``[kafka]`` property Spark's Kafka source cannot be given faithfully (exit 2)."""


@dataclass(frozen=True, slots=True)
class JavaOptions:
    """The Java client's properties, and the librdkafka ones left out (not needed to connect)."""

    properties: Mapping[str, str] = field(default_factory=dict)
    left_out: tuple[str, ...] = ()

    def spark(self) -> dict[str, str]:
        """As Spark's Kafka source takes them (``kafka.``-prefixed options)."""
        return {SPARK_PREFIX + k: v for k, v in self.properties.items()}


def _quoted(value: str) -> str:
    """A JAAS option value: double-quoted, backslashes and quotes escaped."""
    return json.dumps(value)


def _pem(path: str, what: str) -> str:
    try:
        return Path(path).read_text("utf-8")
    except OSError as exc:
        raise JavaTranslationError(f"[kafka] {what}: cannot read {path}: {exc.strerror}") from None


def _sasl(table: Mapping[str, str]) -> dict[str, str]:
    mechanisms = table.get("sasl.mechanisms", table.get("sasl.mechanism", "GSSAPI"))
    mechanism = mechanisms.split(",")[0].strip().upper()
    out = {"sasl.mechanism": mechanism}
    if mechanism in _LOGIN_MODULES:
        user, password = table.get("sasl.username"), table.get("sasl.password")
        if user is None or password is None:
            raise JavaTranslationError(
                f"[kafka] sasl.mechanisms {mechanism} needs sasl.username and sasl.password"
            )
        out["sasl.jaas.config"] = (
            f"{_LOGIN_MODULES[mechanism]} required username={_quoted(user)} "
            f"password={_quoted(password)};"
        )
    elif mechanism != "GSSAPI":
        raise JavaTranslationError(f"[kafka] sasl.mechanisms {mechanism}: not translated for Spark")
    return out


def _tls(table: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    if table.get("enable.ssl.certificate.verification", "true").lower() in ("false", "0"):
        raise JavaTranslationError(
            "[kafka] enable.ssl.certificate.verification = false: the audit reads only a "
            "cluster whose certificate it can check (give ssl.ca.location)"
        )
    if "ssl.ca.location" in table:
        out |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": table["ssl.ca.location"]}
    if "ssl.ca.pem" in table:
        out |= {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": table["ssl.ca.pem"]}
    if "ssl.certificate.location" in table or "ssl.key.location" in table:
        out |= {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.certificate.chain": _pem(
                table.get("ssl.certificate.location", ""), "ssl.certificate.location"
            ),
            "ssl.keystore.key": _pem(table.get("ssl.key.location", ""), "ssl.key.location"),
        }
    algorithm = table.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        out["ssl.endpoint.identification.algorithm"] = "" if algorithm == "none" else algorithm
    return out


def java_options(table: Mapping[str, str]) -> JavaOptions:
    """The Java client's properties for the librdkafka ``table`` (see the module doc)."""
    for name in table:
        if name.startswith(_REFUSED):
            raise JavaTranslationError(f"[kafka] {name}: not translated for Spark's Kafka source")
    protocol = table.get("security.protocol", "PLAINTEXT").upper()
    out: dict[str, str] = {k: v for k, v in table.items() if k in SAME_NAME}
    if "security.protocol" in out:
        out["security.protocol"] = protocol
    if protocol.startswith("SASL"):
        out |= _sasl(table)
    if protocol.endswith("SSL"):
        out |= _tls(table)
    left_out = tuple(sorted(k for k in table if k not in SAME_NAME and k not in _HANDLED))
    return JavaOptions(out, left_out)
