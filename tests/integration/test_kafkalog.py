"""KafkaLog on a real broker: what the shared contract suite cannot say (errors, speed).

The contract itself (append, tail, end offsets, the reader's barrier) is in
tests/contract/test_coordlog_contract.py, run against both implementations.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Producer
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from marshal_workers.common.errors import MarshalError
from marshal_workers.log import kafkalog
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.interface import LogError
from marshal_workers.log.kafkalog import KafkaLog
from marshal_workers.log.topicadmin import (
    admin_client,
    await_topic,
    delete_topic,
    ensure_coordination_topic,
)
from marshal_workers.protocol.rationalizer import RationalizerConfig
from marshal_workers.protocol.wire import Heartbeat, coordination_partition, encode, record_key

pytestmark = pytest.mark.kafka

CATCH_UP_RECORDS = int(os.environ.get("MARSHAL_CATCHUP_RECORDS", "100000"))


@pytest.fixture
def fresh_topic(kafka_bootstrap: str) -> Iterator[str]:
    """A unique topic name, deleted after the test if it was created."""
    name = f"kafkalog-{uuid.uuid4().hex[:10]}"
    yield name
    delete_topic(admin_client(kafka_bootstrap), kafka_bootstrap, name)


class TestOpening:
    def test_missing_topic_says_run_init(self, kafka_bootstrap: str, fresh_topic: str) -> None:
        """Opening a coordination topic that does not exist tells the user to run init."""
        with pytest.raises(MarshalError, match=r"does not exist .*run `marshal-admin init`"):
            KafkaLog(kafka_bootstrap, fresh_topic)

    def test_unreachable_broker_fails_in_bounded_time(self) -> None:
        """An unreachable bootstrap server gives one clear error within the open timeout."""
        start = time.monotonic()
        with pytest.raises(MarshalError, match=r"cannot reach Kafka at 127\.0\.0\.1:1") as info:
            KafkaLog("127.0.0.1:1", open_timeout_s=3.0)
        assert time.monotonic() - start < 8.0
        assert "\n" not in str(info.value)

    def test_num_partitions_comes_from_metadata(
        self, kafka_bootstrap: str, fresh_topic: str
    ) -> None:
        """num_partitions is the topic's partition count, and current_num_partitions agrees."""
        ensure_coordination_topic(kafka_bootstrap, fresh_topic, 5, replication_factor=1)
        log = KafkaLog(kafka_bootstrap, fresh_topic)
        try:
            assert log.num_partitions == 5
            assert log.current_num_partitions(10.0) == 5
        finally:
            log.close()


class TestAskedWhileTheReaderPolls:
    def test_the_count_and_the_ends_answer_while_another_thread_polls_without_pause(
        self, kafka_bootstrap: str, fresh_topic: str
    ) -> None:
        """The supervisor's reader thread polls the log back to back while the background jobs
        ask the partition count (discovery) and the log's ends. confluent-kafka 2.16 lets one
        thread at a time into a Consumer and the others wait for a gap, which a polling loop
        seldom leaves: asked on the reader's consumer, the count came after 9 s or never (a
        grown coordination topic went unnoticed for 30 s in CI). Each answers in its timeout."""
        ensure_coordination_topic(kafka_bootstrap, fresh_topic, 2, replication_factor=1)
        log = KafkaLog(kafka_bootstrap, fresh_topic)
        stop = threading.Event()

        def read() -> None:
            while not stop.is_set():
                log.poll(0.1)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        answers: list[tuple[int, set[int]]] = []

        def ask() -> None:
            for _ in range(3):
                answers.append((log.current_num_partitions(5.0), set(log.end_offsets(5.0))))

        asker = threading.Thread(target=ask, daemon=True)
        try:
            time.sleep(0.5)  # the reader is in its loop
            asker.start()
            asker.join(30.0)  # 3 x (5 s + 5 s) at most, and far less in fact
            assert not asker.is_alive(), f"asked 3 times, answered {len(answers)} in 30 s"
            assert answers == [(2, {0, 1})] * 3
        finally:
            stop.set()
            reader.join(5)
            if not asker.is_alive():  # (a stuck ask holds the consumer: closing would wait too)
                log.close()


class TestLogTime:
    def test_create_time_topic_refuses_appends(
        self, kafka_bootstrap: str, fresh_topic: str
    ) -> None:
        """An append to a topic that keeps the sender's timestamps raises LogError."""
        admin = admin_client(kafka_bootstrap)
        admin.create_topics([NewTopic(fresh_topic, 1, 1)])[fresh_topic].result(10)
        # as init does: a topic just created may not be in the metadata yet (seen on Kafka 4.2)
        await_topic(admin, kafka_bootstrap, fresh_topic, 30.0)
        log = KafkaLog(kafka_bootstrap, fresh_topic)
        try:
            with pytest.raises(LogError, match="LogAppendTime"):
                log.append(0, b"k", b"v", 10.0)
        finally:
            log.close()

    def test_log_time_is_the_brokers_clock(self, kafka_bootstrap: str, fresh_topic: str) -> None:
        """The log time of an append is near the broker's (here: this host's) clock now."""
        ensure_coordination_topic(kafka_bootstrap, fresh_topic, 1, replication_factor=1)
        log = KafkaLog(kafka_bootstrap, fresh_topic)
        try:
            appended = log.append(0, b"k", b"v", 10.0)
        finally:
            log.close()
        assert abs(appended.log_time - time.time() * 1000) < 60_000


class TestCatchUp:
    def test_fresh_reader_catches_up(self, kafka_bootstrap: str, fresh_topic: str) -> None:
        """A fresh reader reads and folds every record of a long log on several partitions.
        (How fast is a figure for `bench/fold_and_catch_up.py`, never an assertion: this
        asserted >= 20k records/s and failed at 5.45 s on a loaded machine.)"""
        partitions, claims = 4, 200
        ensure_coordination_topic(kafka_bootstrap, fresh_topic, partitions, replication_factor=1)
        producer = Producer(
            {"bootstrap.servers": kafka_bootstrap, "linger.ms": 50, "compression.type": "lz4"}
        )
        for i in range(CATCH_UP_RECORDS):
            part = i % claims
            msg = Heartbeat(0, f"i{part % 20}", f"c{part % 20}", "g", "orders", part, i)
            home = coordination_partition("orders", part, partitions)
            while True:
                try:
                    producer.produce(fresh_topic, encode(msg), record_key(msg), partition=home)
                    break
                except BufferError:
                    producer.poll(0.1)
        assert producer.flush(60) == 0
        log = KafkaLog(kafka_bootstrap, fresh_topic)
        try:
            start = time.monotonic()
            reader = FoldedLog(log, RationalizerConfig(10_000, num_partitions=partitions))
            folded = reader.catch_up(120.0)
            elapsed = time.monotonic() - start
        finally:
            log.close()
        print(f"caught up on {folded} records in {elapsed:.2f}s")
        assert folded == CATCH_UP_RECORDS + 1  # and init's record of the partition count


class AssignSpy:
    """The log's real consumer, its assignments noted in order (each call and its partitions
    with their offsets), everything else passed through; ``refuse_incremental``: its
    `incremental_assign` raises, as librdkafka would, after noting the call."""

    def __init__(self, consumer: object, *, refuse_incremental: bool = False) -> None:
        self.consumer = consumer
        self.refuse_incremental = refuse_incremental
        self.calls: list[tuple[str, list[tuple[int, int]]]] = []

    def assign(self, partitions: list[Any]) -> None:
        self.calls.append(("assign", [(tp.partition, tp.offset) for tp in partitions]))
        self.consumer.assign(partitions)  # type: ignore[attr-defined]

    def incremental_assign(self, partitions: list[Any]) -> None:
        self.calls.append(("incremental", [(tp.partition, tp.offset) for tp in partitions]))
        if self.refuse_incremental:
            raise KafkaException(KafkaError(KafkaError._STATE, "refused by the test"))
        self.consumer.incremental_assign(partitions)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumer, name)


def assert_every_record_read(log: KafkaLog, ends: dict[int, int]) -> None:
    """``log`` returns each record below ``ends`` once (every partition read from offset 0)."""
    read: list[int] = []
    deadline = time.monotonic() + 30
    while len(read) < sum(ends.values()) and time.monotonic() < deadline:
        read.extend(r.partition for r in log.poll(0.5))
    assert sorted(read) == sorted(p for p, end in ends.items() for _ in range(end))


class QuerySpy:
    """The log's real query client, the offsets it was asked for noted (each
    `offsets_for_times` call's partitions' offsets), everything else passed through."""

    def __init__(self, client: object) -> None:
        self.client = client
        self.asked: list[list[int]] = []

    def offsets_for_times(self, partitions: list[Any], **options: Any) -> Any:
        self.asked.append([tp.offset for tp in partitions])
        return self.client.offsets_for_times(partitions, **options)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


class TestFollowing:
    def test_partitions_with_records_to_read_are_assigned_before_those_without(
        self, kafka_bootstrap: str, fresh_topic: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The tailing reader's fetch waits at the broker for fetch.wait.max.ms (100 ms) when
        none of its partitions has a record to give. Assigned at once, an empty partition and
        one with records, its first fetch sometimes left with the empty one alone: 3 of 16
        launches of `marshal-run` took 0.1 s longer to catch up after `settle`, and a bare
        consumer assigned the empty partition first, then the other, waited 0.1 s in 97 of 300
        tries, the other way round in none of 560 (docs/benchmarks.md, "Launch: the dataclasses'
        methods compiled once (2026-12-02)"). So the partitions with a record at the offset
        they are assigned go first, the others after them (`incremental_assign`); and every
        record is read."""
        ensure_coordination_topic(kafka_bootstrap, fresh_topic, 4, replication_factor=1)
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        for _ in range(3):
            producer.produce(fresh_topic, b"r", b"k", partition=2)
        assert producer.flush(30) == 0
        log = KafkaLog(kafka_bootstrap, fresh_topic, quick_start=True)
        try:
            ends = log.end_offsets(10.0)  # (init's record of the partition count is one of them)
            with_records = sorted(p for p, end in ends.items() if end > 0)
            assert 2 in with_records and len(with_records) < 4, ends
            spy = AssignSpy(log._lasting)
            log._lasting = spy  # type: ignore[assignment]
            # The starts and ends answered whatever the machine's load (unanswered in 1 s, they
            # are not ordered, by design: the test of the unanswered starts, below)
            monkeypatch.setattr(kafkalog, "STARTS_TIMEOUT_S", 30.0)
            log.settle(range(4))
            assert spy.calls == [
                ("assign", [(p, 0) for p in with_records]),
                ("incremental", [(p, 0) for p in range(4) if p not in with_records]),
            ], spy.calls
            assert_every_record_read(log, ends)
        finally:
            log.close()

    def test_a_reader_opened_without_quick_start_asks_no_ends_to_order_them(
        self, kafka_bootstrap: str, fresh_topic: str
    ) -> None:
        """The ordering is for the member's tailing reader after `settle`, on the launch's
        path; `marshal-admin`'s readers (opened without ``quick_start``) follow in one
        assignment, without the ends' round trip at each `follow`."""
        ensure_coordination_topic(kafka_bootstrap, fresh_topic, 4, replication_factor=1)
        log = KafkaLog(kafka_bootstrap, fresh_topic)
        try:
            queries = QuerySpy(log._offsets)
            log._offsets = queries  # type: ignore[assignment]
            spy = AssignSpy(log._consumer)
            log._consumer = spy  # type: ignore[assignment]
            log.follow(range(4), from_start=True)
            assert queries.asked == [[-2, -2, -2, -2]]  # the starts only
            assert [call for call, _ in spy.calls] == ["assign"]
        finally:
            log.close()

    def test_when_the_starts_went_unanswered_the_ends_are_not_asked(
        self, kafka_bootstrap: str, fresh_topic: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A start unanswered in `STARTS_TIMEOUT_S` (a partition's leader down) already cost
        the wait; the ends would be asked of the same leader and wait as long again. All are
        assigned at once, the unanswered at OFFSET_BEGINNING, as before the ordering."""
        ensure_coordination_topic(kafka_bootstrap, fresh_topic, 4, replication_factor=1)
        log = KafkaLog(kafka_bootstrap, fresh_topic, quick_start=True)
        try:
            queries = QuerySpy(log._offsets)
            log._offsets = queries  # type: ignore[assignment]
            spy = AssignSpy(log._lasting)
            log._lasting = spy  # type: ignore[assignment]
            monkeypatch.setattr(kafkalog, "STARTS_TIMEOUT_S", 1e-6)  # no answer in time
            log.settle(range(4))
            assert len(queries.asked) == 1
            assert spy.calls == [("assign", [(p, OFFSET_BEGINNING) for p in range(4)])]
        finally:
            log.close()

    def test_a_second_assignment_refused_falls_back_to_one(
        self, kafka_bootstrap: str, fresh_topic: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Should the second call be refused after the first was made, the reader is assigned
        all of them in one call, not left with a part and the log told it follows the rest."""
        ensure_coordination_topic(kafka_bootstrap, fresh_topic, 4, replication_factor=1)
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        producer.produce(fresh_topic, b"r", b"k", partition=2)
        assert producer.flush(30) == 0
        log = KafkaLog(kafka_bootstrap, fresh_topic, quick_start=True)
        try:
            ends = log.end_offsets(10.0)
            spy = AssignSpy(log._lasting, refuse_incremental=True)
            log._lasting = spy  # type: ignore[assignment]
            monkeypatch.setattr(kafkalog, "STARTS_TIMEOUT_S", 30.0)  # answered whatever the load
            log.settle(range(4))
            assert [call for call, _ in spy.calls] == ["assign", "incremental", "assign"]
            assert spy.calls[-1] == ("assign", [(p, 0) for p in range(4)])
            assert sorted(tp.partition for tp in spy.consumer.assignment()) == [0, 1, 2, 3]
            assert_every_record_read(log, ends)
        finally:
            log.close()


class ConsumeDroppedOnce:
    """The log's real consumer; ``drop_call``: the number of the `consume` call (counted from
    1, among those that returned records) whose records are dropped with an exception, as
    confluent-kafka does when a callback run during the call raised (the callback's own
    exception) or on a fatal error (a KafkaException): librdkafka has handed them over and
    moved past them."""

    def __init__(
        self, consumer: object, drop_call: int, error: Exception, refused_assigns: int = 0
    ) -> None:
        self.consumer = consumer
        self.drop_call = drop_call
        self.error = error
        self.refused_assigns = refused_assigns  # the first assignments after the drop refused
        self.calls_with_records = 0
        self.dropped: list[int] = []

    def assign(self, partitions: list[Any]) -> None:
        if self.dropped and self.refused_assigns > 0:
            self.refused_assigns -= 1
            raise KafkaException(KafkaError(KafkaError._STATE, "assignment refused by the test"))
        self.consumer.assign(partitions)  # type: ignore[attr-defined]

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        got: list[Any] = self.consumer.consume(num_messages=num_messages, timeout=timeout)  # type: ignore[attr-defined]
        if got:
            self.calls_with_records += 1
            if self.calls_with_records == self.drop_call:
                self.dropped = [m.offset() for m in got if m.error() is None]
                raise self.error
        return got

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumer, name)


def one_partition_log(bootstrap: str, topic: str, records: int) -> KafkaLog:
    """A log of one partition holding ``records`` records (and init's). (The tests follow it
    at once before they poll: their first poll then waits for the first fetch, which hands a
    record over alone, and the batch's rest comes in a second call.)"""
    ensure_coordination_topic(bootstrap, topic, 1, replication_factor=1)
    producer = Producer({"bootstrap.servers": bootstrap})
    for _ in range(records):
        producer.produce(topic, b"r", b"k", partition=0)
    assert producer.flush(30) == 0
    return KafkaLog(bootstrap, topic)


class TestPolling:
    @pytest.mark.parametrize(
        ("drop_call", "error"),
        [
            (1, ValueError("raised by a callback")),
            (2, ValueError("raised by a callback")),
            (2, KafkaException(KafkaError(KafkaError._FATAL, "fatal, said the test"))),
        ],
    )
    def test_records_dropped_with_an_error_are_read_again(
        self, kafka_bootstrap: str, fresh_topic: str, drop_call: int, error: Exception
    ) -> None:
        """What confluent-kafka drops with an exception from ``consume``, librdkafka had moved
        past: the reading went on after them (a read error is logged and the poll after it
        goes on), and the fold never saw them, a silent gap; an exception other than a
        KafkaException also ended the supervisor's reader thread. The reader goes back to
        after the last record it returned, and the error is a LogError: every record is read,
        once, in order. (Call 2: the batch's rest, asked after waiting for its first record,
        which the call before handed over.)"""
        log = one_partition_log(kafka_bootstrap, fresh_topic, 20)
        try:
            ends = log.end_offsets(10.0)
            log.follow([0], from_start=True)
            spy = ConsumeDroppedOnce(log._consumer, drop_call, error)
            log._consumer = spy  # type: ignore[assignment]
            read: list[int] = []
            errors: list[str] = []
            deadline = time.monotonic() + 30
            while len(read) < ends[0] and time.monotonic() < deadline:
                try:
                    read.extend(r.offset for r in log.poll(10.0))
                except LogError as exc:
                    errors.append(str(exc))
            assert spy.dropped  # the records were dropped
            assert len(errors) == 1, errors
            assert errors[0].startswith(f"reading {fresh_topic}: "), errors
            assert read == list(range(ends[0]))
        finally:
            log.close()

    def test_until_it_is_put_back_the_reader_reads_nothing_past_what_was_dropped(
        self, kafka_bootstrap: str, fresh_topic: str
    ) -> None:
        """Going back refused, each poll tries again and raises, and reads nothing: the
        records after the dropped ones never come before them."""
        log = one_partition_log(kafka_bootstrap, fresh_topic, 20)
        try:
            ends = log.end_offsets(10.0)
            log.follow([0], from_start=True)
            spy = ConsumeDroppedOnce(log._consumer, 1, ValueError("raised"), refused_assigns=2)
            log._consumer = spy  # type: ignore[assignment]
            errors: list[str] = []
            for _ in range(2):  # the drop, then a poll that tries again: both refused
                with pytest.raises(LogError) as info:
                    log.poll(10.0)
                errors.append(str(info.value))
            assert all("could not go back" in e for e in errors), errors
            read: list[int] = []
            deadline = time.monotonic() + 30
            while len(read) < ends[0] and time.monotonic() < deadline:
                read.extend(r.offset for r in log.poll(10.0))
            assert read == list(range(ends[0]))
        finally:
            log.close()


class PollCounter:
    """A real client, its `poll` calls counted, everything else passed through."""

    def __init__(self, client: object) -> None:
        self.client = client
        self.polls = 0

    def poll(self, timeout: float = -1) -> Any:
        self.polls += 1
        return self.client.poll(timeout)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def test_a_failed_query_after_the_open_polls_neither_the_reader_nor_the_producer(
    kafka_bootstrap: str, fresh_topic: str
) -> None:
    """Explaining a failed query (the partition count, asked from a background thread) serves
    the error callbacks of the query client only: the reader's thread polls the reader, and the
    supervisor's loop the producer, whose delivery callbacks a poll runs (on this thread, an
    acknowledgement added while the loop took them was lost)."""
    ensure_coordination_topic(kafka_bootstrap, fresh_topic, 1, replication_factor=1)
    log = KafkaLog(kafka_bootstrap, fresh_topic)
    try:
        producer, reader = PollCounter(log._producer), PollCounter(log._consumer)
        log._producer, log._consumer = producer, reader  # type: ignore[assignment]
        error = log._unreachable("a query failed", "")
        assert "a query failed" in str(error)
        assert (producer.polls, reader.polls) == (0, 0)
    finally:
        log.close()
