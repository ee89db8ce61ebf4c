"""What every librdkafka client of the package shares: where its log lines go, the connect
back-off every client starts with, and the readable text of a Kafka error.

Used by the supervisor's and the tools' clients and by the child's consumer and dead letters,
so the child never imports the coordination-log client for them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException

# librdkafka's own log lines go here (not straight to stderr), so that a command-line error
# stays one line; an application that configures logging still sees them.
RDKAFKA_LOG: Final = logging.getLogger("marshal_workers.librdkafka")
RDKAFKA_LOG.addHandler(logging.NullHandler())

# librdkafka holds a request for a broker it has not connected to yet for half of
# reconnect.backoff.ms (default 100 ms) after any other connection attempt: about 50 ms, once
# for the bootstrap server and again for the partition leader, on every client's first
# requests. A start-up makes a few such clients in a row (the coordination log's reader, the
# data topics' metadata, each child's consumer): 10 ms (the back-off still doubles up to
# reconnect.backoff.max.ms after each failure).
FAST_CONNECT: Final[Mapping[str, Any]] = {"reconnect.backoff.ms": 10}


def error_text(err: object) -> str:
    """The readable text of a Kafka error: a KafkaError, a KafkaException wrapping one, or any
    other object (its ``str``)."""
    if isinstance(err, KafkaError):
        return str(err.str())
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        return str(err.args[0].str())
    return str(err)
