"""The package's Kafka clients by role: one builder per role, each owning its pins.

Every Producer, Consumer and AdminClient of the package is built here, and only here (a test
reads the code for it). A caller merges its configuration with `kafkaconfig.client_config`
(shared defaults < tuned < the user's ``[kafka]`` table < bootstrap and what the use needs),
and hands it to the builder of its role, which lays the role's pins over it last. So a new
client cannot forget ``acks=all`` on a coordination write, or commit where nothing may:

=====================  ==========  ===========================================================
role                   client      pinned
=====================  ==========  ===========================================================
coordination_producer  Producer    acks=all, idempotence; never creates a topic
coordination_reader    Consumer    read_committed; never commits, never creates a topic
data_consumer          Consumer    never commits (positions live in the coordination log)
offsets                Consumer    no automatic commit: only the explicit mirror commits
dead_letter_producer   Producer    acks=all, idempotence
data_producer          Producer    acks=all, idempotence (`marshal-admin produce`, the demo)
admin                  AdminClient -
=====================  ==========  ===========================================================

And every role: never creates a topic (a metadata request for one by name creates it where the
broker allows it, Kafka's default, and the client does: an admin client, a producer handle in
librdkafka, does by default).

The read-only roles (coordination reader, data consumer, admin) open no producer, so a
principal with only Read and Describe can run a command that only reads.

A configuration librdkafka refuses when the client is built (a combination of properties the
table check took one by one: ``security.protocol=SASL_SSL`` with an unknown mechanism) is a
`ConfigError` (exit 2): restarting cannot help. Its text names no secret's value
(`common.secrets.redact_text`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from marshal_workers.clients.kafkaconfig import COORDINATION_READER, SAFE_PRODUCER
from marshal_workers.clients.rdkafka import error_text
from marshal_workers.common.errors import ConfigError
from marshal_workers.common.secrets import redact_text

Config = Mapping[str, Any]
C = TypeVar("C")

_NO_TOPIC_CREATION: Final[Mapping[str, Any]] = {"allow.auto.create.topics": False}
_NO_COMMITS: Final[Mapping[str, Any]] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
}
COORDINATION_PRODUCER_PINS: Final[Mapping[str, Any]] = {**SAFE_PRODUCER, **_NO_TOPIC_CREATION}
COORDINATION_READER_PINS: Final[Mapping[str, Any]] = {
    **COORDINATION_READER,
    **_NO_COMMITS,
    **_NO_TOPIC_CREATION,
}
# Every role: a metadata request for a topic by name (the data topics', status's, the admin's)
# must never create it, whatever the [kafka] table says. librdkafka creates it where the broker
# allows (Kafka's default) when the client does: by default a producer handle does, and the
# admin client is one.
DATA_CONSUMER_PINS: Final[Mapping[str, Any]] = {**_NO_COMMITS, **_NO_TOPIC_CREATION}
OFFSETS_PINS: Final[Mapping[str, Any]] = {"enable.auto.commit": False, **_NO_TOPIC_CREATION}
DEAD_LETTER_PINS: Final[Mapping[str, Any]] = {**SAFE_PRODUCER, **_NO_TOPIC_CREATION}
DATA_PRODUCER_PINS: Final[Mapping[str, Any]] = {**SAFE_PRODUCER, **_NO_TOPIC_CREATION}
ADMIN_PINS: Final[Mapping[str, Any]] = _NO_TOPIC_CREATION

# role -> (client class name, pins): what the builders below apply, for tests and docs.
ROLES: Final[Mapping[str, tuple[str, Mapping[str, Any]]]] = {
    "coordination_producer": ("Producer", COORDINATION_PRODUCER_PINS),
    "coordination_reader": ("Consumer", COORDINATION_READER_PINS),
    "data_consumer": ("Consumer", DATA_CONSUMER_PINS),
    "offsets": ("Consumer", OFFSETS_PINS),
    "dead_letter_producer": ("Producer", DEAD_LETTER_PINS),
    "data_producer": ("Producer", DATA_PRODUCER_PINS),
    "admin": ("AdminClient", ADMIN_PINS),
}


def _build(kind: Callable[[dict[str, Any]], C], role: str, config: Config) -> C:
    """``kind`` built from ``config`` with ``role``'s pins last; ConfigError if refused."""
    merged = {**config, **ROLES[role][1]}
    try:
        return kind(merged)
    except (KafkaException, ValueError, TypeError) as exc:
        text = redact_text(error_text(exc), merged)
        raise ConfigError(
            f"Kafka refuses the {role.replace('_', ' ')}'s settings: {text}"
        ) from None


def coordination_producer(config: Config) -> Producer:
    """The coordination log's writer: acks=all, idempotent, never creates the topic."""
    return _build(Producer, "coordination_producer", config)


def coordination_reader(config: Config) -> Consumer:
    """A reader of the coordination log: read_committed, never commits or creates a topic."""
    return _build(Consumer, "coordination_reader", config)


def data_consumer(config: Config) -> Consumer:
    """A reader of data topics (a child's records, their metadata and watermarks): it never
    commits (positions live in the coordination log)."""
    return _build(Consumer, "data_consumer", config)


def offsets(config: Config) -> Consumer:
    """The group's offset mirror: commits only what it is told to, explicitly."""
    return _build(Consumer, "offsets", config)


def dead_letter_producer(config: Config) -> Producer:
    """A child's dead-letter writer: acks=all, idempotent, never creates the topic."""
    return _build(Producer, "dead_letter_producer", config)


def data_producer(config: Config) -> Producer:
    """A writer of data records (`marshal-admin produce`, the demo): acks=all, idempotent."""
    return _build(Producer, "data_producer", config)


def admin(config: Config) -> AdminClient:
    """An AdminClient (topics, configs, offsets, ACLs)."""
    return _build(AdminClient, "admin", config)
