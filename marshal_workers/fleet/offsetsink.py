"""Commits of a group's positions to Kafka's ``__consumer_offsets``, from a consumer that never
joins the group: the sink the supervisor's `OffsetCommitter` mirrors its claims' positions into,
and `marshal-admin set-position` writes the positions it sets to.

The commits come from a consumer that never joins the group: ``group.id`` is the group, it
never subscribes, and it commits explicit offsets (generation -1, no member id: a "simple
consumer" commit). The broker accepts such commits while the group has no live members, which
is the case for a Marshal group (its children never subscribe either). If some other consumer
subscribes with the same group id, the broker refuses the commits (UNKNOWN_MEMBER_ID) while that
consumer is a member: counted as failures, harmless to the fleet.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from marshal_workers.clients import roles
from marshal_workers.clients.kafkaconfig import client_config
from marshal_workers.clients.rdkafka import RDKAFKA_LOG, error_text

TopicOffset = tuple[str, int, int]  # topic, partition, next offset to read
ResultCallback = Callable[[Sequence[tuple[str, int]], str | None], None]


class OffsetSink(Protocol):
    """Where commits go: Kafka (`KafkaOffsetSink`) or a fake in tests."""

    def commit(self, offsets: Sequence[TopicOffset]) -> None:
        """Start committing; the outcome is reported later through the result callback."""
        ...

    def serve(self) -> None:
        """Deliver the outcomes of earlier commits (without blocking)."""
        ...

    def close(self) -> None:
        """Release the client."""
        ...


class KafkaOffsetSink:
    """Commits offsets of ``group`` with a consumer that never joins it (created on first use)."""

    def __init__(
        self,
        bootstrap_servers: str,
        group: str,
        extra_config: Mapping[str, str] | None = None,
        on_result: ResultCallback | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.group = group
        self.extra_config = dict(extra_config or {})
        self.on_result = on_result
        self._consumer: Consumer | None = None

    def _open(self) -> Consumer:
        if self._consumer is None:
            fixed: dict[str, Any] = {
                "client.id": f"marshal-offsets-{uuid.uuid4().hex[:8]}",
                "group.id": self.group,  # the group itself: that is what the commits are for
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "on_commit": self._on_commit,
            }
            self._consumer = roles.offsets(
                client_config(self.bootstrap_servers, self.extra_config, fixed=fixed)
            )
        return self._consumer

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if self.on_result is None:
            return
        failed = [(tp.topic, tp.partition) for tp in partitions if tp.error is not None]
        if err is not None:
            self.on_result([(tp.topic, tp.partition) for tp in partitions], error_text(err))
        elif failed:
            first = next(tp.error for tp in partitions if tp.error is not None)
            self.on_result(failed, error_text(first))

    def commit(self, offsets: Sequence[TopicOffset]) -> None:
        """Commit asynchronously; a failure to even start is reported at once."""
        try:
            self._open().commit(
                offsets=[TopicPartition(t, p, o) for t, p, o in offsets], asynchronous=True
            )
        except Exception as exc:  # best effort: a client or config failure must not escape
            if self.on_result is not None:
                self.on_result(
                    [(t, p) for t, p, _ in offsets], error_text(exc.args[0] if exc.args else exc)
                )

    def commit_now(self, offsets: Sequence[TopicOffset]) -> str | None:
        """Commit and wait for the answer; return the error text, or None if all were taken."""
        try:
            consumer = self._open()
            done = consumer.commit(
                offsets=[TopicPartition(t, p, o) for t, p, o in offsets], asynchronous=False
            )
        except KafkaException as exc:
            return error_text(exc.args[0] if exc.args else exc)
        except Exception as exc:  # best effort, as above
            return str(exc)
        errors = [tp.error for tp in done or [] if tp.error is not None]
        return error_text(errors[0]) if errors else None

    def serve(self) -> None:
        """Deliver commit outcomes (a consumer that never subscribes only serves callbacks)."""
        if self._consumer is not None:
            try:
                self._consumer.poll(0)
            except Exception as exc:  # best effort
                RDKAFKA_LOG.debug("offset committer poll failed: %s", exc)

    def close(self) -> None:
        """Close the consumer, if one was opened."""
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            try:
                consumer.close()
            except Exception as exc:  # best effort
                RDKAFKA_LOG.debug("offset committer close failed: %s", exc)
