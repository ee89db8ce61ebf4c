"""A secured local cluster: SASL/SCRAM over TLS, the StandardAuthorizer, no access without an ACL.

`marshal-admin kafka start --secure` makes every node listen for clients on ``SASL_SSL`` only
(SCRAM-SHA-512 over TLS, certificates from `tls`), with Kafka's ``StandardAuthorizer`` and
``allow.everyone.if.no.acl.found=false``: a principal may do only what an ACL allows. The one
super user is the admin principal ``User:admin``, which bootstraps: its SCRAM credential is
written into the storage at format time (``--add-scram``), it creates the other users
(`add_user`) and their ACLs (``marshal-admin acls --apply``). The brokers talk to each other
on the same listener as that admin; the controllers on a listener of their own (SASL PLAIN
on loopback, the admin again: KRaft controllers cannot check SCRAM, whose credentials live
in the metadata they serve).

What a client needs is written to ``secure/`` in the cluster directory (mode 0700): the CA
(``ca.pem``), and for each user a TOML file a command takes as ``--config`` (the bootstrap
servers and a ``[kafka]`` table with its SCRAM password, mode 0600): ``admin.toml`` at start,
``NAME.toml`` per `add_user`.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from marshal_workers.common.errors import MarshalError
from marshal_workers.localkafka.tls import make_certificates

SECURE_DIR: Final = "secure"
ADMIN_USER: Final = "admin"
MECHANISM: Final = "SCRAM-SHA-512"
SCRAM_ITERATIONS: Final = 4096
CLIENT_LISTENER: Final = "SASL_SSL"
CONTROLLER_LISTENER: Final = "CONTROLLER"
SETTINGS_FILE: Final = "security.json"


def _jaas(module: str, user: str, password: str, extra: str = "") -> str:
    return f'{module} required username="{user}" password="{password}"{extra};'


@dataclass(frozen=True, slots=True)
class Security:
    """The secured cluster's files and secrets (kept in ``secure/security.json``, 0600)."""

    directory: Path
    ca_file: Path
    keystore_file: Path
    keystore_password: str
    admin_password: str

    def client_table(self, user: str, password: str) -> dict[str, str]:
        """The librdkafka properties (a ``[kafka]`` table) of ``user`` on this cluster."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": MECHANISM,
            "sasl.username": user,
            "sasl.password": password,
            "ssl.ca.location": str(self.ca_file),
        }

    @property
    def admin_table(self) -> dict[str, str]:
        """The admin's (the super user's) librdkafka properties."""
        return self.client_table(ADMIN_USER, self.admin_password)

    def scram_argument(self) -> str:
        """The StorageTool's ``--add-scram`` value that creates the admin at format time."""
        return f"{MECHANISM}=[name={ADMIN_USER},password={self.admin_password}]"

    def server_properties(
        self, broker_port: int, controller_port: int, host: str
    ) -> dict[str, str]:
        """The properties that secure one node (over the plaintext ones, which they replace)."""
        scram_jaas = _jaas(
            "org.apache.kafka.common.security.scram.ScramLoginModule",
            ADMIN_USER,
            self.admin_password,
        )
        plain_jaas = _jaas(
            "org.apache.kafka.common.security.plain.PlainLoginModule",
            ADMIN_USER,
            self.admin_password,
            f' user_{ADMIN_USER}="{self.admin_password}"',
        )
        lower = CLIENT_LISTENER.lower()
        return {
            "listeners": f"{CLIENT_LISTENER}://{host}:{broker_port},"
            f"{CONTROLLER_LISTENER}://{host}:{controller_port}",
            "advertised.listeners": f"{CLIENT_LISTENER}://{host}:{broker_port}",
            "listener.security.protocol.map": f"{CLIENT_LISTENER}:SASL_SSL,"
            f"{CONTROLLER_LISTENER}:SASL_PLAINTEXT",
            "inter.broker.listener.name": CLIENT_LISTENER,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "sasl.mechanism.controller.protocol": "PLAIN",
            f"listener.name.{lower}.sasl.enabled.mechanisms": MECHANISM,
            f"listener.name.{lower}.{MECHANISM.lower()}.sasl.jaas.config": scram_jaas,
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": plain_jaas,
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.keystore_file),
            "ssl.keystore.password": self.keystore_password,
            "ssl.key.password": self.keystore_password,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
            "ssl.client.auth": "none",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": f"User:{ADMIN_USER}",
        }

    def write_client_file(self, user: str, password: str, bootstrap: str) -> Path:
        """``secure/USER.toml``: ``--config`` for a command that connects as ``user`` (0600)."""
        lines = [
            f"# {user} on the secured local Kafka (written by marshal-admin kafka)",
            f'bootstrap_servers = "{bootstrap}"',
            "",
            "[kafka]",
            *(f'"{k}" = {json.dumps(v)}' for k, v in self.client_table(user, password).items()),
            "",
        ]
        path = self.directory / f"{user}.toml"
        _write_private(path, "\n".join(lines))
        return path

    def save(self) -> None:
        """Keep the secrets for later commands (`load_security`)."""
        data = {
            "ca_file": str(self.ca_file),
            "keystore_file": str(self.keystore_file),
            "keystore_password": self.keystore_password,
            "admin_password": self.admin_password,
        }
        _write_private(self.directory / SETTINGS_FILE, json.dumps(data, indent=2) + "\n")


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def new_security(cluster_dir: Path) -> Security:
    """New certificates and an admin password for the cluster in ``cluster_dir``."""
    directory = cluster_dir / SECURE_DIR
    certificates = make_certificates(directory)
    security = Security(
        directory,
        certificates.ca_file,
        certificates.keystore_file,
        certificates.keystore_password,
        secrets.token_urlsafe(18),
    )
    security.save()
    return security


def load_security(cluster_dir: Path) -> Security | None:
    """The saved security of the cluster in ``cluster_dir`` (None: it is not secured)."""
    directory = cluster_dir / SECURE_DIR
    try:
        data: Mapping[str, Any] = json.loads((directory / SETTINGS_FILE).read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise MarshalError(f"unreadable {directory / SETTINGS_FILE}: {exc}") from None
    return Security(
        directory,
        Path(data["ca_file"]),
        Path(data["keystore_file"]),
        str(data["keystore_password"]),
        str(data["admin_password"]),
    )


def new_password() -> str:
    """A password for a new user."""
    return secrets.token_urlsafe(18)
