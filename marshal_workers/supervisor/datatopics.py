"""Metadata of the data topics a group consumes: their partitions and watermarks.

The supervisor needs the partition list (to claim, and to discover new partitions without a
restart) and a partition's low or high watermark (where to start when nothing is committed).
A consumer handle that never subscribes serves both.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from confluent_kafka import KafkaException, TopicPartition

from marshal_workers.clients import roles
from marshal_workers.clients.kafkaconfig import client_config
from marshal_workers.clients.rdkafka import ACLS_HINT, AUTHORIZATION
from marshal_workers.common.errors import ConfigError, MarshalError
from marshal_workers.protocol.slicing import WHOLE, Slicing
from marshal_workers.protocol.wire import ClaimKey


class DataTopics:
    """Partitions and watermarks of a group's data topics."""

    def __init__(
        self,
        bootstrap_servers: str,
        group: str,
        topics: Sequence[str],
        extra_config: Mapping[str, str] | None = None,
        slicing: Slicing = WHOLE,
    ) -> None:
        self.group = group
        self.slicing = slicing
        self.topics = tuple(topics)
        self.bootstrap_servers = bootstrap_servers
        fixed = {"group.id": f"marshal-meta-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False}
        self._consumer = roles.data_consumer(
            client_config(bootstrap_servers, extra_config, fixed=fixed)
        )

    def partitions(self, timeout_s: float = 10.0) -> list[ClaimKey]:
        """Every claim of the group: each partition of every topic (with a sliced ordering, each
        slice of each partition) as a claim key; ConfigError if a topic is missing, or if this
        principal may not describe it. Each topic's metadata is asked for by name: a request
        for every topic is answered with the whole cluster's, at every start and discovery."""
        keys: list[ClaimKey] = []
        for topic in self.topics:
            try:
                tmeta = self._consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
            except KafkaException as exc:
                raise MarshalError(
                    f"cannot read topic metadata from {self.bootstrap_servers}: {exc}"
                ) from None
            error = None if tmeta is None else tmeta.error
            if error is not None and error.code() in AUTHORIZATION:
                raise ConfigError(  # (Kafka says so of a missing topic too: nothing leaks)
                    f"not authorized to describe topic {topic!r} on {self.bootstrap_servers}, "
                    f"or it does not exist ({ACLS_HINT})"
                )
            if tmeta is None or error is not None or not tmeta.partitions:
                raise ConfigError(
                    f"topic {topic!r} does not exist on {self.bootstrap_servers} "
                    "(create it, or fix --topic)"
                )
            keys.extend(
                ClaimKey(self.group, name, p)
                for p in sorted(tmeta.partitions)
                for name in self.slicing.claim_topics(topic)
            )
        return keys

    def watermarks(self, topic: str, partition: int, timeout_s: float = 10.0) -> tuple[int, int]:
        """(low, high): the first offset still stored and the next offset to be written."""
        try:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s
            )
        except KafkaException as exc:
            raise MarshalError(f"cannot read watermarks of {topic}[{partition}]: {exc}") from None
        return int(low), int(high)

    def close(self) -> None:
        """Release the consumer."""
        self._consumer.close()
