"""A host's reader of a sliced partition and the slice children it feeds, on a real broker with
real processes; the test plays the supervisor (`supervisor.feeds.HostFeeds` starts the reader,
`childrun` the children), as `test_child` does for a child with its own consumer."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import structlog
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from marshal_workers.common.ledgerfile import find_duplicates, read_ledger
from marshal_workers.ipc.exits import EXIT_KAFKA
from marshal_workers.ipc.messages import GrantRequest, Progress, Started, Stop, Stopped
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.slicing import Ordering, Slice
from marshal_workers.supervisor.feeds import HostFeeds
from tests.integration.childrun import (
    MP,
    PARTITION,
    Supervised,
    gone,
    grant_all,
    make_spec,
    produce,
    wait_for,
)

pytestmark = pytest.mark.kafka

COUNT = 4


@pytest.fixture
def feeds() -> Iterator[HostFeeds]:
    """A supervisor's readers (spawned, as the tests' children are); killed at the end."""
    made = HostFeeds(MP, structlog.get_logger("test"))
    yield made
    made.close()


def sliced(bootstrap: str, topic: str, index: int, **changes: object) -> object:
    part = Slice(Ordering.UNORDERED, COUNT, index)
    return make_spec(bootstrap, topic, slice=part, **changes)


def handled(ledger_dir: Path, index: int) -> list[int]:
    """The offsets the child of stripe ``index`` handled, in the order it handled them."""
    if not ledger_dir.exists():
        return []
    return [r.offset for r in read_ledger(ledger_dir) if r.offset % COUNT == index]


class TestFed:
    def test_each_child_gets_its_slice_once_in_order_from_its_own_start(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        feeds: HostFeeds,
    ) -> None:
        """Two stripes of one partition on one host, from different starts (the later child
        makes the reader go back): each handles its stripe's records from its start, once, in
        offset order, and reports its position past the other stripes' records; a third that
        starts within what the reader read last is served from it."""
        produce(kafka_bootstrap, topic, {PARTITION: 200})
        first = spawn(feeds.fed(sliced(kafka_bootstrap, topic, 1, start_offset=100)))
        assert first.expect(Started).position == 100
        while first.expect(Progress).next_offset < 200:
            pass
        second = spawn(feeds.fed(sliced(kafka_bootstrap, topic, 2, start_offset=10)))
        assert second.expect(Started).position == 10
        while second.expect(Progress).next_offset < 200:
            pass
        assert handled(ledger_dir, 1) == list(range(101, 200, COUNT))
        assert handled(ledger_dir, 2) == list(range(10, 200, COUNT))
        assert not find_duplicates(read_ledger(ledger_dir))
        assert len(feeds.readers) == 1
        produce(kafka_bootstrap, topic, {PARTITION: 40})  # offsets 200 to 239: both go on
        while first.expect(Progress).next_offset < 240:
            pass
        while second.expect(Progress).next_offset < 240:
            pass
        assert handled(ledger_dir, 1)[-1] == 237 and handled(ledger_dir, 2)[-1] == 238
        # a third, within what the reader read last: served from it, the reader stays put
        third = spawn(feeds.fed(sliced(kafka_bootstrap, topic, 3, start_offset=150)))
        while third.expect(Progress).next_offset < 240:
            pass
        assert handled(ledger_dir, 3) == list(range(151, 240, COUNT))
        for child in (first, second, third):
            child.handle.send(Stop("revoke"))
            assert child.expect(Stopped).next_offset == 240
            assert child.wait_exit() == 0

    def test_a_killed_reader_ends_its_children_as_a_lost_consumer_would(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        feeds: HostFeeds,
    ) -> None:
        """SIGKILL the reader: its child ends with the Kafka exit code (what it handled
        reported), and the next child of the claim gets a fresh reader and goes on from the
        position without a gap."""
        produce(kafka_bootstrap, topic, {PARTITION: 100})
        spec = feeds.fed(sliced(kafka_bootstrap, topic, 3))
        child = spawn(spec)
        while child.expect(Progress).next_offset < 100:
            pass
        (reader,) = feeds.readers.values()
        pid = reader.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert child.wait_exit() == EXIT_KAFKA
        feeds.child_ended(spec, EXIT_KAFKA)
        assert not feeds.readers
        position = max(p.next_offset for p in child.of(Progress))
        produce(kafka_bootstrap, topic, {PARTITION: 20})
        again = spawn(feeds.fed(replace(spec, start_offset=position)))
        while again.expect(Progress).next_offset < 120:
            pass
        assert handled(ledger_dir, 3) == list(range(3, 120, COUNT))
        assert gone(pid)

    def test_an_amo_child_whose_reader_dies_hands_on_the_runs_it_was_granted(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        feeds: HostFeeds,
    ) -> None:
        """AMO, SIGKILL the reader while the child awaits a grant with a run asked ahead:
        both are granted (the log reserved them), and the child hands both on before it ends
        with the Kafka exit code. It ended at its next fetch with a granted run not handled:
        every slice child of the partition lost its reserved run, reported as a crash's (a
        review: 154 of 3,000 records)."""
        produce(kafka_bootstrap, topic, {PARTITION: 400})  # 100 records of the slice
        spec = feeds.fed(sliced(kafka_bootstrap, topic, 1, mode=Mode.AMO))
        child = spawn(spec)
        grant_all(child, lambda: len(handled(ledger_dir, 1)) >= 30)

        def waiting() -> list[GrantRequest]:
            return [r for r in child.of(GrantRequest) if r.request_id not in child.granted]

        wait_for(lambda: bool(waiting()), "a request not granted yet")
        time.sleep(0.3)  # (the child asks one run ahead of the one it awaits)
        (reader,) = feeds.readers.values()
        assert reader.pid is not None
        os.kill(reader.pid, signal.SIGKILL)
        time.sleep(1.0)  # the feed is closed before the answers come
        grant_all(child, lambda: False)  # every request granted, until the child ends
        assert child.wait_exit() == EXIT_KAFKA
        feeds.child_ended(spec, EXIT_KAFKA)
        granted_end = max(r.end for r in child.of(GrantRequest) if r.request_id in child.granted)
        assert granted_end > 4 * 30
        assert handled(ledger_dir, 1) == list(range(1, granted_end, COUNT))

    def test_a_frozen_reader_is_noticed_by_its_children(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        feeds: HostFeeds,
    ) -> None:
        """SIGSTOP the reader: its child hears nothing and ends with the Kafka exit code
        within its silence limit, so the supervisor restarts it (and kills the reader)."""
        produce(kafka_bootstrap, topic, {PARTITION: 10})
        spec = feeds.fed(sliced(kafka_bootstrap, topic, 0, feed_silence_s=2.0))
        child = spawn(spec)
        while child.expect(Progress).next_offset < 10:
            pass
        (reader,) = feeds.readers.values()
        pid = reader.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        started = time.monotonic()
        assert child.wait_exit(30) == EXIT_KAFKA
        assert time.monotonic() - started >= 2
        feeds.child_ended(spec, EXIT_KAFKA)  # SIGKILL ends a stopped process too
        wait_for(lambda: gone(pid), "the reader killed")


class TestStartsOutOfRange:
    @pytest.mark.parametrize("reset", ["latest", "earliest"])
    def test_a_start_below_the_log_moves_only_its_own_child(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        spawn: Callable[..., Supervised],
        feeds: HostFeeds,
        reset: str,
    ) -> None:
        """One stripe's start is below the log's start (retention removed it), another's is in
        the log: the first gets its records from the log's start, the second every record of
        its stripe from its own start. (With one consumer for both, the first's start sent the
        consumer to the log's end under ``latest``, and the second reported past records it
        never got.)"""
        produce(kafka_bootstrap, topic, {PARTITION: 100})
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        gone_below = TopicPartition(topic, PARTITION, 50)
        admin.delete_records([gone_below])[gone_below].result(15)
        early = spawn(
            feeds.fed(sliced(kafka_bootstrap, topic, 0, start_offset=10, auto_offset_reset=reset))
        )
        assert early.expect(Started).position == 10
        later = spawn(
            feeds.fed(sliced(kafka_bootstrap, topic, 1, start_offset=60, auto_offset_reset=reset))
        )
        assert later.expect(Started).position == 60
        while later.expect(Progress).next_offset < 100:
            pass
        assert handled(ledger_dir, 1) == list(range(61, 100, COUNT))
        while early.expect(Progress).next_offset < 100:
            pass
        assert handled(ledger_dir, 0) == list(range(52, 100, COUNT))
