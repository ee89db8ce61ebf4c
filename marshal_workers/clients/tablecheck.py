"""Checking a ``[kafka]`` table (librdkafka properties) when the configuration is read.

librdkafka refuses an unknown property or a bad value only when a client is built, deep in
start-up, as a raw ``KafkaError{code=_INVALID_ARG,...}``. `check_kafka_table` builds throwaway
producers and consumers (no bootstrap servers: they connect nowhere) so that a wrong table is
refused at configuration time, as a usage error (exit 2: restarting cannot help) naming the
property and where it came from:

1. each property alone, so that an unknown property or a value librdkafka refuses (a bad
   number, ``enable.ssl.certificate.verification = "maybe"``) is named;
2. then the whole table, so that what only a combination refuses (``sasl.mechanisms`` a
   mechanism librdkafka does not know under ``security.protocol = "SASL_SSL"``, a CA file that
   cannot be read) is refused too, before any client connects.

A property safety pins (acks, idempotence, the coordination log's isolation level) is refused
too, if the table tries to change it. No line shows a secret's value (`common.secrets`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from marshal_workers.clients.kafkaconfig import refuse_unsafe
from marshal_workers.common.errors import ConfigError
from marshal_workers.common.secrets import redact_text, shown

_QUIET = logging.getLogger("marshal_workers.clients.tablecheck")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False
# A client built from one property alone can fail for want of the others (SASL_SSL without its
# mechanism): not that property's fault. These words mark librdkafka refusing the property.
_THE_PROPERTY = ("configuration property", "expected bool", "expected integer", "invalid value")


def _build_both(config: Mapping[str, Any]) -> str | None:
    """librdkafka's reason for refusing a producer or a consumer of ``config`` (None if not)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer  # noqa: PLC0415

    base: dict[str, Any] = {"bootstrap.servers": "", "logger": _QUIET}
    for build in (
        lambda: Producer({**base, **config}),
        lambda: Consumer({**base, "group.id": "marshal-config-check", **config}),
    ):
        try:
            client = build()
        except KafkaException as exc:
            err = exc.args[0] if exc.args else exc
            return str(err.str()) if isinstance(err, KafkaError) else str(err)
        except (ValueError, TypeError) as exc:
            return str(exc)
        if isinstance(client, Consumer):
            client.close()
        else:
            client.flush(0)
    return None


def _refusal(name: str, value: str) -> str | None:
    """librdkafka's reason for refusing ``name = value`` itself, or None if it takes it."""
    reason = _build_both({name: value})
    if reason is None or not any(w in reason.lower() for w in _THE_PROPERTY):
        return None
    return reason


def check_kafka_table(table: Mapping[str, str], sources: str | Mapping[str, str]) -> None:
    """ConfigError (exit 2) naming the first property librdkafka refuses, or the first that
    would change what safety pins (`kafkaconfig.refuse_unsafe`), and where it came from
    (``sources``: one for the whole table, or one per property); then, if librdkafka refuses
    the properties together, one line saying so."""

    def source_of(name: str) -> str:
        return sources if isinstance(sources, str) else sources.get(name, "[kafka]")

    for name, value in table.items():
        refuse_unsafe({name: value}, source_of(name))
    for name, value in table.items():
        reason = _refusal(name, value)
        if reason is not None:
            raise ConfigError(
                f"[kafka] {name} = {shown(name, value)} from {source_of(name)}: "
                f"{redact_text(reason, table)}"
            )
    if not table:
        return
    reason = _build_both(table)
    if reason is not None:
        where = ", ".join(sorted(set(map(source_of, table))))
        raise ConfigError(
            f"[kafka] from {where}: librdkafka refuses these settings together: "
            f"{redact_text(reason, table)}"
        )
