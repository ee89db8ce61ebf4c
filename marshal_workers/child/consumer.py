"""A child's consumer: one partition, ``assign()``ed at a known offset, never committing.

Ownership of the partition is decided by the coordination log, not by the broker: the consumer
never calls ``subscribe()`` (no group membership, no rebalances) and never commits (the
supervisor records offsets in heartbeats). ``group.id`` is set only because librdkafka wants
one; automatic commits and offset stores are forced off whatever ``kafka_config`` says.

The start position is resolved before ``assign()``: the spec's offset, or the partition's low
or high watermark for ``auto_offset_reset`` earliest or latest. The consumer is then assigned
that concrete offset, so the position the child reports in `Started` is the one it fetches from
(``auto.offset.reset`` still applies if that offset is no longer in the log).

A spare child (`child.main.spare_main`) makes its consumer before its claim is known
(`Prepared`): made and connecting to the cluster while the claims are decided, assigned nothing
and reading nothing until the claim's spec comes; `open_consumer` then assigns it if the spec
asks for the same configuration (the member's client id with ``-spare`` instead of the
partition's topic and number: the one difference), else closes it and makes the spec's own.
"""

from __future__ import annotations

import contextlib
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from marshal_workers.clients import roles
from marshal_workers.clients.kafkaconfig import client_config
from marshal_workers.handler.record import FetchedRecord, MessageRecords, Record
from marshal_workers.ipc.messages import ChildSpec

EARLIEST = frozenset({"earliest", "smallest", "beginning"})
LATEST = frozenset({"latest", "largest", "end"})
WATERMARK_TIMEOUT_S = 10.0
LEADER_LOOKUP_TIMEOUT_S = 5.0  # a prepared consumer's metadata request (`learn_leader`)
FETCH_QUEUE_BACKOFF_MS = 10
PREFETCH_BATCHES = 10  # queued.min.messages: this many batches fetched ahead
PREFETCH_KBYTES = 2048  # queued.max.messages.kbytes
FETCH_PARTITION_BYTES = 262_144  # max.partition.fetch.bytes: a fetch's share of the partition


class ConsumerSetupError(Exception):
    """The spec cannot be consumed as given (a bad offset or reset policy)."""


class FatalKafkaError(Exception):
    """librdkafka reported a fatal error: this consumer cannot go on."""


def consumer_config(spec: ChildSpec, reader: bool = False, spare: bool = False) -> dict[str, Any]:
    """The librdkafka configuration of the child's consumer (``reader``: of the host's reader of
    the partition, `child.reader`; ``spare``: made before the partition is known, `Prepared`;
    each differs only in its client id)."""
    # librdkafka pauses fetching for fetch.queue.backoff.ms (default 1 s) whenever its queue
    # passes queued.min.messages: a handler slower than the fetcher for a moment (an AMO grant
    # wait is enough) then starves for up to a second. 10 ms keeps the queue topped up.
    # One partition, handled batch by batch: a few batches fetched ahead keep the handler fed.
    # librdkafka's defaults (100,000 messages or 64 MB queued per partition, 1 MB fetched per
    # partition per request) are sized for one consumer of many partitions. With small records
    # they made each child hold tens of MB it would not handle for seconds: 97 MB per child in
    # the trivial benchmark (bench/peers.py), 37 MB with these at the same throughput. The
    # fetch size is most of it: a fetched response stays allocated while any of its records
    # is queued (1 MB fetches: +28 MB over the imports; 256 KB: +11 MB; measured by consuming
    # 150,000 small records). Larger records still come whole (a fetch returns at least one).
    tuned: dict[str, Any] = {
        "enable.partition.eof": False,
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        "queued.min.messages": max(PREFETCH_BATCHES * spec.batch_size, 1000),
        "queued.max.messages.kbytes": PREFETCH_KBYTES,
        "max.partition.fetch.bytes": FETCH_PARTITION_BYTES,
    }
    fixed: dict[str, Any] = {
        "group.id": spec.group_id,
        "client.id": f"{spec.client_id}-spare"
        if spare
        else f"{spec.client_id}-{spec.topic}-{spec.partition}" + ("-reader" * reader),
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # the host's reader is shared: a reset of its consumer may only go back to the log's
        # start (ahead, it would skip records another child is still to get); a child's start
        # past the log's end is moved by the child's own policy when it attaches (`child.reader`)
        "auto.offset.reset": "earliest" if reader else spec.auto_offset_reset,
    }
    return client_config(spec.bootstrap_servers, dict(spec.kafka_config), tuned=tuned, fixed=fixed)


def resolve_start(consumer: Consumer, spec: ChildSpec) -> int:
    """The offset to fetch first: the spec's, or a watermark chosen by the reset policy."""
    if spec.start_offset is not None:
        if spec.start_offset < 0:
            raise ConsumerSetupError(f"start offset {spec.start_offset} is negative")
        return spec.start_offset
    policy = spec.auto_offset_reset.lower()
    if policy not in EARLIEST | LATEST:
        raise ConsumerSetupError(
            f"no start offset and auto_offset_reset={spec.auto_offset_reset!r}: "
            "cannot choose where to start"
        )
    marks = consumer.get_watermark_offsets(
        TopicPartition(spec.topic, spec.partition), timeout=WATERMARK_TIMEOUT_S, cached=False
    )
    if marks is None:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "watermark offsets timed out"))
    low, high = marks
    return int(low) if policy in EARLIEST else int(high)


def reader_consumer(spec: ChildSpec) -> Consumer:
    """The consumer of the host's reader of ``spec``'s partition (`child.reader`), not assigned
    yet: the reader assigns it where its children need."""
    return roles.data_consumer(consumer_config(spec, reader=True))


class Prepared:
    """A consumer made before its claim is known, from the member's template spec (module
    doc); nothing assigned."""

    def __init__(self, template: ChildSpec) -> None:
        self.config = consumer_config(template, spare=True)
        self.consumer: Consumer = roles.data_consumer(self.config)

    def fits(self, spec: ChildSpec) -> bool:
        """Whether ``spec`` asks for this consumer's configuration (client id aside)."""
        return consumer_config(spec, spare=True) == self.config


def open_consumer(spec: ChildSpec, prepared: Prepared | None = None) -> tuple[Consumer, int]:
    """A consumer assigned to the spec's partition, and the offset it will fetch first:
    ``prepared``'s if it fits the spec (else it is closed)."""
    if prepared is not None and prepared.fits(spec):
        consumer, reused = prepared.consumer, True
    else:
        if prepared is not None:
            prepared.consumer.close()
        consumer, reused = roles.data_consumer(consumer_config(spec)), False
    try:
        position = resolve_start(consumer, spec)
        consumer.assign([TopicPartition(spec.topic, spec.partition, position)])
        if reused:
            learn_leader(consumer, spec.topic)
    except BaseException:
        consumer.close()
        raise
    return consumer, position


def learn_leader(consumer: Consumer, topic: str) -> None:
    """Ask for ``topic``'s metadata now. A consumer made before its partition was known asked
    for the cluster's when it connected, without the topic: assigned later, it waited for
    librdkafka's next scan of unknown topics (once a second) before its first fetch, 0.7 s in
    2 of 12 tries (a fresh consumer's first request names the topic). A failure here only
    leaves that scan to find it."""
    with contextlib.suppress(KafkaException):
        consumer.list_topics(topic, timeout=LEADER_LOOKUP_TIMEOUT_S)


class Reach:
    """How far a sliced child's consumer has read: the offset after the last message fetched.

    A child of a slice (`ChildSpec.slice`) keeps only its slice's records; the others below
    ``end`` are not its to handle, so once it has handled every kept record it may report its
    position at ``end`` (ALO) instead of after its own last record."""

    __slots__ = ("end",)

    def __init__(self) -> None:
        self.end: int | None = None


def _kept(messages: list[Any], spec: ChildSpec, reach: Reach | None, log: Any) -> list[Any]:
    """The good messages of a fetch that are this child's (its slice's, if it has one). The
    error check maps the messages' own ``error`` method over the batch (no Python frame per
    message); only a batch with an error among them is filtered."""
    good = messages
    if messages and any(map(type(messages[0]).error, messages)):  # rare: errors among them
        _errors(messages, log)
        good = [m for m in messages if m.error() is None]
    part = spec.slice
    if part is None or not good:
        return good
    if reach is not None:
        reach.end = good[-1].offset() + 1
    takes = part.takes
    return [m for m in good if takes(m.offset(), m.key())]


def fetch(
    consumer: Consumer, spec: ChildSpec, log: Any, reach: Reach | None = None
) -> list[Record]:
    """Up to ``batch_size`` records (waiting at most ``batch_timeout_s``), in offset order;
    with a slice, only the slice's records of those fetched (``reach`` says how far it read).

    Each record is a `FetchedRecord` over the consumer's message (one small object: its fields
    are read only if the handler asks). Partition EOF events are skipped; other errors are
    logged and skipped (librdkafka retries them) unless fatal, which raises `FatalKafkaError`.
    """
    messages = consumer.consume(num_messages=spec.batch_size, timeout=spec.batch_timeout_s)
    return list(map(FetchedRecord, _kept(messages, spec, reach, log)))


def fetch_messages(
    consumer: Consumer, spec: ChildSpec, log: Any, reach: Reach | None = None
) -> MessageRecords:
    """`fetch` for a batch plugin that takes the consumer's messages (``batch_view =
    "messages"``): the same messages, none made into a record unless asked for."""
    messages = consumer.consume(num_messages=spec.batch_size, timeout=spec.batch_timeout_s)
    return MessageRecords(_kept(messages, spec, reach, log))


def _errors(messages: list[Any], log: Any) -> None:
    """Log the errors among ``messages``; raise `FatalKafkaError` on a fatal one."""
    for msg in messages:
        err = msg.error()
        if err is None or err.code() == KafkaError._PARTITION_EOF:
            continue
        if err.fatal():
            raise FatalKafkaError(str(err))
        log.warning("kafka_error", error=str(err), code=err.name())
