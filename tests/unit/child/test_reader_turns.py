"""The host reader's loop (`child.reader.Reader.turn`) against a stand-in consumer and children
on socket pairs: slow children, children that go, starts past the partition's end."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from marshal_workers.child import reader as reader_module
from marshal_workers.child.feedlanes import Recent
from marshal_workers.child.reader import Outlet, Reader
from marshal_workers.common.errors import ConfigError
from marshal_workers.ipc import feedwire
from marshal_workers.ipc.messages import ChildSpec
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.slicing import Ordering, Slice


class Message:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def error(self) -> None:
        return None

    def offset(self) -> int:
        return self._offset

    def key(self) -> None:
        return None

    def value(self) -> bytes:
        return b"v" * 100

    def timestamp(self) -> tuple[int, int]:
        return 1, 0

    def headers(self) -> None:
        return None


class Partition:
    """A partition of ``end`` records from ``low``, read 100 at a time."""

    def __init__(self, end: int, low: int = 0) -> None:
        self.end, self.low, self.pos, self.lookups = end, low, 0, 0

    def assign(self, tps: list[Any]) -> None:
        self.pos = tps[0].offset if self.low <= tps[0].offset <= self.end else self.low

    def consume(self, n: int, timeout: float) -> list[Message]:
        out = [Message(o) for o in range(self.pos, min(self.end, self.pos + 100))]
        self.pos += len(out)
        return out

    def get_watermark_offsets(self, tp: Any, timeout: float = 0, cached: bool = True) -> Any:
        if not cached:
            self.lookups += 1
        return self.low, self.end


class Child:
    """A child's end of its feed: what it took."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.decoder, self.offsets = sock, feedwire.Decoder(), list[int]()
        self.started: int | None = None

    def take(self) -> None:
        while True:
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                return
            if not data:
                return
            for msg in self.decoder.feed(data):
                if isinstance(msg, feedwire.Attached):
                    self.started = msg.start
                elif isinstance(msg, feedwire.Batch):
                    self.offsets.extend(row[0] for row in msg.rows)


SPEC = ChildSpec(
    handler="h:h",
    mode=Mode.ALO,
    bootstrap_servers="-",
    group_id="g",
    client_id="c",
    instance_id="i",
    topic="t",
    partition=0,
    start_offset=0,
    fencing_token=1,
)


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small outlets and no waiting, so a few thousand records exercise every path."""
    monkeypatch.setattr(reader_module, "OUTLET_BYTES", 20_000)
    monkeypatch.setattr(reader_module, "POLL_S", 0.0)


@pytest.fixture
def reader(small: None) -> Iterator[Reader]:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("")  # an autobound abstract name
    listener.listen(4)
    made = Reader(SPEC, listener, structlog.get_logger("test"))
    made.recent = Recent(60_000)  # far fewer records than the partition
    yield made
    listener.close()


def attach(reader: Reader, index: int, start: int, reset: str = "earliest") -> Child:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs.setblocking(False)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    outlet = Outlet(ours)
    reader.outlets[ours] = outlet
    reader._attach(outlet, feedwire.Attach(Slice(Ordering.UNORDERED, 2, index), start, reset))
    return Child(theirs)


def test_a_slow_child_holds_nobody_back_for_good(reader: Reader) -> None:
    """One child takes nothing for a while, so what is kept fills with records it still needs
    and the reader waits; then it takes everything: the reader reads the partition to its end
    and each child has its stripe once, in order. (It waited for good: what was kept was
    trimmed only when records were added, and none were added while it waited.)"""
    reader.consumer = partition = Partition(3000)
    fast, slow = attach(reader, 0, 0), attach(reader, 1, 0)
    for turn in range(3000):
        assert reader.turn()
        fast.take()
        if turn >= 200:
            slow.take()
    assert partition.pos == 3000 and reader.reading == 3000
    assert fast.offsets == list(range(0, 3000, 2))
    assert slow.offsets == list(range(1, 3000, 2))


def test_a_slow_child_that_goes_holds_nobody_back(reader: Reader) -> None:
    """The slow child goes (its socket closes) while the reader waits for it: the reader reads
    on to the end for the other."""
    reader.consumer = Partition(3000)
    fast, slow = attach(reader, 0, 0), attach(reader, 1, 0)
    for turn in range(3000):
        assert reader.turn()
        fast.take()
        if turn == 200:
            slow.sock.close()
    assert reader.reading == 3000 and fast.offsets == list(range(0, 3000, 2))


@pytest.mark.parametrize(("reset", "start"), [("earliest", 0), ("latest", 500)])
def test_a_start_past_the_end_goes_where_the_childs_policy_says(
    reader: Reader, reset: str, start: int
) -> None:
    """A start past the partition's end (truncated, recreated): the child starts where its
    reset policy says, as its own consumer would have, and gets its stripe from there. (Taken
    as given, the child waited for records up to its start and skipped what came before.)"""
    reader.consumer = Partition(500)
    child = attach(reader, 0, 1000, reset)
    for _ in range(20):
        assert reader.turn()
        child.take()
    assert child.started == start
    assert child.offsets == list(range(start, 500, 2))


def test_a_start_within_what_the_reader_knows_is_not_looked_up(reader: Reader) -> None:
    """Once the reader knows the partition's end, a child's start at or below it is taken as
    given: no round trip to the broker (one per attach waited behind the fetch the broker
    held: 64 children attached over 16 s)."""
    reader.consumer = partition = Partition(500)
    first = attach(reader, 0, 0)
    assert reader.turn()
    looked = partition.lookups
    second = attach(reader, 1, 100)
    for _ in range(10):
        assert reader.turn()
    first.take()
    second.take()
    assert partition.lookups == looked
    assert second.started == 100 and second.offsets == list(range(101, 500, 2))


def test_a_consumer_kafka_refuses_fails_the_attach_in_one_line(
    reader: Reader, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Settings the client refuses when the reader builds its consumer: the attaching child is
    told why (a `Failed` frame: its feed is lost with that reason, one line) and the reader
    goes on. (It raised out of the reader: a bare traceback on the member's stderr, and the
    child learnt only that the feed closed.)"""

    def refused(spec: ChildSpec) -> Any:
        raise ConfigError("Kafka refuses the data consumer's settings: no SASL mechanism")

    monkeypatch.setattr(reader_module, "reader_consumer", refused)
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    outlet = Outlet(ours)
    reader.outlets[ours] = outlet
    reader._attach(outlet, feedwire.Attach(Slice(Ordering.UNORDERED, 2, 0), 0, "earliest"))
    assert ours not in reader.outlets  # dropped, the reader still runs
    got = feedwire.Decoder().feed(theirs.recv(65536))
    assert len(got) == 1 and isinstance(got[0], feedwire.Failed)
    assert "Kafka refuses the data consumer's settings" in got[0].reason
