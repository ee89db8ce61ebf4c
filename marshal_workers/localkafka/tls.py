"""Certificates for a secured local cluster, made at start with `cryptography` (no keytool).

`make_certificates` writes, in a directory of its own (mode 0700):

- ``ca.pem``: a CA certificate made for this cluster alone (its key is thrown away once the
  broker's certificate is signed, so nothing else can ever be signed by it). Clients trust it:
  librdkafka's ``ssl.ca.location``, the Java client's ``ssl.truststore.location`` (type PEM),
  and the brokers themselves for their own connections;
- ``broker.p12``: the brokers' key and certificate (for ``localhost`` and ``127.0.0.1``, which
  is where the local cluster listens), signed by the CA, in a PKCS#12 keystore whose password
  is returned.

Keys are EC P-256; certificates are valid from an hour ago (clock skew) for 30 days.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_FILE: Final = "ca.pem"
KEYSTORE_FILE: Final = "broker.p12"
VALID_DAYS: Final = 30
HOSTS: Final = ("localhost",)
ADDRESSES: Final = ("127.0.0.1",)


@dataclass(frozen=True, slots=True)
class Certificates:
    """Where the CA and the brokers' keystore are, and the keystore's password."""

    ca_file: Path
    keystore_file: Path
    keystore_password: str


_CA_USAGE: Final = x509.KeyUsage(
    digital_signature=False, content_commitment=False, key_encipherment=False,
    data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
    encipher_only=False, decipher_only=False,
)  # fmt: skip


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "marshal-workers local Kafka"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by its owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def make_certificates(directory: Path, now: dt.datetime | None = None) -> Certificates:
    """A new CA and a broker certificate signed by it, written to ``directory`` (see the top)."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    start = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(hours=1)
    end = start + dt.timedelta(days=VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"marshal-workers local CA {secrets.token_hex(4)}")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_CA_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    broker_key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(h) for h in HOSTS]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in ADDRESSES]
    broker_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca_name)
        .public_key(broker_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    password = secrets.token_urlsafe(18)
    keystore = pkcs12.serialize_key_and_certificates(
        b"broker",
        broker_key,
        broker_cert,
        [ca_cert],
        serialization.BestAvailableEncryption(password.encode()),
    )
    ca_file, keystore_file = directory / CA_FILE, directory / KEYSTORE_FILE
    ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _private(keystore_file, keystore)
    return Certificates(ca_file, keystore_file, password)
