"""Dead letters: a failed record, produced to the dead-letter topic with why and where from.

A dead letter keeps the record's key, value and headers, and appends these headers (UTF-8 text;
Kafka headers may repeat, so a record dead-lettered twice carries both sets, the newest last):

==============================  =====================================================
``marshal.dlq.error.type``      the exception's class (qualified unless builtin)
``marshal.dlq.error.message``   ``str(exception)`` (cut to `MAX_MESSAGE_CHARS`)
``marshal.dlq.error.traceback`` the formatted traceback (cut to `MAX_TRACEBACK_CHARS`)
``marshal.dlq.source.topic``    where the record was read: topic,
``marshal.dlq.source.partition``  partition,
``marshal.dlq.source.offset``     offset,
``marshal.dlq.source.timestamp``  and timestamp (epoch ms; a null value if unknown)
``marshal.dlq.group``           the consumer group
``marshal.dlq.client_id``       the client that gave up on it
``marshal.dlq.fencing_token``   the claim's fencing token
``marshal.dlq.attempts``        how many times the handler was called on it
``marshal.dlq.batch``           ``FIRST-LAST`` offsets when a ``handle_batch`` call failed
                                (every record of the batch is dead-lettered)
==============================  =====================================================

The producer is created on the first dead letter (most children never need one) with
``acks=all`` and idempotence, and `DeadLetters.send` waits for every delivery report: a dead
letter counts only once the broker has it. The topic is never auto-created; a missing one is
a `DeadLetterError` (which the child turns into ``stop``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from marshal_workers.child.policy import Failure
from marshal_workers.clients import roles
from marshal_workers.clients.kafkaconfig import SAFE_PRODUCER, client_config
from marshal_workers.handler import Record
from marshal_workers.ipc.messages import ChildSpec

PREFIX = "marshal.dlq."
MAX_MESSAGE_CHARS = 4_000
MAX_TRACEBACK_CHARS = 16_000
DELIVERY_TIMEOUT_S = 30.0
METADATA_TIMEOUT_S = 10.0
POLL_S = 0.05

Headers = list[tuple[str, str | bytes | None]]


class DeadLetterError(Exception):
    """A dead letter could not be written (missing topic, delivery failed or timed out)."""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 15] + "...[truncated]"


def dead_letter_headers(
    record: Record,
    failure: Failure,
    *,
    group_id: str,
    client_id: str,
    fencing_token: int,
    batch: tuple[int, int] | None = None,
) -> Headers:
    """The record's own headers followed by the ``marshal.dlq.*`` ones (see the module doc)."""
    ours: dict[str, str | None] = {
        "error.type": failure.error_type,
        "error.message": _cut(str(failure.error), MAX_MESSAGE_CHARS),
        "error.traceback": _cut(failure.traceback, MAX_TRACEBACK_CHARS),
        "source.topic": record.topic,
        "source.partition": str(record.partition),
        "source.offset": str(record.offset),
        "source.timestamp": None if record.timestamp is None else str(record.timestamp),
        "group": group_id,
        "client_id": client_id,
        "fencing_token": str(fencing_token),
        "attempts": str(failure.attempts),
    }
    if batch is not None:
        ours["batch"] = f"{batch[0]}-{batch[1]}"
    headers: Headers = list(record.headers)
    headers.extend(
        (PREFIX + name, None if value is None else value.encode()) for name, value in ours.items()
    )
    return headers


def producer_config(spec: ChildSpec) -> dict[str, Any]:
    """The dead-letter producer's librdkafka configuration (the ``[kafka]`` table included)."""
    return client_config(
        spec.bootstrap_servers,
        dict(spec.kafka_config),
        tuned={"linger.ms": 5},
        fixed={
            "client.id": f"{spec.client_id}-{spec.topic}-{spec.partition}-dlq",
            # the child waits this long for a dead letter's report (flush, DELIVERY_TIMEOUT_S)
            "delivery.timeout.ms": int(DELIVERY_TIMEOUT_S * 1000),
            "allow.auto.create.topics": False,
        },
        pinned=SAFE_PRODUCER,
    )


def topic_exists(client: Any, topic: str, timeout: float = METADATA_TIMEOUT_S) -> bool:
    """Whether ``topic`` exists, per the metadata of a Consumer or Producer ``client``."""
    found = client.list_topics(topic, timeout=timeout).topics.get(topic)
    return found is not None and found.error is None


class DeadLetters:
    """One child's dead-letter producer for one topic, created on first use."""

    def __init__(self, spec: ChildSpec, topic: str) -> None:
        self.spec = spec
        self.topic = topic
        self._producer: Producer | None = None
        self._topic_found = False

    def _ready(self) -> Producer:
        if self._producer is None:
            self._producer = roles.dead_letter_producer(producer_config(self.spec))
        if not self._topic_found:  # checked until found: someone may create it meanwhile
            try:
                self._topic_found = topic_exists(self._producer, self.topic)
            except KafkaException as exc:
                raise DeadLetterError(f"cannot read metadata of {self.topic}: {exc}") from None
            if not self._topic_found:
                raise DeadLetterError(
                    f"dead-letter topic {self.topic} does not exist: create it, or set --dlq-topic"
                )
        return self._producer

    def write(
        self,
        unit: Sequence[Record],
        failure: Failure,
        check: Callable[[], None],
        timeout: float = DELIVERY_TIMEOUT_S,
    ) -> None:
        """Dead-letter the records of a failed unit (one record, or a batch: then each carries
        the batch's range) and wait until the broker has them all (see `send`)."""
        batch = (unit[0].offset, unit[-1].offset) if len(unit) > 1 else None
        headers = [
            dead_letter_headers(
                record,
                failure,
                group_id=self.spec.group_id,
                client_id=self.spec.client_id,
                fencing_token=self.spec.fencing_token,
                batch=batch,
            )
            for record in unit
        ]
        self.send(unit, headers, check, timeout)

    def send(
        self,
        records: Sequence[Record],
        headers: Sequence[Headers],
        check: Callable[[], None],
        timeout: float = DELIVERY_TIMEOUT_S,
    ) -> None:
        """Produce each record with its headers and wait until the broker has them all.

        ``check()`` runs while waiting and may raise to abandon (the lease ended). Raises
        `DeadLetterError` if a record is refused or not acknowledged within ``timeout``.
        """
        producer = self._ready()
        reports: dict[int, KafkaError | None] = {}

        def report(index: int) -> Callable[[KafkaError | None, Any], None]:
            def on_delivery(err: KafkaError | None, msg: Any) -> None:
                reports[index] = err

            return on_delivery

        try:
            for i, (record, extra) in enumerate(zip(records, headers, strict=True)):
                producer.produce(
                    self.topic,
                    value=record.value,
                    key=record.key,
                    headers=extra,
                    on_delivery=report(i),
                )
        except (KafkaException, BufferError) as exc:
            producer.purge()
            raise DeadLetterError(f"cannot produce to {self.topic}: {exc}") from None
        deadline = time.monotonic() + timeout
        while len(reports) < len(records):
            check()
            if time.monotonic() > deadline:
                producer.purge()
                raise DeadLetterError(f"{self.topic} did not acknowledge within {timeout:g} s")
            producer.poll(POLL_S)
        failed = [err for err in reports.values() if err is not None]
        if failed:
            raise DeadLetterError(f"{self.topic} refused a dead letter: {failed[0].str()}")

    def close(self) -> None:
        """Drop whatever is still queued (nothing, unless a send was abandoned) and close."""
        if self._producer is not None:
            self._producer.purge()
            self._producer.flush(0.5)
            self._producer = None
