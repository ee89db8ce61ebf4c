"""A host's reader of one data partition: the partition fetched once, each slice's records
handed to the host's child of that slice (``slice_reads = "host"``).

Without it every slice child of a partition has its own consumer of the whole partition: N
slices are N reads (the broker sends each record N times) and N librdkafka instances
decoding it, which at N = 64 costs a record as much CPU as a 200 µs handler. The reader holds
no claim, no lease and no handler: it only reads, which needs no fencing, and every record is
still handled by the one child of its slice's claim, which checks its lease before each call
(`child.feedsource` checks each record's slice and order as well).

The process: started by the supervisor (`supervisor.feeds`) from the fork server when it
spawns the first slice child of a partition, with a ChildSpec of that child whose ``feed`` is
the random name of an abstract Unix socket (`supervisor.feeds.socket_name`) it listens on.
Each child connects, attaches (`feedwire.Attach`: slice and start), and gets `feedwire.Batch`
frames. One consumer, ``assign()``ed at the lowest start any child needs (`feedlanes.Lanes`).

Flow: the reader keeps what it read last (`RECENT_BYTES`). A child whose unsent frames pass
`OUTLET_BYTES` falls behind: it gets nothing more as records are read, and once it has taken
what it had it is served from what is kept, `SERVE_ROWS` at a time, until it is level again;
a child that attaches below where the reader is, within what is kept, starts that way. The
others are not held up, until what is kept is all records a behind child still needs: then
the reader waits for it (the others still hear from it, so none thinks it silent). A child
whose start is below what is kept makes the reader go back (children already ahead skip what
they had).

Ends: by itself after `IDLE_EXIT_S` with no child attached (the host holds no slice of the
partition any more); killed by the supervisor when one of its children lost its feed (the
child's exit code says so) or the supervisor ends; with its parent (the fork server,
which ends with the supervisor: the parent-death signal); on a fatal Kafka error (its children
are told, and end).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

import structlog
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from marshal_workers.child.consumer import EARLIEST, LATEST, reader_consumer
from marshal_workers.child.feedlanes import Lane, Lanes, Recent
from marshal_workers.child.feedsource import peer_uid
from marshal_workers.child.fencing import parent_to_watch, set_parent_death_signal
from marshal_workers.common.errors import ConfigError
from marshal_workers.common.logs import configure_logging
from marshal_workers.ipc import feedwire
from marshal_workers.ipc.messages import ChildSpec

RECENT_BYTES = 64 << 20  # the records read last kept for a child that attaches below (`Recent`)
OUTLET_BYTES = 256 << 10  # a child's unsent frames beyond which it falls behind
SERVE_ROWS = 2000  # records a behind child is served at a time, once it has taken its frames
READ_BATCH = 2000  # messages taken from the consumer at a time
POLL_S = 0.05  # the longest wait for records or a socket (keepalives, attaches, the parent)
REACH_EVERY_S = 0.05  # a child without records of its own hears the reach at most this often
IDLE_EXIT_S = 60.0  # no child attached for this long: the reader ends by itself
WATERMARK_S = 4.0  # a child's start checked against the log: below half a child's silence limit
EXIT_FAILED = 1


@dataclass(slots=True)
class Outlet:
    """One connected child: its socket, what it said, its lane once attached, what is unsent."""

    sock: socket.socket
    decoder: feedwire.Decoder = field(default_factory=feedwire.Decoder)
    lane: Lane | None = None
    out: bytearray = field(default_factory=bytearray)
    reach_sent: int = 0  # the reach of the last batch sent (from the attach: its start)
    sent_at: float = 0.0


class Reader:
    """The loop: connections, attaches, one consumer, frames to each child."""

    def __init__(self, spec: ChildSpec, listener: socket.socket, log: Any) -> None:
        self.spec = spec
        self.listener = listener
        self.log = log
        self.tp = TopicPartition(spec.topic, spec.partition)
        self.consumer: Any = None
        self.lanes = Lanes()
        self.recent = Recent(RECENT_BYTES)  # what was read last, for children that attach late
        self.outlets: dict[socket.socket, Outlet] = {}
        self.reading: int | None = None  # the offset the consumer returns next
        self.high: int | None = None
        self.idle_since = time.monotonic()
        self.uid = os.getuid()

    # ---- the loop ---------------------------------------------------------------------------

    def run(self, parent: int) -> int:
        while True:
            if os.getppid() != parent:
                self.log.info("feed_reader_orphaned")
                return 0
            if not self.outlets and time.monotonic() - self.idle_since > IDLE_EXIT_S:
                self.log.info("feed_reader_idle_exit")
                return 0
            if not self.turn():
                return EXIT_FAILED

    def turn(self) -> bool:
        """One turn: children's attaches and ends, a batch read and routed (unless nothing is
        attached or what is kept is all still needed), behind children served, reaches,
        frames sent. False on a fatal Kafka error."""
        self._sockets(0.0)
        if self.recent.full:  # what pinned it may have moved on: a behind child served, gone
            self.recent.trim(self.lanes.pin())
        if self.lanes.by_index and self.consumer is not None and not self.recent.full:
            if not self._read():
                return False
        else:
            self._sockets(POLL_S)
        self._serve_behind()
        self._reaches()
        self._flush()
        return True

    def _serve_behind(self) -> None:
        """Serve each behind child that has taken its frames from what is kept; a live one
        whose unsent frames passed `OUTLET_BYTES` falls behind."""
        reading = self.reading
        if reading is None:
            return
        now = time.monotonic()
        for outlet in list(self.outlets.values()):
            lane = outlet.lane
            if lane is None:
                continue
            if lane.live:
                if len(outlet.out) > OUTLET_BYTES:
                    self.lanes.fall_behind(lane)
                continue
            if outlet.out:
                continue
            if not self.lanes.serve(lane, self.recent, reading, SERVE_ROWS):
                self._seek(self.lanes.seek(reading))  # (not expected: what is kept is pinned)
            self._emit(outlet, now)

    def _seek(self, low: int | None) -> None:
        if low is None:
            return
        self.consumer.assign([TopicPartition(self.spec.topic, self.spec.partition, low)])
        self.log.info("feed_reader_seek", offset=low, was=self.reading)
        self.reading = low
        self.recent.restart(low)

    def _sockets(self, timeout: float) -> None:
        """Accept, read attaches and ends, wait for writable sockets (up to ``timeout``)."""
        # poll, not select: a reader of up to 1,024 slices has descriptors past FD_SETSIZE
        poller = select.poll()
        poller.register(self.listener, select.POLLIN)
        by_fd: dict[int, Outlet] = {}
        for sock, each in self.outlets.items():
            by_fd[sock.fileno()] = each
            poller.register(sock, select.POLLIN | (select.POLLOUT if each.out else 0))
        try:
            events = poller.poll(timeout * 1000)
        except InterruptedError:
            return
        for fd, mask in events:
            outlet = by_fd.get(fd)
            if outlet is None:
                self._accept()
                continue
            if outlet.sock not in self.outlets:  # dropped by an earlier event of this turn
                continue
            if mask & (select.POLLIN | select.POLLHUP | select.POLLERR):
                self._incoming(outlet.sock)
            if mask & select.POLLOUT and outlet.sock in self.outlets:
                self._send(outlet)

    def _accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        if peer_uid(sock) != self.uid:
            self.log.warning("feed_stranger_refused")
            sock.close()
            return
        sock.setblocking(False)
        self.outlets[sock] = Outlet(sock)

    def _incoming(self, sock: socket.socket) -> None:
        outlet = self.outlets[sock]
        try:
            data = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(outlet, None)
            return
        messages = outlet.decoder.feed(data)
        if outlet.decoder.error is not None:
            self._drop(outlet, outlet.decoder.error)
            return
        for msg in messages:
            if not isinstance(msg, feedwire.Attach) or outlet.lane is not None:
                self._drop(outlet, f"{type(msg).__name__} where an attach was due")
                return
            self._attach(outlet, msg)
            if outlet.sock not in self.outlets:  # the attach was refused: nothing more from it
                return

    def _attach(self, outlet: Outlet, msg: feedwire.Attach) -> None:
        if not self.lanes.fits(msg.part):
            self._drop(outlet, f"slice {msg.part.name} is cut another way than the others")
            return
        try:
            if self.consumer is None:
                self.consumer = reader_consumer(self.spec)
            start = self._start(msg.start, msg.reset)
        except (KafkaException, ValueError, ConfigError) as exc:  # (settings the client refuses)
            outlet.out += feedwire.failed_frame(str(exc))
            self._send(outlet)
            self._drop(outlet, f"no start: {exc}")
            return
        reading = self.reading
        outlet.lane, low = self.lanes.join(msg.part, start, reading, self.recent)
        outlet.reach_sent = start  # the first batch's since
        outlet.out += feedwire.attached_frame(start)
        self._seek(low)  # behind (a child below what is kept) or every child ahead of it
        self.log.info(
            "feed_child_attached", slice=msg.part.name, start=start, lanes=len(self.lanes)
        )

    def _start(self, asked: int | None, reset: str) -> int:
        """Where a child starts: where it asked, if that is not past the partition's end as
        the reader last knew it; else (none asked, or the end not known, or past it: a
        truncated partition, a recreated topic) the watermarks are looked up and a start past
        the end, or none, goes where the child's reset policy says, as its own consumer's reset
        would have put it. A start the log no longer has (retention) is kept: the shared
        consumer, whose reset is always ``earliest``, reads from the log's start, and the
        child gets its records from there, as its own consumer under ``earliest`` would have;
        under ``latest`` its own consumer would have skipped to the end, the feed skips
        nothing. (A lookup per attach waited behind the consumer's fetch the broker held, half
        a second each: 64 children attached over 16 s; now only a start past the known end
        is looked up.)"""
        if asked is not None and self.high is not None and asked <= self.high:
            return asked
        policy = reset.lower()
        if asked is None and policy not in EARLIEST | LATEST:
            raise ValueError(f"no start offset and auto_offset_reset={reset!r}")
        marks = self.consumer.get_watermark_offsets(self.tp, timeout=WATERMARK_S, cached=False)
        if marks is None:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "watermark offsets timed out"))
        low, high = int(marks[0]), int(marks[1])
        self.high = high if self.high is None else max(self.high, high)
        if asked is not None and asked <= high:
            return asked
        start = high if policy in LATEST else low
        if asked is not None:
            self.log.info("feed_start_past_the_end", asked=asked, low=low, high=high, start=start)
        return start

    def _drop(self, outlet: Outlet, why: str | None) -> None:
        if why is not None:
            self.log.warning("feed_child_dropped", reason=why)
        if outlet.lane is not None:
            self.lanes.detach(outlet.lane)
        self.outlets.pop(outlet.sock, None)
        outlet.sock.close()
        if not self.outlets:
            self.idle_since = time.monotonic()

    # ---- reading ----------------------------------------------------------------------------

    def _read(self) -> bool:
        """One batch from the consumer routed to the lanes; False on a fatal error."""
        messages = self.consumer.consume(READ_BATCH, POLL_S)
        rows: list[feedwire.Row] = []
        for m in messages:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.fatal():
                    self._fail(str(err))
                    return False
                self.log.warning("kafka_error", error=str(err), code=err.name())
                continue
            kind, ts = m.timestamp()
            rows.append((m.offset(), m.key(), m.value(), kind, ts, m.headers()))
        marks = self.consumer.get_watermark_offsets(self.tp, cached=True)
        if marks is not None and marks[1] >= 0:
            self.high = int(marks[1])
        if rows:
            self.reading = rows[-1][0] + 1
        reading = self.reading
        if reading is not None:
            self.lanes.read(rows, reading)
            self.recent.add(rows, reading, self.lanes.pin())
            now = time.monotonic()
            for outlet in self.outlets.values():
                self._emit(outlet, now)
        return True

    def _emit(self, outlet: Outlet, now: float) -> None:
        """Frame the records ready for ``outlet``'s child, if any."""
        lane = outlet.lane
        if lane is None or not lane.rows:
            return
        outlet.out += feedwire.batch_frame(outlet.reach_sent, lane.next, self.high, lane.rows)
        lane.rows = []
        outlet.reach_sent, outlet.sent_at = lane.next, now

    def _fail(self, why: str) -> None:
        self.log.error("feed_reader_failed", error=why)
        for outlet in list(self.outlets.values()):  # (a failed send drops the outlet)
            outlet.out += feedwire.failed_frame(why)
            self._send(outlet)

    def _reaches(self) -> None:
        """Tell each child without records of its own how far the reader got: soon after it
        moved, and at least every `feedwire.KEEPALIVE_S`."""
        now = time.monotonic()
        for outlet in self.outlets.values():
            lane = outlet.lane
            if lane is None or outlet.out:
                continue
            due = now - outlet.sent_at
            if (
                lane.next != outlet.reach_sent and due >= REACH_EVERY_S
            ) or due >= feedwire.KEEPALIVE_S:
                outlet.out += feedwire.batch_frame(outlet.reach_sent, lane.next, self.high, [])
                outlet.reach_sent, outlet.sent_at = lane.next, now

    def _flush(self) -> None:
        for outlet in list(self.outlets.values()):
            if outlet.out:
                self._send(outlet)

    def _send(self, outlet: Outlet) -> None:
        try:
            sent = outlet.sock.send(outlet.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(outlet, None)
            return
        del outlet.out[:sent]


def reader_main(spec: ChildSpec, supervisor_pid: int) -> NoReturn:
    """The reader process's entry point (see the module docstring); never returns."""
    with contextlib.suppress(OSError):  # if it fails, the parent check of every turn remains
        set_parent_death_signal(signal.SIGKILL)
    parent = parent_to_watch(supervisor_pid)
    if parent is None:
        os._exit(0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_logging(spec.log_json)
    assert spec.feed is not None
    log = structlog.get_logger("marshal_workers.child.reader").bind(
        group=spec.group_id,
        topic=spec.topic,
        partition=spec.partition,
        client_id=spec.client_id,
        pid=os.getpid(),
        role="feed_reader",
    )
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(spec.feed)
    except OSError as exc:  # taken (names are random: by someone else), or no socket at all
        log.error("feed_reader_cannot_listen", error=str(exc))
        os._exit(EXIT_FAILED)
    listener.listen(256)
    listener.setblocking(False)
    log.info("feed_reader_listening")
    reader = Reader(replace(spec, start_offset=None), listener, log)
    try:
        code = reader.run(parent)
    except Exception as exc:  # one event in the member's log, not a bare traceback on stderr
        log.exception("feed_reader_crashed")
        with contextlib.suppress(Exception):  # its children are told why (they end at once)
            reader._fail(f"the reader crashed: {exc!r}")
        code = EXIT_FAILED
    if reader.consumer is not None:
        try:
            reader.consumer.close()
        except Exception as exc:
            log.warning("consumer_close_failed", error=repr(exc))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
