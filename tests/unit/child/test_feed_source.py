"""A slice child's feed (`child.feedsource`) against a scripted reader on a local socket, and
the feed's wire (`ipc.feedwire`): what the child keeps, and when it gives up on the feed."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest
import structlog

from marshal_workers.child.feedsource import FeedFetcher
from marshal_workers.ipc import feedwire
from marshal_workers.ipc.exits import EXIT_KAFKA, ChildExit
from marshal_workers.ipc.messages import ChildSpec
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.slicing import Ordering, Slice

PART = Slice(Ordering.UNORDERED, 2, 1)  # the odd offsets


def row(offset: int) -> feedwire.Row:
    return (offset, None, f"v{offset}".encode(), 1, 1000 + offset, None)


def spec(name: str, **changes: object) -> ChildSpec:
    base = ChildSpec(
        handler="h:h",
        mode=Mode.ALO,
        bootstrap_servers="-",
        group_id="g",
        client_id="c",
        instance_id="i",
        topic="t",
        partition=0,
        start_offset=11,
        fencing_token=1,
        batch_size=3,
        batch_timeout_s=0.5,
        slice=PART,
        feed=name,
        feed_silence_s=1.0,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


class Reader:
    """A scripted reader: accepts one child, checks its attach, sends ``frames`` in one write."""

    def __init__(self, frames: list[bytes], close: bool = False) -> None:
        self.name = f"\0marshal-test/{uuid.uuid4().hex}"
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.name)
        self.listener.listen(1)
        self.frames = frames
        self.close = close
        self.attach: feedwire.Attach | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        decoder = feedwire.Decoder()
        while not (got := decoder.feed(conn.recv(4096))):
            pass
        assert isinstance(got[0], feedwire.Attach)
        self.attach = got[0]
        # Kept before the frames go out: a test that has read them may write more at once (set
        # after the write, the test could get there first and find no connection).
        self.conn = conn
        conn.sendall(b"".join(self.frames))
        if self.close:
            conn.close()


@pytest.fixture
def log() -> Iterator[object]:
    yield structlog.get_logger("test")


def fetched(fetcher: FeedFetcher) -> list[int]:
    return [r.offset for r in fetcher.fetch()]


def test_the_first_batch_in_the_read_of_the_attach_answer_is_kept(log: object) -> None:
    """The reader's answer and its first batch arrive in one read: the batch is not lost (it
    was once, and the child's position then moved past records it never handled)."""
    reader = Reader(
        [
            feedwire.attached_frame(11),
            feedwire.batch_frame(11, 20, 30, [row(o) for o in (11, 13, 15, 17, 19)]),
        ]
    )
    fetcher = FeedFetcher(spec(reader.name), log, messages=False)
    assert fetcher.open() == 11
    assert reader.attach == feedwire.Attach(PART, 11, "earliest")
    assert fetched(fetcher) == [11, 13, 15]
    assert fetcher.reach.end == 17  # not 20: 17 and 19 are not handed on yet
    assert fetched(fetcher) == [17, 19]
    assert fetcher.reach.end == 20


def test_a_record_reads_as_the_reader_sent_it(log: object) -> None:
    """A record's fields are the row's: key, value, timestamp, headers, topic, partition."""
    sent = (11, b"k", b"v", 1, 1234, [("h", b"x")])
    reader = Reader([feedwire.attached_frame(11), feedwire.batch_frame(11, 12, 12, [sent])])
    fetcher = FeedFetcher(spec(reader.name), log, messages=False)
    fetcher.open()
    (record,) = fetcher.fetch()
    assert record.fields() == ("t", 0, 11, b"k", b"v", 1234, (("h", b"x"),))
    assert fetcher.high_watermark() == 12 and fetcher.idle


def test_records_of_another_slice_or_again_are_dropped(log: object) -> None:
    """An even offset (another stripe's) and an offset at or below the last kept are dropped;
    the rest is kept."""
    frames = [
        feedwire.attached_frame(11),
        feedwire.batch_frame(11, 16, None, [row(o) for o in (11, 12, 13)]),
        feedwire.batch_frame(16, 20, None, [row(o) for o in (17, 19)]),
    ]
    reader = Reader(frames)
    fetcher = FeedFetcher(spec(reader.name, batch_size=10), log, messages=False)
    fetcher.open()
    got = fetched(fetcher)
    while len(got) < 4:
        got += fetched(fetcher)
    assert got == [11, 13, 17, 19] and fetcher.dropped == 1


@pytest.mark.parametrize(
    "bad",
    [
        feedwire.batch_frame(14, 20, None, [row(15)]),  # a batch from 14 where 11 was due
        feedwire.batch_frame(11, 14, None, [row(15)]),  # a record beyond its batch
        feedwire.frame(("batch", 11, 14, -1, [(13,)])),  # a record of the wrong shape
        feedwire.frame(("attached", 11)),  # an answer again
        feedwire.failed_frame("broker gone"),
        b"\x05\x00\x00\x00notmarshal",
    ],
)
def test_a_feed_that_breaks_the_rules_ends_the_child_after_what_it_kept(
    log: object, bad: bytes
) -> None:
    """A missing batch, a record outside its batch or of the wrong shape, an unexpected
    message, the reader's failure, bytes that are no message: what was kept before is handed
    on, then the child ends with the Kafka exit code (its claim's next child starts afresh)."""
    good = feedwire.batch_frame(11, 12, None, [row(11)])
    reader = Reader([feedwire.attached_frame(11), good, bad])
    fetcher = FeedFetcher(spec(reader.name), log, messages=False)
    fetcher.open()
    assert fetched(fetcher) == [11]
    with pytest.raises(ChildExit) as ended:
        fetcher.fetch()
        fetcher.fetch()
    assert ended.value.code == EXIT_KAFKA
    assert fetcher.reach.end == 12


def test_a_closed_feed_ends_the_child_after_its_records(log: object) -> None:
    """The reader ends (killed): the records received are handed on first."""
    reader = Reader(
        [
            feedwire.attached_frame(11),
            feedwire.batch_frame(11, 14, None, [row(11), row(13)]),
        ],
        close=True,
    )
    fetcher = FeedFetcher(spec(reader.name), log, messages=False)
    fetcher.open()
    assert fetched(fetcher) == [11, 13]
    with pytest.raises(ChildExit) as ended:
        fetcher.fetch()
    assert ended.value.code == EXIT_KAFKA


def test_a_silent_reader_ends_the_child(log: object) -> None:
    """Nothing from the reader for ``feed_silence_s``: it is taken for dead, and the loss is
    told (``on_lost``: the shared cells, so that the supervisor replaces the reader however the
    child then ends: an AMO child hands its asked runs on first, and may end refused)."""
    reader = Reader([feedwire.attached_frame(11)])
    told: list[bool] = []
    fetcher = FeedFetcher(
        spec(reader.name, feed_silence_s=0.3, batch_timeout_s=0.1), log, False,
        on_lost=lambda: told.append(True),
    )  # fmt: skip
    fetcher.open()
    assert fetcher.fetch() == [] and not told
    with pytest.raises(ChildExit) as ended:
        for _ in range(20):
            assert fetcher.fetch() == []
    assert ended.value.code == EXIT_KAFKA
    assert told == [True]


def test_no_reader_ends_the_child(log: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nobody listens on the feed's name (within the connect timeout): the child ends."""
    monkeypatch.setattr("marshal_workers.child.feedsource.CONNECT_TIMEOUT_S", 0.2)
    fetcher = FeedFetcher(spec(f"\0marshal-test/{uuid.uuid4().hex}"), log, messages=False)
    with pytest.raises(ChildExit) as ended:
        fetcher.open()
    assert ended.value.code == EXIT_KAFKA


# ---------------------------------------------------------------- the wire


def test_every_message_survives_any_cut_of_the_stream() -> None:
    """Each message, fed byte by byte, decodes to what was sent."""
    attach = feedwire.Attach(Slice(Ordering.KEY, 8, 3), None, "latest")
    stream = (
        feedwire.attach_frame(attach)
        + feedwire.attached_frame(5)
        + feedwire.batch_frame(
            5, 9, 20, [(5, None, None, 0, 0, None), (7, b"k", b"", 1, 3, [("a", None)])]
        )
        + feedwire.failed_frame("why")
    )
    decoder = feedwire.Decoder()
    got: list[object] = []
    for i in range(len(stream)):
        got += decoder.feed(stream[i : i + 1])
    assert got == [
        attach,
        feedwire.Attached(5),
        feedwire.Batch(
            5, 9, 20, [(5, None, None, 0, 0, None), (7, b"k", b"", 1, 3, [("a", None)])]
        ),
        feedwire.Failed("why"),
    ]
    assert decoder.pending == 0


@pytest.mark.parametrize(
    "payload",
    [
        ("attach", 2, "key", 8, 3, -1, "latest"),  # another version
        ("attach", 1, "partition", 1, 0, -1, "latest"),  # not a slice
        ("attach", 1, "key", 8, 8, -1, "latest"),  # no such slice
        ("batch", 9, 5, -1, []),  # reach below since
        ("batch", 5, 9, -1, ()),  # rows not a list
        ("batch", 5, 9),  # too short
        ("attached", -1),
        ("nonsense",),
        [1, 2],
    ],
)
def test_a_message_of_the_wrong_shape_is_refused(payload: object) -> None:
    """Anything but the messages of the wire is an error, not a value; the messages before it
    are decoded, nothing after it."""
    decoder = feedwire.Decoder()
    good = feedwire.attached_frame(3)
    got = decoder.feed(good + feedwire.frame(payload) + good)  # type: ignore[arg-type]
    assert got == [feedwire.Attached(3)] and decoder.error
    assert decoder.feed(good) == []


def test_an_oversized_frame_is_refused_before_it_is_read() -> None:
    """A length above the limit ends the feed at once (nothing is buffered for it)."""
    decoder = feedwire.Decoder()
    assert decoder.feed((feedwire.MAX_FRAME + 1).to_bytes(4, "little")) == []
    assert decoder.error and decoder.pending == 0


def test_a_child_is_idle_only_once_it_has_everything_to_the_partitions_end(log: object) -> None:
    """The reader at the partition's end does not make a child idle while the child's own
    records up to it are still to come (it would report its position after every short batch:
    at N = 16, hundreds of messages a second into a supervisor starved of the CPU); once the
    child has everything of its slice to the end, it is."""
    frames = [
        feedwire.attached_frame(11),
        feedwire.batch_frame(11, 14, 40, [row(11), row(13)]),  # the reader is at the end
    ]
    reader = Reader(frames)
    fetcher = FeedFetcher(spec(reader.name), log, messages=False)
    fetcher.open()
    assert fetched(fetcher) == [11, 13]
    assert not fetcher.idle  # records 14 to 39 of its slice are still to come
    reader.conn.sendall(feedwire.batch_frame(14, 40, 40, []))
    assert fetcher.fetch() == []
    assert fetcher.idle
