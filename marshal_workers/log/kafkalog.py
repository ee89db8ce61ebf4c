"""The coordination log on a real Kafka broker (confluent-kafka), behind `CoordinationLog`.

One `KafkaLog` is one client's handle: an idempotent producer (``acks=all``) whose `append`
waits for *its own* delivery report, and a consumer that tails the partitions it follows from
the beginning: every partition of the coordination topic when opened (the dump and audit tools
read them all), fewer once `follow` chose them (a placed group's member reads its group's).
Opened ``read_only``, it has no producer at all (a command that only reads, run by a principal
with only Read and Describe on the topic: an idempotent producer would ask the cluster for a
producer id, which needs Write); `append` and `submit` then refuse. The consumer has no
broker-side group membership: it is `assign()`ed explicitly and never subscribes or commits
(librdkafka insists on a ``group.id``, which is therefore set but never used).

Log time is the broker's LogAppendTime. An append whose delivery report carries any other
timestamp type is refused, since a sender's clock must never decide a claim.

Catching up is the hot path (a fresh supervisor folds the whole topic before it claims), so
the consumer fetches big batches and `poll` turns them into `CoordRecord`s with as little
Python work per record as possible.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Final

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from marshal_workers.clients import roles
from marshal_workers.clients.kafkaconfig import client_config
from marshal_workers.clients.rdkafka import ACLS_HINT, ErrorMemory, error_text, refusal_hint
from marshal_workers.common.errors import MarshalError
from marshal_workers.log.interface import LogError
from marshal_workers.protocol.wire import Appended, CoordRecord

DEFAULT_TOPIC: Final = "__marshal"
OPEN_TIMEOUT_S: Final = 10.0
STARTS_TIMEOUT_S: Final = 1.0  # the start offsets' one request; then librdkafka's own look-up
CONSUME_BATCH: Final = 10_000
_UNKNOWN_TOPIC: Final = KafkaError.UNKNOWN_TOPIC_OR_PART

_log = logging.getLogger(__name__)
# Per-use tuned values (the user's [kafka] table may override them).
_PRODUCER_TUNED: Final[Mapping[str, Any]] = {
    # 2 ms: the children's reservations share a produce request (the broker's CPU for 2,400
    # AMO grants: 1.12 s -> 0.60 s, docs/design.md decision 16), and so do the heartbeats, all
    # written without waiting (`submit`); an append that waits for its report waits as long.
    "linger.ms": 2,
    "delivery.timeout.ms": 30_000,
}
_CONSUMER_TUNED: Final[Mapping[str, Any]] = {
    # Catch-up speed: big fetches, a deep prefetch queue, and no back-off when it fills.
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 10_485_760,
    "queued.min.messages": 1_000_000,
    "queued.max.messages.kbytes": 262_144,
    "fetch.queue.backoff.ms": 5,
    "fetch.wait.max.ms": 100,
}
# The start-up reader's wait (`KafkaLog` ``quick_start``): a change of what it follows waits for
# the fetch in flight, which the broker holds this long when there is nothing new to read.
STARTUP_FETCH_WAIT_MS: Final = 5
# What the log's reading needs whatever the table says: it never skips a record it cannot
# find (never committing or creating the topic is the coordination reader's pin).
_CONSUMER_FIXED: Final[Mapping[str, Any]] = {
    "enable.partition.eof": False,
    "auto.offset.reset": "error",
}


class KafkaLog:
    """A producer and a tail of the followed partitions of one coordination topic of a real
    broker."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str = DEFAULT_TOPIC,
        client_id: str = "marshal-workers",
        extra_config: Mapping[str, str] | None = None,
        open_timeout_s: float = OPEN_TIMEOUT_S,
        *,
        read_only: bool = False,
        quick_start: bool = False,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.read_only = read_only
        self._errors = ErrorMemory()
        self._last_error: str | None = None
        self._fatal_error: str | None = None
        self._pending_error: LogError | None = None
        self._acks: list[tuple[int, Appended | str]] = []
        self._in_flight: set[int] = set()
        self._received: dict[str, tuple[int, int]] = {}  # per client: (bytes, message bytes)
        fixed: dict[str, Any] = {"client.id": client_id, "error_cb": self._on_error}
        reader_fixed = {
            **_CONSUMER_FIXED,
            **fixed,
            # Required by librdkafka; never used to subscribe, join or commit.
            "group.id": f"marshal-unused-{client_id}-{uuid.uuid4().hex[:8]}",
        }
        consumer_config = client_config(
            bootstrap_servers, extra_config, tuned=_CONSUMER_TUNED, fixed=reader_fixed
        )
        self._producer_config = client_config(
            bootstrap_servers, extra_config, tuned=_PRODUCER_TUNED, fixed=fixed
        )
        # Offsets and the partition count are asked on a client of their own, from the
        # supervisor's background threads: on the reader's, a ListOffsets request waits behind
        # the fetch the broker holds for fetch.wait.max.ms (100 ms) when there is nothing new
        # to read, which is most of the time; and since confluent-kafka 2.16 a Consumer lets
        # one thread in at a time, so a call from another thread waits for a gap between the
        # reader's polls, which a reader polling back to back seldom leaves (the count took
        # 9 s, or never came). No statistics there: nothing polls it to serve them.
        query_config = client_config(
            bootstrap_servers,
            extra_config,
            tuned=_CONSUMER_TUNED,
            fixed={**reader_fixed, "statistics.interval.ms": 0},
        )
        # ``quick_start``: the reader follows partitions from the open on until `settle` with a
        # short fetch wait, and the reader that tails them for good is opened beside it,
        # assigned nothing until then (`settle`).
        startup_config = client_config(
            bootstrap_servers,
            extra_config,
            tuned=_CONSUMER_TUNED,
            fixed={**reader_fixed, "fetch.wait.max.ms": STARTUP_FETCH_WAIT_MS},
        )
        if int(consumer_config.get("statistics.interval.ms") or 0) > 0:
            consumer_config["stats_cb"] = self._on_stats  # what the reading costs: `received`
            startup_config["stats_cb"] = self._on_stats
        self._quick_start = quick_start
        # Where the reader goes on in each partition it is assigned (`_kept`): where assigned,
        # then after the last record `poll` returned.
        self._next: dict[int, int] = {}
        self._dropped_records = False  # a consume raised: read nothing until put back (`poll`)
        self._lasting: Consumer | None = None
        if quick_start:
            self._lasting = roles.coordination_reader(consumer_config)
            self._consumer = roles.coordination_reader(startup_config)
        else:
            self._consumer = roles.coordination_reader(consumer_config)
        try:
            self._offsets = roles.coordination_reader(query_config)
        except BaseException:
            self._consumer.close()
            if self._lasting is not None:
                self._lasting.close()
            raise
        # The clients connect at once (each costs librdkafka some ms before its first answer);
        # the producer is waited for after the consumer.
        self._producer: Producer | None = None
        if not read_only:
            self._producer = self._new_producer()
        self._opening = True  # no other thread uses the reader yet (`_unreachable`)
        try:
            self._num_partitions = self._partition_count(open_timeout_s)
            self._followed = frozenset(range(self._num_partitions))
            # The reader learns the topic's leaders now, as the query client just did: assigned
            # without them, its first fetch waited for librdkafka's leader lookup, half a
            # second or a second in every other start (what `marshal-run` took to its first
            # record went from 0.3 to 1.4 s when the count moved to the query client).
            self._learn_leaders(open_timeout_s)
            if self._producer is not None:
                self._connect_producer(self._producer, open_timeout_s)
            self._assign(self._starts(self._followed, open_timeout_s))
        except BaseException:
            self._close_consumers()
            raise
        self._opening = False

    def _learn_leaders(self, timeout_s: float) -> None:
        try:
            for reader in (self._consumer, self._lasting):
                if reader is not None:
                    reader.list_topics(self.topic, timeout=timeout_s)
        except KafkaException as exc:
            raise self._unreachable(error_text(exc), f" within {timeout_s:.0f}s") from None

    @property
    def followed(self) -> frozenset[int]:
        """The partitions `poll` reads and `end_offsets` covers."""
        return self._followed

    @property
    def received(self) -> tuple[int, int] | None:
        """What the log's consumers received from the brokers, by librdkafka's latest
        statistics (when ``statistics.interval.ms`` is set): (every byte, the records' bytes);
        None without statistics."""
        if not self._received:
            return None
        got = list(self._received.values())
        return sum(b for b, _ in got), sum(m for _, m in got)

    def _on_stats(self, text: str) -> None:
        """librdkafka's statistics callback, run inside ``consume``: what it raised,
        confluent-kafka would raise from there, the call's records dropped. So it never
        raises: statistics it cannot read leave the figures as they were."""
        try:
            stats = json.loads(text)
            figures = (int(stats.get("rx_bytes", 0)), int(stats.get("rxmsg_bytes", 0)))
            self._received[str(stats.get("name"))] = figures
        except Exception:  # only a figure, logged as the supervisor stops
            _log.debug("unreadable statistics ignored", exc_info=True)

    def follow(self, partitions: Iterable[int], *, from_start: bool = False) -> None:
        """Read exactly ``partitions`` from now on (`CoordinationLog.follow`): the consumer is
        assigned them again, each one kept at the position its last returned record left
        (librdkafka drops what it had fetched beyond that, and everything of a partition no
        longer assigned), each new one at its first offset; on a member's tailing reader, those
        with a record to read first (`_readable_first`)."""
        wanted = frozenset(partitions)
        for p in wanted:
            if not 0 <= p < self._num_partitions:
                raise ValueError(f"partition {p} of {self.topic} does not exist")
        kept = [] if from_start else self._kept(wanted & self._followed)
        fresh = wanted - {tp.partition for tp in kept}
        assigned = kept + self._starts(fresh, STARTS_TIMEOUT_S)
        ordered = self._quick_start and self._lasting is None  # the member's, after `settle`
        first, then = self._readable_first(assigned) if ordered else (assigned, [])
        try:
            self._assign(first)
        except KafkaException as exc:
            raise LogError(f"following {self.topic}: {error_text(exc)}") from None
        if then:
            try:
                self._consumer.incremental_assign(then)
            except KafkaException:
                _log.debug("%s: the second assignment refused: all in one", self.topic)
                try:  # not left with a part: all of them in one call, as without the order
                    self._assign(assigned)
                except KafkaException as exc:
                    self._followed = frozenset(tp.partition for tp in first)  # what it reads
                    raise LogError(f"following {self.topic}: {error_text(exc)}") from None
            self._next.update((tp.partition, tp.offset) for tp in then)
        self._followed = wanted

    def _assign(self, partitions: list[TopicPartition]) -> None:
        """Assign the reader exactly ``partitions``, their offsets noted (`_kept`)."""
        self._consumer.assign(partitions)
        self._next = {tp.partition: tp.offset for tp in partitions}

    def _kept(self, partitions: frozenset[int]) -> list[TopicPartition]:
        """Each of ``partitions`` (followed now) where its reading goes on: after the last
        record `poll` returned of it, or where it was assigned if none since; one assigned at
        OFFSET_BEGINNING with nothing returned since is not kept: it is started again, at
        its first offset asked anew (`_starts`).

        Kept here, not asked of librdkafka's ``position()``: that one is reset only when the
        partition's fetcher stops, which happens after `assign` returns, so a follow made at
        once after one from the start kept the position from before it, and the records in
        between were never read; and it knows no position until a record is returned since
        the last assignment, so a partition kept through a follow with nothing new was read
        again from its first record (the fold refused those, "offset behind")."""
        places = ((p, self._next.get(p, OFFSET_BEGINNING)) for p in sorted(partitions))
        return [TopicPartition(self.topic, p, offset) for p, offset in places if offset >= 0]

    def _readable_first(
        self, assigned: list[TopicPartition]
    ) -> tuple[list[TopicPartition], list[TopicPartition]]:
        """``assigned`` split in two, to be assigned in that order: the partitions with a record
        at the offset they are assigned (or not known not to have one), then the others.

        The tailing reader's fetch is held at the broker for fetch.wait.max.ms (100 ms) when
        none of its partitions has a record to give, and assigned in one call, an empty
        partition and one with records, its first fetch sometimes left with the empty one
        alone: the records came 0.1 s late, in 3 of 16 launches' catch-up after `settle`
        (docs/benchmarks.md, "Launch: the dataclasses' methods compiled once (2026-12-02)").
        Assigned first, the partitions with records are in the first fetch. It costs one
        ``ListOffsets`` request on the query client (the ends), asked only where a partition
        could hold the fetch, the start-up reader's wait being short; unanswered, one call as
        before; not asked where a start went unanswered (a leader down: the ends would wait
        as long again), nor by readers opened without ``quick_start`` (`marshal-admin`'s,
        off the launch's path: one round trip less at each `follow`)."""
        if len(assigned) < 2 or any(tp.offset < 0 for tp in assigned):
            return assigned, []  # a start unanswered (`_starts`): its leader would hold the ends
        latest = [TopicPartition(self.topic, tp.partition, OFFSET_END) for tp in assigned]
        try:
            answered = self._offsets.offsets_for_times(latest, timeout=STARTS_TIMEOUT_S)
        except KafkaException:
            return assigned, []
        ends = {tp.partition: tp.offset for tp in answered if tp.error is None and tp.offset >= 0}
        empty = {
            tp.partition
            for tp in assigned
            if tp.offset >= 0 and tp.partition in ends and ends[tp.partition] <= tp.offset
        }
        first = [tp for tp in assigned if tp.partition not in empty]
        if not first:  # nothing to read anywhere: the wait holds whatever the order
            return assigned, []
        return first, [tp for tp in assigned if tp.partition in empty]

    def settle(self, partitions: Iterable[int]) -> None:
        """Follow exactly ``partitions`` from their first records, for good
        (`CoordinationLog.settle`). Opened ``quick_start``, the log reads them from now on with
        the reader opened for it, never assigned before (its first fetch leaves at once), and
        closes the start-up reader, whose fetch wait is short: while a member locates its
        group each change of what it follows waits for the fetch in flight, up to
        ``fetch.wait.max.ms`` (100 ms) on a reader tailing for good, up to
        `STARTUP_FETCH_WAIT_MS` on the start-up one. The tailing reader keeps the long wait: it
        bounds the fetches an idle member makes."""
        lasting, self._lasting = self._lasting, None
        if lasting is None:
            self.follow(partitions, from_start=True)
            return
        startup, self._consumer = self._consumer, lasting
        startup.close()
        self._followed = frozenset()
        self.follow(partitions, from_start=True)

    def _starts(self, partitions: Iterable[int], timeout_s: float) -> list[TopicPartition]:
        """Each of ``partitions`` at its first offset, asked of the broker in one request. (Assigned
        at OFFSET_BEGINNING instead, librdkafka looks each partition's start up on its own, and
        its first fetch can leave without the partitions still being looked up: the empty ones
        then hold it at the broker for fetch.wait.max.ms, 100 ms of every start.) Should the
        log's start move before the first fetch, it is a LogError like any lost position. A
        partition whose leader does not answer in time (a broker down) leaves them all to
        librdkafka's own look-up, as before: the others are read, that one when it is back."""
        earliest = [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in sorted(partitions)]
        if not earliest:
            return []
        try:
            answered = self._offsets.offsets_for_times(
                earliest, timeout=min(timeout_s, STARTS_TIMEOUT_S)
            )
        except KafkaException:
            return earliest
        for tp in answered:
            if tp.error is not None or tp.offset < 0:
                tp.offset = OFFSET_BEGINNING  # let librdkafka look it up after all
        return list(answered)

    def _new_producer(self) -> Producer:
        try:
            return roles.coordination_producer(self._producer_config)
        except BaseException:
            self._close_consumers()
            raise

    def _writer(self) -> Producer:
        if self._producer is None:
            raise LogError(f"{self.topic} was opened read-only: this command writes nothing")
        return self._producer

    def _connect_producer(self, producer: Producer, timeout_s: float) -> None:
        """Wait until the producer is connected, so that the idempotent producer's id is ready
        by the first append."""
        try:
            producer.list_topics(self.topic, timeout=timeout_s)
        except KafkaException as exc:
            raise self._unreachable(error_text(exc), "") from None

    def _unreachable(self, detail: str, within: str) -> MarshalError:
        """The error of a failed connect: an authentication failure says so, whatever came
        after it (librdkafka goes on to report the broken connection)."""
        # Serve the error callbacks: the query client's; the reader's and the producer's at the
        # open only. Then the reader's thread polls the one, the loop the other, and this runs
        # on a background thread (`current_num_partitions`): the producer polled here ran its
        # delivery callbacks there, and an ack added as the loop took the acks was lost.
        opening = self._opening
        clients = (
            self._consumer if opening else None,
            self._lasting if opening else None,
            self._offsets,
            self._producer if opening else None,
        )
        for client in clients:
            try:
                if client is not None:
                    client.poll(0)
            except KafkaException:
                pass
        return MarshalError(self._errors.unreachable(self.bootstrap_servers, detail, within))

    def _on_error(self, err: KafkaError, *, quiet: bool = False) -> None:
        """librdkafka's error callback: remember the latest error to explain timeouts
        (``quiet``: the caller reports it)."""
        self._errors(err)
        text = error_text(err)
        self._last_error = text
        if err.fatal() and err.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            text += f" (this principal may not write to {self.topic}: {ACLS_HINT})"
        if err.fatal():
            self._fatal_error = text
            if not quiet:
                _log.error("kafka fatal error: %s", text)
        else:
            _log.debug("kafka error: %s", text)

    def _why_fatal(self, producer: Producer, exc: KafkaException) -> str:
        """Why ``producer`` refused a record: a fatal error (served now) says more than its
        "Local: Fatal error"."""
        self._note_fatal(exc)
        try:
            producer.poll(0)
        except KafkaException as fatal:
            self._note_fatal(fatal)
        return self._fatal_error or error_text(exc)

    def _note_fatal(self, exc: KafkaException) -> None:
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and err.fatal() and self._fatal_error is None:
            self._on_error(err, quiet=True)

    def _hint(self) -> str:
        return f" (last error: {self._last_error})" if self._last_error else ""

    def _partition_count(self, timeout_s: float) -> int:
        """The topic's partition count from fresh metadata; MarshalError if unreachable or
        missing. A retriable metadata error (a topic just created) is retried until the timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = max(deadline - time.monotonic(), 0.1)
            try:
                # in steps, so that a refused authentication ends the wait at once
                metadata = self._offsets.list_topics(self.topic, timeout=min(remaining, 1.0))
            except KafkaException as exc:
                failed = self._unreachable(error_text(exc), f" within {timeout_s:.0f}s")
                if self._errors.authentication is None and time.monotonic() < deadline:
                    continue
                raise failed from None
            meta = metadata.topics.get(self.topic)
            error = meta.error if meta is not None else None
            if meta is None or (error is not None and error.code() == _UNKNOWN_TOPIC):
                raise MarshalError(
                    f"coordination topic {self.topic} does not exist on "
                    f"{self.bootstrap_servers}: run `marshal-admin init`"
                )
            if error is None and meta.partitions:
                return len(meta.partitions)
            if time.monotonic() >= deadline or (error is not None and not error.retriable()):
                detail = error_text(error) if error is not None else "no partitions"
                raise MarshalError(
                    f"cannot read metadata of {self.topic} on {self.bootstrap_servers}: "
                    f"{detail}{refusal_hint(error)}"
                )
            time.sleep(0.1)

    @property
    def num_partitions(self) -> int:
        """How many partitions the coordination topic had when this handle was opened."""
        return self._num_partitions

    def current_num_partitions(self, timeout_s: float) -> int:
        """The partition count the broker reports now (a change is fatal to coordination).

        Raises MarshalError, as at open, if the broker is unreachable or the topic is gone."""
        return self._partition_count(timeout_s)

    def append(self, partition: int, key: bytes, value: bytes, timeout_s: float) -> Appended:
        """Produce one record to ``partition`` and wait for its delivery report.

        A LogError means the append is not known to have happened; after a timeout the record
        may still land later (the fold will show it), but it must not be counted on.
        """
        if self._fatal_error is not None:
            raise LogError(f"producer is unusable after a fatal error: {self._fatal_error}")
        if not 0 <= partition < self._num_partitions:
            raise LogError(f"partition {partition} of {self.topic} does not exist")
        producer = self._writer()
        reports: list[tuple[KafkaError | None, Any]] = []

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            reports.append((err, msg))

        try:
            producer.produce(
                self.topic, value=value, key=key, partition=partition, on_delivery=on_delivery
            )
        except BufferError:
            raise LogError("coordination producer queue is full") from None
        except KafkaException as exc:
            raise LogError(f"append to {self.topic}: {self._why_fatal(producer, exc)}") from None
        deadline = time.monotonic() + timeout_s
        while not reports:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LogError(
                    f"append to {self.topic}[{partition}] not acknowledged within "
                    f"{timeout_s:.1f}s{self._hint()}"
                )
            try:
                producer.poll(min(remaining, 0.1))
            except KafkaException as exc:  # a fatal error of the idempotent producer
                why = self._why_fatal(producer, exc)
                raise LogError(f"append to {self.topic}[{partition}] failed: {why}") from None
        err, msg = reports[0]
        if err is not None:
            raise LogError(f"append to {self.topic}[{partition}] failed: {error_text(err)}")
        ts_type, ts = msg.timestamp()
        if ts_type != TIMESTAMP_LOG_APPEND_TIME:
            raise LogError(
                f"{self.topic} did not stamp the record with LogAppendTime: set "
                "message.timestamp.type=LogAppendTime on the topic (`marshal-admin init` checks)"
            )
        return Appended(msg.partition(), msg.offset(), ts)

    def submit(self, op: int, partition: int, key: bytes, value: bytes) -> None:
        """Produce one record to ``partition`` without waiting; `acks` reports the outcome."""
        producer = self._writer()
        if not 0 <= partition < self._num_partitions:
            self._acks.append((op, f"partition {partition} of {self.topic} does not exist"))
            return

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            if op not in self._in_flight:
                return  # given up on when the producer was replaced
            self._in_flight.discard(op)
            if err is not None:
                self._acks.append((op, f"append failed: {error_text(err)}"))
                return
            ts_type, ts = msg.timestamp()
            if ts_type != TIMESTAMP_LOG_APPEND_TIME:
                self._acks.append((op, f"{self.topic} did not stamp with LogAppendTime"))
                return
            self._acks.append((op, Appended(msg.partition(), msg.offset(), ts)))

        self._in_flight.add(op)
        try:
            producer.produce(
                self.topic, value=value, key=key, partition=partition, on_delivery=on_delivery
            )
        except BufferError:
            self._in_flight.discard(op)
            self._acks.append((op, "coordination producer queue is full"))
        except KafkaException as exc:
            self._in_flight.discard(op)
            self._acks.append((op, f"append to {self.topic}: {error_text(exc)}"))

    def acks(self) -> list[tuple[int, Appended | str]]:
        """Serve the producer's delivery reports; return the outcomes that came in. After a
        fatal producer error (an idempotent producer's sequence is broken) the producer is
        replaced by a new one, and every append in flight is reported failed."""
        if self._producer is None:
            return []
        try:
            self._producer.poll(0)
        except KafkaException as exc:  # raised instead of reported: a fatal error
            self._fatal_error = self._why_fatal(self._producer, exc)
        if self._fatal_error is not None:
            error, self._fatal_error = self._fatal_error, None
            _log.error("replacing the coordination producer after a fatal error: %s", error)
            failed = sorted(self._in_flight)
            self._in_flight.clear()
            self._acks.extend((op, f"producer failed: {error}") for op in failed)
            self._producer = roles.coordination_producer(self._producer_config)
        out, self._acks = self._acks, []
        return out

    def poll(self, timeout_s: float) -> list[CoordRecord]:
        """Up to one batch of records (each partition in offset order), waiting up to
        ``timeout_s`` for the first; a consumer error is raised as LogError (after the records
        that came before it have been returned), and a ``consume`` that raised puts the reader
        back after the last record returned (`_go_back`)."""
        if self._pending_error is not None:
            error, self._pending_error = self._pending_error, None
            raise error
        if self._dropped_records:
            self._go_back("")  # not read past what was dropped: raises until it went back
        try:
            messages = self._consume(timeout_s)
        except Exception as exc:  # a callback's own exception comes through here too
            self._dropped_records = True
            text = error_text(exc) if isinstance(exc, KafkaException) else repr(exc)
            self._go_back(f"reading {self.topic}: {text}")
        out: list[CoordRecord] = []
        append = out.append
        next_offsets = self._next
        for m in messages:
            if m.error() is not None:
                self._consumer_error(m)  # kept for the next call: later records still count
                continue
            # A message without an error always has a partition and an offset.
            partition, offset = m.partition(), m.offset()
            next_offsets[partition] = offset + 1
            append(CoordRecord(partition, offset, m.timestamp()[1], m.key(), m.value()))
        if not out and self._pending_error is not None:
            error, self._pending_error = self._pending_error, None
            raise error
        return out

    def _consume(self, timeout_s: float) -> list[Any]:
        """A batch from the reader: what is queued, else what comes first within ``timeout_s``
        and what is queued after it. (consume(n, t) waits for all n messages or t.)"""
        consume = self._consumer.consume
        messages: list[Any] = consume(num_messages=CONSUME_BATCH, timeout=0)
        if not messages and timeout_s > 0:
            messages = consume(num_messages=1, timeout=timeout_s)
            if messages:
                messages.extend(consume(num_messages=CONSUME_BATCH - 1, timeout=0))
        return messages

    def _go_back(self, error: str) -> None:
        """Put the reader back after the last record `poll` returned of each partition
        (`_kept`), then raise ``error`` as a LogError if there is one. confluent-kafka drops
        the records a ``consume`` took when it raises (a callback's exception, a fatal error),
        and this poll's earlier calls' records with them; librdkafka had moved past them, and
        the reading goes on after a read error: the fold never saw them. Until the reader
        is back, every poll tries again and raises, reading nothing past them."""
        try:
            self.follow(self._followed)
        except Exception as again:  # the next poll tries again
            text = f"; and could not go back to the last record read: {again}"
            raise LogError(f"{error or f'reading {self.topic}'}{text}") from None
        self._dropped_records = False
        if error:
            raise LogError(error)

    def _consumer_error(self, m: Any) -> None:
        err: KafkaError = m.error()
        if err.code() == KafkaError._PARTITION_EOF:
            return
        if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
            # The throw-away group id librdkafka insists on: its coordinator is looked up but
            # never used (no commits, no membership), so a principal need not be allowed it.
            _log.debug("ignored: %s", error_text(err))
            return
        text = f"reading {self.topic}[{m.partition()}]: {error_text(err)}"
        if err.retriable() and not err.fatal():
            _log.warning("%s (retrying)", text)
            return
        if self._pending_error is None:
            self._pending_error = LogError(text)

    def end_offsets(self, timeout_s: float) -> dict[int, int]:
        """Each followed partition's end offset, asked of the broker now: one request for them all
        (``ListOffsets`` for the latest offset), where asking for each watermark in turn cost a
        round trip per partition at every start; and one for the earliest, so that a partition
        whose records were all deleted (DeleteRecords or retention: its start is its end) has
        end 0, nothing to wait for (`CoordinationLog.end_offsets`)."""
        ends = self._list_offsets(OFFSET_END, "end", timeout_s)
        starts = self._list_offsets(OFFSET_BEGINNING, "start", timeout_s)
        return {p: end if starts[p] < end else 0 for p, end in ends.items()}

    def _list_offsets(self, which: int, what: str, timeout_s: float) -> dict[int, int]:
        wanted = [TopicPartition(self.topic, p, which) for p in sorted(self._followed)]
        if not wanted:
            return {}
        try:
            answered = self._offsets.offsets_for_times(wanted, timeout=timeout_s)
        except KafkaException as exc:
            raise LogError(
                f"{what} offsets of {self.topic}: {error_text(exc)}{self._hint()}"
            ) from None
        out: dict[int, int] = {}
        for tp in answered:
            if tp.error is not None or tp.offset < 0:
                detail = error_text(tp.error) if tp.error is not None else f"no {what} offset"
                raise LogError(f"{what} offset of {self.topic}[{tp.partition}]: {detail}")
            out[tp.partition] = int(tp.offset)
        return out

    def close(self) -> None:
        """Flush pending appends briefly and close the clients."""
        try:
            if self._producer is not None:
                self._producer.flush(1.0)
        except KafkaException as exc:  # a fatal producer error, already reported
            _log.debug("closing the coordination producer: %s", error_text(exc))
        finally:
            self._close_consumers()

    def _close_consumers(self) -> None:
        try:
            self._consumer.close()
        finally:
            try:
                if self._lasting is not None:
                    self._lasting.close()
            finally:
                self._offsets.close()
