"""The first step of a slice child's chain with shared reads: batches from the host's reader.

With ``slice_reads = "host"`` a slice's child opens no consumer: it connects to the reader of
its partition on this host (`child.reader`, started by the supervisor; its socket's name is
``ChildSpec.feed``), asks for its slice from its start, and takes the records the reader sends
(`ipc.feedwire`). `FeedFetcher` answers as `fetching.Fetcher` does (``fetch``, ``reach``,
``high_watermark``), so the rest of the chain does not know where records come from.

Defence in depth: the child keeps a record only if it is of its slice and after the last one
it kept (from its start), so a reader's mistake can stall a child, never hand it a record of
another slice or one twice; and each batch must begin where the one before reached, with its
records inside it, so a batch that went missing cannot move the child's position past records
it never got. A feed that ends, goes silent for ``feed_silence_s``, sends a batch that breaks
those rules or what cannot be decoded, or says it failed ends the child with `EXIT_KAFKA`, as
a consumer's fatal error does: the supervisor restarts the claim's child (and the reader),
which starts at the claim's position; nothing beyond a graceful stop is lost.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from marshal_workers.child.consumer import Reach
from marshal_workers.handler.record import FetchedRecord, MessageRecords, Record
from marshal_workers.ipc import feedwire
from marshal_workers.ipc.exits import EXIT_KAFKA, ChildExit
from marshal_workers.ipc.messages import ChildSpec

CONNECT_TIMEOUT_S = 15.0  # the reader may be starting (a fork and its imports)
ATTACH_TIMEOUT_S = 30.0  # it resolves a start by the reset policy: a watermark lookup
RECV_BYTES = 1 << 20
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class FeedRow:
    """A record's fields as the reader sent them, read as a consumer's message is (`Record`
    asks it for a field only when the handler does)."""

    __slots__ = ("_partition", "_row", "_topic")

    def __init__(self, topic: str, partition: int, row: feedwire.Row) -> None:
        self._topic = topic
        self._partition = partition
        self._row = row

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._row[0]

    def key(self) -> bytes | None:
        return self._row[1]

    def value(self) -> bytes | None:
        return self._row[2]

    def timestamp(self) -> tuple[int, int]:
        return self._row[3], self._row[4]

    def headers(self) -> Any:
        return self._row[5]

    def error(self) -> None:
        return None


def peer_uid(sock: socket.socket) -> int:
    """The user the process at the other end of a Unix socket runs as."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
    return int(_CRED.unpack(raw)[1])


class FeedFetcher:
    """The child's feed from the host's reader, and its batches. ``on_lost`` is told once the
    feed is lost, before the child is ended (the shared cells: `childlink.callstate`)."""

    consumer = None  # no consumer of its own (a dead-letter topic is not checked up front)

    def __init__(
        self,
        spec: ChildSpec,
        log: Any,
        messages: bool,
        on_lost: Callable[[], None] = lambda: None,
    ) -> None:
        assert spec.feed is not None and spec.slice is not None
        self.spec = spec
        self.log = log
        self.on_lost = on_lost
        self.messages = messages
        self.reach = Reach()  # (how far a slice's child may say it read, as with a consumer)
        self.start = 0
        self.sock: socket.socket | None = None
        self.decoder = feedwire.Decoder()
        self.rows: deque[FeedRow] = deque()  # kept, not yet handed on
        self.covered = 0  # every record of the slice below it received (from the attach on)
        self.high: int | None = None
        self.last_kept = -1  # offset of the last row kept (before the first: start - 1)
        self.heard = time.monotonic()
        self.ended = ""  # why the feed ended (its rows are handed on first)
        self.dropped = 0

    def open(self) -> int:
        """Connect to the reader and attach; the offset it sends first."""
        spec = self.spec
        assert spec.feed is not None and spec.slice is not None
        self.sock = sock = self._connect(spec.feed)
        sock.sendall(
            feedwire.attach_frame(
                feedwire.Attach(spec.slice, spec.start_offset, spec.auto_offset_reset)
            )
        )
        deadline = time.monotonic() + ATTACH_TIMEOUT_S
        while True:
            messages = self._receive(max(0.0, deadline - time.monotonic()))
            if messages:
                first = messages[0]
                if not isinstance(first, feedwire.Attached):
                    self._lost(f"the reader answered the attach with {type(first).__name__}")
                self.start = int(first.start)
                self.last_kept = first.start - 1
                self.covered = first.start
                self.heard = time.monotonic()
                self.log.info("feed_attached", feed=_shown(spec.feed), start=first.start)
                self._take(messages[1:])  # what came in the same read
                return self.start
            if self.ended:
                self._lost(self.ended)
            if time.monotonic() >= deadline:
                self._lost("the reader did not answer the attach")

    def _connect(self, name: str) -> socket.socket:
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(name)
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                sock.close()
                if time.monotonic() >= deadline:
                    self._lost(f"no reader listens ({exc.strerror})")
                time.sleep(0.01)
                continue
            if peer_uid(sock) != os.getuid():
                sock.close()
                self._lost("the feed's socket is held by another user")
            return sock

    def fetch(self, wait: bool = True) -> Sequence[Record]:
        """A batch: up to ``batch_size`` records, waiting up to ``batch_timeout`` for them if
        ``wait``, else only those received already (maybe none)."""
        spec = self.spec
        if not self.rows:
            self._take(self._receive(spec.batch_timeout_s if wait else 0.0))
        rows = self.rows
        if not rows:
            if self.ended:
                self._lost(self.ended)
            silence = self.spec.feed_silence_s
            if time.monotonic() - self.heard > silence:
                self._lost(f"the reader said nothing for {silence:g} s")
            self.reach.end = self.covered
            return []
        n = min(len(rows), spec.batch_size)
        taken = [rows.popleft() for _ in range(n)]
        # every record of the slice below the first still held was handed on
        self.reach.end = rows[0].offset() if rows else self.covered
        if self.messages:
            return MessageRecords(taken)
        return list(map(FetchedRecord, taken))

    @property
    def idle(self) -> bool:
        """Whether the child has every record of its slice up to the partition's end (as the
        reader last knew it) handed on: then a short batch means caught up. The reader having
        read to the end is not enough: a child far behind it would report after every batch."""
        return not self.rows and self.high is not None and self.covered >= self.high

    def _take(self, messages: list[Any]) -> None:
        part = self.spec.slice
        assert part is not None
        topic, partition = self.spec.topic, self.spec.partition
        for msg in messages:
            if isinstance(msg, feedwire.Failed):
                self.ended = f"the reader failed: {msg.reason}"
                return
            if not isinstance(msg, feedwire.Batch):
                self.ended = f"the reader sent {type(msg).__name__} after the attach"
                return
            if msg.since != self.covered:  # a batch went missing, or the reader lost count
                self.ended = f"a batch from {msg.since} where {self.covered} was due"
                return
            takes = part.takes
            last = self.last_kept
            for row in msg.rows:
                if not (type(row) is tuple and len(row) == 6 and type(row[0]) is int):
                    self.ended = "a record of the wrong shape"
                    return
                offset = row[0]
                if not msg.since <= offset < msg.reach:
                    self.ended = f"record {offset} in a batch of [{msg.since}, {msg.reach})"
                    return
                if offset <= last or not takes(offset, row[1]):  # again, or not this slice's
                    self.dropped += 1
                    self.log.error(
                        "feed_record_dropped", offset=offset, after=last, dropped=self.dropped
                    )
                    continue
                self.rows.append(FeedRow(topic, partition, row))
                last = offset
            self.last_kept = last
            self.covered = msg.reach
            if msg.high is not None:
                self.high = msg.high

    def _receive(self, timeout: float) -> list[Any]:
        """The messages that came within ``timeout`` (none if none did)."""
        sock = self.sock
        if sock is None or self.ended:
            return []
        poller = select.poll()  # (not select: a handler may hold descriptors past FD_SETSIZE)
        poller.register(sock, select.POLLIN)
        if not poller.poll(timeout * 1000):
            return []
        out: list[Any] = []
        while True:
            try:
                data = sock.recv(RECV_BYTES, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self.ended = f"the feed failed: {exc}"
                break
            if not data:
                self.ended = "the reader closed the feed"
                break
            self.heard = time.monotonic()
            out.extend(self.decoder.feed(data))
            if self.decoder.error is not None:
                self.ended = f"the feed sent what cannot be read: {self.decoder.error}"
                break
            if len(data) < RECV_BYTES:
                break
        return out

    def _lost(self, why: str) -> Any:
        self.log.error("feed_lost", reason=why, feed=_shown(self.spec.feed or ""))
        self.on_lost()
        raise ChildExit(EXIT_KAFKA, "feed_lost")

    def high_watermark(self) -> int | None:
        """The partition's high watermark as the reader last said."""
        return self.high

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def _shown(name: str) -> str:
    return name.replace("\0", "@")
