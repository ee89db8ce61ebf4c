"""Checking a ``[kafka]`` table (librdkafka properties) when the configuration is read.

librdkafka refuses an unknown property or a bad value only when a client is built, deep in
start-up, as a raw ``KafkaError{code=_INVALID_ARG,...}``. `check_kafka_table` builds a
throwaway producer and consumer (no bootstrap servers: they connect nowhere) with each property
alone, so that a wrong one is refused at configuration time, as a usage error naming the
property and the file it came from. A property safety pins (acks, idempotence, the coordination
log's isolation level) is refused too, if the table tries to change it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from marshal_workers.clients.kafkaconfig import refuse_unsafe
from marshal_workers.common.errors import ConfigError

_QUIET = logging.getLogger("marshal_workers.clients.tablecheck")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def _refusal(name: str, value: str) -> str | None:
    """librdkafka's reason for refusing ``name = value`` itself, or None if it takes it.

    Only refusals of the property (unknown, bad value, not in this build) count: building a
    client with one property alone can fail for want of the others (SASL_SSL without its
    mechanism), which is not this property's fault and shows when the real client is built."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer  # noqa: PLC0415

    base: dict[str, Any] = {"bootstrap.servers": "", "logger": _QUIET}
    for build in (
        lambda: Producer({**base, name: value}),
        lambda: Consumer({**base, "group.id": "marshal-config-check", name: value}),
    ):
        try:
            client = build()
        except KafkaException as exc:
            err = exc.args[0] if exc.args else exc
            reason = str(err.str()) if isinstance(err, KafkaError) else str(err)
            if "configuration property" in reason.lower():
                return reason
            continue
        except (ValueError, TypeError) as exc:
            return str(exc)
        if isinstance(client, Consumer):
            client.close()
        else:
            client.flush(0)
    return None


def check_kafka_table(table: Mapping[str, str], source: str) -> None:
    """ConfigError (exit 2) naming the first property librdkafka refuses, or the first that
    would change what safety pins (`kafkaconfig.refuse_unsafe`), and ``source``."""
    refuse_unsafe(table, source)
    for name, value in table.items():
        reason = _refusal(name, value)
        if reason is not None:
            raise ConfigError(f"[kafka] {name} = {value!r} from {source}: {reason}")
