"""What a host's reader of a data partition and its slice children say over a feed's socket.

With shared slice reads (``slice_reads = "host"``) one reader process per data partition per
host fetches the partition once and hands each of the host's slice children the records of its
slice (`child.reader`); the child reads them from its end of a Unix socket (`child.feedsource`)
instead of from a consumer of its own. This module is the wire between them, pure: no I/O.

A message is a 4-byte little-endian length and a `marshal` payload (Python's own format for
plain values: fast in C both ways, and it builds no object but tuples, lists, ints, bytes, str
and None). Marshal is not made for input from strangers, so both ends check that the peer runs
as their own user (``SO_PEERCRED``) before they decode anything; a frame longer than
`MAX_FRAME` or of the wrong shape ends the feed. Messages:

- child to reader, once: ``("attach", VERSION, ordering, count, index, start, reset)``: the
  slice, where to start (-1: by ``reset``, ``earliest`` or ``latest``);
- reader to child: ``("attached", start)`` (where it will start), then ``("batch", since, reach,
  high, rows)``: the rows of the child's slice in ``[since, reach)``, in offset
  order, each ``(offset, key, value, timestamp_type, timestamp, headers)``; every record of the
  slice below ``reach`` has then been sent (other slices' records are not the child's). Each
  batch's ``since`` is the reach of the one before (the first's: the start), so a child can
  tell that no batch went missing. ``high``: the partition's high watermark as the reader knew
  it (-1: not known). A batch without rows says how
  far the reader got, at least every `KEEPALIVE_S`;
- ``("failed", reason)``: the reader cannot go on (a fatal Kafka error, a start it could not
  resolve): the child ends as if its own consumer had failed.
"""

from __future__ import annotations

import marshal
import struct
from dataclasses import dataclass
from typing import Any, Final

from marshal_workers.protocol.slicing import Ordering, Slice

VERSION: Final = 1
MAX_FRAME: Final = 64 * 1024 * 1024  # far above a batch of the largest records a broker sends
KEEPALIVE_S: Final = 0.5  # the reader's longest silence towards an attached child
SILENCE_MIN_S: Final = 3.0  # six keepalives: a busy host's scheduling is no reader's death
SILENCE_MAX_S: Final = 10.0


def silence_for(heartbeat_interval_s: float) -> float:
    """How long a child hears nothing from its reader before it takes it for dead
    (`ChildSpec.feed_silence_s`): two heartbeat intervals, as a claim's lease, within
    [`SILENCE_MIN_S`, `SILENCE_MAX_S`] (a fixed 10 s left a frozen reader's slices idle five
    leases long at HB = 2 s)."""
    return min(SILENCE_MAX_S, max(SILENCE_MIN_S, 2 * heartbeat_interval_s))


_LENGTH = struct.Struct("<I")
# a marshal version every Python since 3.4 reads (refs: a topic or key repeated is written once)
_MARSHAL_VERSION: Final = 4

Row = tuple[int, bytes | None, bytes | None, int, int, Any]  # offset key value ts_type ts headers


class FeedError(Exception):
    """A frame that is not one of this module's messages: the feed cannot be trusted further."""


@dataclass(frozen=True, slots=True)
class Attach:
    """A child asks for its slice's records from ``start`` (None: where ``reset`` says)."""

    part: Slice
    start: int | None
    reset: str


@dataclass(frozen=True, slots=True)
class Attached:
    """The reader will send the slice's records from ``start``."""

    start: int


@dataclass(frozen=True, slots=True)
class Batch:
    """Rows of the child's slice, and how far the reader got (see the module docstring)."""

    since: int
    reach: int
    high: int | None
    rows: list[Row]


@dataclass(frozen=True, slots=True)
class Failed:
    """The reader cannot go on."""

    reason: str


def frame(payload: tuple[Any, ...]) -> bytes:
    """One message as sent: its length, then its marshalled payload."""
    body = marshal.dumps(payload, _MARSHAL_VERSION)
    return _LENGTH.pack(len(body)) + body


def attach_frame(msg: Attach) -> bytes:
    start = -1 if msg.start is None else msg.start
    p = msg.part
    return frame(("attach", VERSION, p.ordering.value, p.count, p.index, start, msg.reset))


def attached_frame(start: int) -> bytes:
    return frame(("attached", start))


def batch_frame(since: int, reach: int, high: int | None, rows: list[Row]) -> bytes:
    return frame(("batch", since, reach, -1 if high is None else high, rows))


def failed_frame(reason: str) -> bytes:
    return frame(("failed", reason))


class Decoder:
    """Messages from a stream of bytes, however it was cut into reads."""

    __slots__ = ("_buffer", "error")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.error: str | None = None  # the first bad message: nothing after it is decoded

    def feed(self, data: bytes) -> list[Attach | Attached | Batch | Failed]:
        """Take ``data``; the messages it completed, in order, up to a bad one (then ``error``
        says what was wrong, and nothing more is decoded)."""
        if self.error is not None:
            return []
        buf = self._buffer
        buf += data
        out: list[Attach | Attached | Batch | Failed] = []
        at = 0
        try:
            while len(buf) - at >= _LENGTH.size:
                (size,) = _LENGTH.unpack_from(buf, at)
                if size > MAX_FRAME:
                    raise FeedError(f"a frame of {size} bytes (at most {MAX_FRAME})")
                end = at + _LENGTH.size + size
                if len(buf) < end:
                    break
                out.append(_message(bytes(buf[at + _LENGTH.size : end])))
                at = end
        except FeedError as exc:
            self.error = str(exc)
            buf.clear()
            return out
        if at:
            del buf[:at]
        return out

    @property
    def pending(self) -> int:
        """Bytes of a message not yet whole."""
        return len(self._buffer)


def _message(body: bytes) -> Attach | Attached | Batch | Failed:
    try:
        payload = marshal.loads(body)
    except (ValueError, EOFError, TypeError) as exc:
        raise FeedError(f"not a marshalled message: {exc}") from None
    if not isinstance(payload, tuple) or not payload or not isinstance(payload[0], str):
        raise FeedError("a message that is not a tagged tuple")
    kind = payload[0]
    try:
        if kind == "batch":
            return _batch(payload)
        if kind == "attached":
            _, start = payload
            if not _is_int(start) or start < 0:
                raise FeedError("an attached message without a start")
            return Attached(start)
        if kind == "attach":
            return _attach(payload)
        if kind == "failed":
            _, reason = payload
            return Failed(str(reason))
    except ValueError:  # unpacking a tuple of another length
        raise FeedError(f"a {kind!r} message of the wrong length") from None
    raise FeedError(f"an unknown message {kind!r}")


def _batch(payload: tuple[Any, ...]) -> Batch:
    _, since, reach, high, rows = payload
    if not (_is_int(since) and _is_int(reach) and _is_int(high)):
        raise FeedError("a batch of the wrong shape")
    if not isinstance(rows, list) or not since <= reach:
        raise FeedError("a batch of the wrong shape")
    return Batch(since, reach, None if high < 0 else high, rows)


def _attach(payload: tuple[Any, ...]) -> Attach:
    _, version, ordering, count, index, start, reset = payload
    if version != VERSION:
        raise FeedError(f"attach of feed version {version!r} (this one speaks {VERSION})")
    if not (_is_int(count) and _is_int(index) and _is_int(start)):
        raise FeedError("an attach of the wrong shape")
    try:
        part = Slice(Ordering(ordering), count, index)
    except ValueError:
        raise FeedError(f"an attach for ordering {ordering!r}") from None
    if not 0 <= index < count or part.ordering is Ordering.PARTITION:
        raise FeedError(f"an attach for slice {index} of {count}")
    if not isinstance(reset, str):
        raise FeedError("an attach without a reset policy")
    return Attach(part, None if start < 0 else start, reset)


def _is_int(value: object) -> bool:
    return type(value) is int
