"""The `CoordinationLog` contract, run against MemoryLog and against KafkaLog on a real broker.

Both implementations must behave the same for everything the reader and the supervisor rely
on: acknowledged appends with increasing offsets and log times, a tail of every partition
(or of the followed ones) from the beginning in offset order, end offsets, and the reader's
barrier on its own record.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.interface import CoordinationLog
from marshal_workers.log.kafkalog import KafkaLog
from marshal_workers.log.memlog import MemoryLog, MemoryTopic
from marshal_workers.log.topicadmin import admin_client, coordination_topic_config, delete_topic
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.rationalizer import RationalizerConfig
from marshal_workers.protocol.wire import (
    Appended,
    ClaimingPartition,
    CoordRecord,
    Heartbeat,
    Message,
    coordination_partition,
    encode,
    record_key,
)

PARTITIONS = 3
HB_MS = 60_000
TIMEOUT_S = 15.0

Opener = Callable[..., CoordinationLog]  # keyword: quick_start (KafkaLog's; memory ignores it)
Deleter = Callable[[int, int], None]  # DeleteRecords: (partition, before offset)


def _memory_opener() -> Iterator[tuple[Opener, Deleter]]:
    ticks = itertools.count(1_700_000_000_000, 7)
    topic = MemoryTopic(PARTITIONS, lambda: next(ticks))
    yield (lambda **_: MemoryLog(topic)), topic.delete_records


def _kafka_opener(bootstrap: str) -> Iterator[tuple[Opener, Deleter]]:
    name = f"__marshal-contract-{uuid.uuid4().hex[:10]}"
    # Created as init does but empty: init also records the partition count on partition 0.
    topic = NewTopic(name, PARTITIONS, 1, config=coordination_topic_config(1))
    admin = admin_client(bootstrap)
    admin.create_topics([topic])[name].result(30)
    deadline = time.monotonic() + 30  # created is not yet visible: metadata catches up
    while True:
        meta = admin.list_topics(name, timeout=5).topics.get(name)
        if meta is not None and meta.error is None and len(meta.partitions) == PARTITIONS:
            break
        assert time.monotonic() < deadline, f"{name} not visible in metadata within 30 s"
        time.sleep(0.1)

    def delete_before(partition: int, offset: int) -> None:
        # A compact-only topic refuses DeleteRecords (POLICY_VIOLATION): it takes them once its
        # policy also deletes (a member warns of that policy and runs)
        delete_too(admin, name)
        futures = admin.delete_records([TopicPartition(name, partition, offset)])
        for future in futures.values():
            future.result(30)

    def opener(*, quick_start: bool = False) -> CoordinationLog:
        return KafkaLog(bootstrap, name, client_id="contract-test", quick_start=quick_start)

    yield opener, delete_before
    delete_topic(admin_client(bootstrap), bootstrap, name)


def delete_too(admin: AdminClient, topic: str) -> None:
    """Set ``topic``'s cleanup.policy to compact,delete (nothing expires: retention.ms -1)."""
    entries = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in (("cleanup.policy", "compact,delete"), ("retention.ms", "-1"))
    ]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


class Handles:
    """Opens handles on one topic (call it), and deletes its records as DeleteRecords does."""

    def __init__(self, opener: Opener, deleter: Deleter) -> None:
        self.opener, self.deleter = opener, deleter
        self.opened: list[CoordinationLog] = []

    def __call__(self, *, quick_start: bool = False) -> CoordinationLog:
        handle = self.opener(quick_start=quick_start)
        self.opened.append(handle)
        return handle

    def delete_before(self, partition: int, offset: int) -> None:
        """Delete every record of ``partition`` below ``offset`` (the log's start moves)."""
        self.deleter(partition, offset)


@pytest.fixture(params=["memory", pytest.param("kafka", marks=pytest.mark.kafka)])
def open_log(request: pytest.FixtureRequest) -> Iterator[Handles]:
    """Opens handles on one fresh, empty coordination topic of the implementation under test."""
    if request.param == "memory":
        source = _memory_opener()
    else:
        source = _kafka_opener(request.getfixturevalue("kafka_bootstrap"))
    handles = Handles(*next(source))
    yield handles
    for handle in handles.opened:
        handle.close()
    next(source, None)


def poll_until(log: CoordinationLog, count: int, timeout_s: float = TIMEOUT_S) -> list[CoordRecord]:
    """Poll until ``count`` records arrived (or fail after ``timeout_s``)."""
    out: list[CoordRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count:
        assert time.monotonic() < deadline, f"only {len(out)} of {count} records arrived"
        out.extend(log.poll(0.5))
    return out


def append_msg(log: CoordinationLog, msg: Message) -> Appended:
    """Append a message to its home partition (spec partitioner)."""
    home = coordination_partition(msg.topic, msg.partition, log.num_partitions)
    return log.append(home, record_key(msg), encode(msg), TIMEOUT_S)


class TestAppend:
    def test_offsets_increase_per_partition_with_log_times(self, open_log: Opener) -> None:
        """Appends get consecutive offsets from 0 per partition and non-decreasing log times."""
        log = open_log()
        assert log.num_partitions == PARTITIONS
        results = {
            p: [log.append(p, b"k", f"v{i}".encode(), TIMEOUT_S) for i in range(3)]
            for p in range(PARTITIONS)
        }
        for p, appended in results.items():
            assert [a.partition for a in appended] == [p, p, p]
            assert [a.offset for a in appended] == [0, 1, 2]
            times = [a.log_time for a in appended]
            assert times == sorted(times)
            assert times[0] > 1_600_000_000_000

    def test_end_offsets_follow_appends(self, open_log: Opener) -> None:
        """end_offsets is 0 on an empty topic and the next offset after appends."""
        log = open_log()
        assert log.end_offsets(TIMEOUT_S) == dict.fromkeys(range(PARTITIONS), 0)
        for _ in range(4):
            log.append(1, b"k", b"v", TIMEOUT_S)
        log.append(2, b"k", b"v", TIMEOUT_S)
        assert log.end_offsets(TIMEOUT_S) == {0: 0, 1: 4, 2: 1}


class TestTail:
    def test_poll_reads_every_partition_in_offset_order(self, open_log: Opener) -> None:
        """A new handle reads all records from the beginning, each partition in offset order."""
        writer = open_log()
        appended = [
            writer.append(i % PARTITIONS, f"key{i}".encode(), f"value{i}".encode(), TIMEOUT_S)
            for i in range(12)
        ]
        records = poll_until(open_log(), 12)
        assert len(records) == 12
        for p in range(PARTITIONS):
            mine = [r for r in records if r.partition == p]
            assert [r.offset for r in mine] == [0, 1, 2, 3]
        by_position = {(r.partition, r.offset): r for r in records}
        for i, a in enumerate(appended):
            rec = by_position[(a.partition, a.offset)]
            assert rec.key == f"key{i}".encode()
            assert rec.value == f"value{i}".encode()
            assert rec.timestamp_ms == a.log_time

    def test_second_handle_sees_later_appends(self, open_log: Opener) -> None:
        """A handle already tailing sees records another handle appends afterwards."""
        writer, tail = open_log(), open_log()
        assert tail.poll(0.5) == []
        a = writer.append(0, b"k", b"late", TIMEOUT_S)
        records = poll_until(tail, 1)
        assert [(r.partition, r.offset, r.value) for r in records] == [(0, a.offset, b"late")]

    def test_poll_waits_at_most_its_timeout(self, open_log: Opener) -> None:
        """poll on a caught-up handle returns an empty list after about the timeout."""
        log = open_log()
        log.poll(0.5)
        start = time.monotonic()
        assert log.poll(0.3) == []
        assert time.monotonic() - start < 3.0


class TestFollow:
    def test_a_new_handle_follows_every_partition(self, open_log: Opener) -> None:
        """A handle follows every partition until it chooses fewer."""
        assert open_log().followed == frozenset(range(PARTITIONS))

    def test_poll_and_end_offsets_cover_only_the_followed(self, open_log: Opener) -> None:
        """Following one partition: poll returns its records only, end_offsets names it only."""
        writer = open_log()
        for p in range(PARTITIONS):
            writer.append(p, b"k", f"v{p}".encode(), TIMEOUT_S)
            writer.append(p, b"k", f"w{p}".encode(), TIMEOUT_S)
        reader = open_log()
        reader.follow([1])
        assert reader.followed == frozenset({1})
        assert reader.end_offsets(TIMEOUT_S) == {1: 2}
        records = poll_until(reader, 2)
        assert [(r.partition, r.offset) for r in records] == [(1, 0), (1, 1)]
        writer.append(0, b"k", b"later", TIMEOUT_S)
        writer.append(1, b"k", b"later", TIMEOUT_S)
        later = poll_until(reader, 1)
        assert [(r.partition, r.offset) for r in later] == [(1, 2)]
        assert reader.poll(0.5) == []

    def test_a_kept_partition_goes_on_and_a_new_one_starts(self, open_log: Opener) -> None:
        """Following more: a partition still followed goes on where it was (no record twice),
        a new one is read from its first record, one dropped is read no more."""
        writer = open_log()
        for p in range(PARTITIONS):
            writer.append(p, b"k", b"v", TIMEOUT_S)
        reader = open_log()
        reader.follow([0, 1])
        assert sorted((r.partition, r.offset) for r in poll_until(reader, 2)) == [(0, 0), (1, 0)]
        reader.follow([1, 2])
        writer.append(0, b"k", b"v", TIMEOUT_S)
        writer.append(1, b"k", b"v", TIMEOUT_S)
        got = sorted((r.partition, r.offset) for r in poll_until(reader, 2))
        assert got == [(1, 1), (2, 0)]
        assert reader.poll(0.5) == []

    def test_a_kept_partition_with_nothing_new_is_not_read_again(self, open_log: Opener) -> None:
        """Kept through several follows with nothing new to read, a partition stays where it
        was. (librdkafka knows a position only once it returned a record since the last
        assignment: kept through one follow with nothing new, the partition had none at the
        next, was taken for a new one and read again from its first record, which the fold
        refuses as malformed, "offset behind". A member locating its group follows in steps,
        and so do `marshal-admin`'s moves.)"""
        writer = open_log()
        for p in range(PARTITIONS):
            writer.append(p, b"k", b"v", TIMEOUT_S)
        reader = open_log()
        reader.follow([0])
        assert [(r.partition, r.offset) for r in poll_until(reader, 1)] == [(0, 0)]
        for followed in ([0, 1], [0, 1, 2]):
            reader.follow(followed)
            read: list[tuple[int, int]] = []
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                read.extend((r.partition, r.offset) for r in reader.poll(0.3))
            assert read == [(followed[-1], 0)], followed

    def test_from_start_then_more_at_once_reads_it_all_again(self, open_log: Opener) -> None:
        """Followed from the start and, at once, followed with one more: the first is read again
        from its first record. (librdkafka stops a partition's fetcher after `assign` returns:
        until then its position is the one before, and a follow that kept it there would skip
        its records, silently.)"""
        writer = open_log()
        for _ in range(3):
            writer.append(0, b"k", b"v", TIMEOUT_S)
        writer.append(1, b"k", b"v", TIMEOUT_S)
        reader = open_log()
        reader.follow([0])
        assert [r.offset for r in poll_until(reader, 3)] == [0, 1, 2]
        reader.follow([0], from_start=True)
        reader.follow([0, 1])
        got = sorted((r.partition, r.offset) for r in poll_until(reader, 4))
        assert got == [(0, 0), (0, 1), (0, 2), (1, 0)]
        assert reader.poll(0.5) == []

    def test_from_start_reads_every_followed_partition_again(self, open_log: Opener) -> None:
        """follow(from_start=True) reads each followed partition again from its first record."""
        writer = open_log()
        for p in range(PARTITIONS):
            writer.append(p, b"k", b"v", TIMEOUT_S)
        reader = open_log()
        assert len(poll_until(reader, PARTITIONS)) == PARTITIONS
        reader.follow([0, 2], from_start=True)
        got = sorted((r.partition, r.offset) for r in poll_until(reader, 2))
        assert got == [(0, 0), (2, 0)]
        assert reader.poll(0.5) == []

    @pytest.mark.parametrize("quick_start", [False, True])
    def test_settle_reads_the_settled_partitions_again_and_what_comes(
        self, open_log: Opener, quick_start: bool
    ) -> None:
        """settle (after a follow, as a member that located its group; opened quick_start or
        not) reads each settled partition from its first record, then what is appended to
        it, and nothing of the others."""
        writer = open_log()
        for p in range(PARTITIONS):
            writer.append(p, b"k", b"v", TIMEOUT_S)
        reader = open_log(quick_start=quick_start)
        reader.follow([0])
        assert [(r.partition, r.offset) for r in poll_until(reader, 1)] == [(0, 0)]
        reader.settle([0, 2])
        assert reader.followed == frozenset({0, 2})
        assert reader.end_offsets(TIMEOUT_S) == {0: 1, 2: 1}
        got = sorted((r.partition, r.offset) for r in poll_until(reader, 2))
        assert got == [(0, 0), (2, 0)]
        for p in range(PARTITIONS):
            writer.append(p, b"k", b"later", TIMEOUT_S)
        got = sorted((r.partition, r.offset) for r in poll_until(reader, 2))
        assert got == [(0, 1), (2, 1)]
        reader.follow([1, 2])  # and it follows on as before
        assert sorted((r.partition, r.offset) for r in poll_until(reader, 2)) == [(1, 0), (1, 1)]
        assert reader.poll(0.5) == []

    def test_a_partition_the_topic_lacks_is_refused(self, open_log: Opener) -> None:
        """Following a partition the topic does not have is a ValueError; nothing changes."""
        log = open_log()
        with pytest.raises(ValueError, match="does not exist"):
            log.follow([0, PARTITIONS])
        assert log.followed == frozenset(range(PARTITIONS))

    def test_a_folded_log_keeps_worlds_for_the_followed_only(self, open_log: Opener) -> None:
        """FoldedLog.follow keeps the worlds of kept partitions, adds new ones, drops others."""
        writer = open_log()
        for part in range(6):
            append_msg(writer, _claim("A", part))
        reader = FoldedLog(open_log(), RationalizerConfig(HB_MS, num_partitions=PARTITIONS))
        reader.follow([0])
        reader.catch_up(TIMEOUT_S)
        kept = reader.worlds[0]
        ends = writer.end_offsets(TIMEOUT_S)
        assert kept.next_offset == ends[0]
        reader.follow([0, 2])
        assert sorted(reader.worlds) == [0, 2]
        assert reader.worlds[0] is kept
        reader.catch_up(TIMEOUT_S)
        assert {p: w.next_offset for p, w in reader.worlds.items()} == {0: ends[0], 2: ends[2]}


def _claim(client: str, part: int) -> ClaimingPartition:
    return ClaimingPartition(0, f"{client}-1", client, "g", "orders", part)


class TestReader:
    def _reader(self, log: CoordinationLog) -> FoldedLog:
        return FoldedLog(log, RationalizerConfig(HB_MS, num_partitions=log.num_partitions))

    def test_wait_for_returns_the_verdict_on_own_record(self, open_log: Opener) -> None:
        """wait_for gives each writer the verdict on its record: first claim wins, rival loses."""
        a_log, b_log = open_log(), open_log()
        a_reader, b_reader = self._reader(a_log), self._reader(b_log)
        a_claim = append_msg(a_log, _claim("A", 0))
        verdict, _ = a_reader.wait_for(a_claim, TIMEOUT_S)
        assert isinstance(verdict, ev.ClaimGranted)
        assert verdict.token == a_claim.offset
        b_claim = append_msg(b_log, _claim("B", 0))
        rival, _ = b_reader.wait_for(b_claim, TIMEOUT_S)
        assert isinstance(rival, ev.ClaimRejected)
        assert rival.holder_client == "A"
        beat = append_msg(a_log, Heartbeat(0, "A-1", "A", "g", "orders", 0, 17))
        accepted, folded = a_reader.wait_for(beat, TIMEOUT_S)
        assert isinstance(accepted, ev.HeartbeatAccepted)
        assert accepted.offset == 17
        assert any(isinstance(e, ev.ClaimRejected) for e in folded)

    def test_a_partition_emptied_by_delete_records_is_caught_up(self, open_log: Handles) -> None:
        """DeleteRecords up to a partition's end leaves it empty (its start is its end, > 0): a
        reader is caught up on it at once (it waited for a record that would never come), and
        folds what is appended later, after the gap."""
        writer = open_log()
        for part in range(6):
            append_msg(writer, _claim("A", part))
        ends = writer.end_offsets(TIMEOUT_S)
        emptied = max(ends, key=lambda p: ends[p])
        open_log.delete_before(emptied, ends[emptied])
        reader = self._reader(open_log())
        started = time.monotonic()
        reader.catch_up(5.0)
        assert time.monotonic() - started < 4.0
        assert reader.worlds[emptied].next_offset == 0  # nothing folded there
        later = writer.append(emptied, b"k", b"v", TIMEOUT_S)
        verdict, _ = reader.wait_for(later, TIMEOUT_S)
        assert verdict.coord_offset == ends[emptied]
        assert reader.worlds[emptied].gap_seen

    def test_catch_up_folds_everything_written_before(self, open_log: Opener) -> None:
        """catch_up folds every record up to the end offsets it started with."""
        writer = open_log()
        for part in range(6):
            append_msg(writer, _claim("A", part))
        append_msg(writer, _claim("B", 0))
        reader = self._reader(open_log())
        events: list[ev.Event] = []
        assert reader.catch_up(TIMEOUT_S, on_event=events.append) == 7
        assert len(events) == 7
        assert sum(isinstance(e, ev.ClaimGranted) for e in events) == 6
        assert sum(isinstance(e, ev.ClaimRejected) for e in events) == 1
        ends = writer.end_offsets(TIMEOUT_S)
        assert {p: w.next_offset for p, w in reader.worlds.items()} == ends
