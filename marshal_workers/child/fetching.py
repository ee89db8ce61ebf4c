"""The first step of the child's chain: batches from its consumer, in offset order.

`Fetcher` owns the consumer (`child.consumer.open_consumer`: one partition, ``assign()``ed,
never committing), how far a slice's child has read (`Reach`), and the two ways to fetch: wait
up to ``batch_timeout`` for a batch (nothing else to do), or take what the consumer has queued
already (AMO with a run asked for: the run in hand must not wait on new records). A batch is
records, or for a batch plugin with ``batch_view = "messages"`` a view over the consumer's own
messages. A fatal Kafka error ends the child.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaException

from marshal_workers.child.consumer import (
    FatalKafkaError,
    Prepared,
    Reach,
    fetch,
    fetch_messages,
    open_consumer,
)
from marshal_workers.child.stats import cached_high_watermark
from marshal_workers.handler import Record
from marshal_workers.ipc.exits import EXIT_KAFKA, ChildExit
from marshal_workers.ipc.messages import ChildSpec


class Source(Protocol):
    """Where a child's batches come from: its own consumer (`Fetcher`) or, for a slice's child
    with shared reads, the host's reader of its partition (`feedsource.FeedFetcher`)."""

    messages: bool

    @property
    def consumer(self) -> Consumer | None: ...  # (a dead-letter topic is checked with it)

    @property
    def reach(self) -> Any: ...  # (its ``end``: how far a slice's child read)

    def open(self) -> int: ...
    def fetch(self, wait: bool = True) -> Sequence[Record]: ...
    def high_watermark(self) -> int | None: ...
    def close(self) -> None: ...

    @property
    def idle(self) -> bool:
        """Whether a short batch means the child caught up (ALO reports it at once)."""
        ...


class Fetcher:
    """The child's consumer and its batches."""

    idle = True  # a short batch from the consumer: it had no more (caught up)

    def __init__(
        self, spec: ChildSpec, log: Any, messages: bool, prepared: Prepared | None = None
    ) -> None:
        self.spec = spec
        self.prepared = prepared  # a spare's consumer, made before its claim (`open` takes it)
        self.log = log
        self.messages = messages  # a batch plugin that takes the consumer's messages
        self.now = replace(spec, batch_timeout_s=0.0)  # what is queued already, no waiting
        self.reach = Reach()  # a slice's child: how far it read (other slices' records skipped)
        self.consumer: Consumer | None = None
        self.start = 0  # where the consumer was assigned (see `open`)

    def open(self) -> int:
        """Open the consumer (`ConsumerSetupError`, `KafkaException` to the caller); the offset
        it fetches first."""
        prepared, self.prepared = self.prepared, None
        self.consumer, self.start = open_consumer(self.spec, prepared)
        return self.start

    def fetch(self, wait: bool = True) -> Sequence[Record]:
        """A batch: up to ``batch_size`` records, waiting up to ``batch_timeout`` for them if
        ``wait``, else only those queued already (maybe none)."""
        assert self.consumer is not None
        spec = self.spec if wait else self.now
        try:
            if self.messages:
                return fetch_messages(self.consumer, spec, self.log, self.reach)
            return fetch(self.consumer, spec, self.log, self.reach)
        except (FatalKafkaError, KafkaException) as exc:
            self.log.error("kafka_failed", error=str(exc))
            raise ChildExit(EXIT_KAFKA, "kafka_failed") from None

    def high_watermark(self) -> int | None:
        """The partition's high watermark from the consumer's cache (None: not known yet)."""
        if self.consumer is None:
            return None
        return cached_high_watermark(self.consumer, self.spec.topic, self.spec.partition)

    def close(self) -> None:
        """Close the consumer, if open (a failure is logged, not raised)."""
        if self.consumer is not None:
            try:
                self.consumer.close()
            except Exception as exc:
                self.log.warning("consumer_close_failed", error=repr(exc))
