"""`Record`: one record of a data topic, as the handler sees it (read-only).

A record is a view over a message: the consumer's own ``confluent_kafka.Message`` when a child
fetched it, or a small stand-in when the record is made from its fields (tests, tools, plugins
that build their own). Its attributes are read from that message when asked for, so a child
hands the handler each fetched record for the price of one small object: no field is copied
that the handler does not read (building the seven fields eagerly cost a child more CPU per
record than everything else it adds to a plain consumer loop; see docs/benchmarks.md).

Records compare equal, hash and print by their seven fields, whatever backs them, and pickle
as those fields (a consumer's message does not pickle).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, overload

from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE

Headers = tuple[tuple[str, bytes | None], ...]


class _Message(Protocol):
    """The part of ``confluent_kafka.Message`` that a record reads."""

    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def key(self) -> Any: ...
    def value(self) -> Any: ...
    def timestamp(self) -> tuple[int, int]: ...
    def headers(self) -> Any: ...


class _Fields:
    """A message made of given fields (answers what a record asks a consumer's message)."""

    __slots__ = ("_headers", "_key", "_offset", "_partition", "_timestamp", "_topic", "_value")

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None,
        headers: Headers,
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._timestamp = timestamp
        self._headers = tuple(headers)

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        if self._timestamp is None:
            return TIMESTAMP_NOT_AVAILABLE, 0
        return TIMESTAMP_CREATE_TIME, self._timestamp

    def headers(self) -> Headers:
        return self._headers


def _normal_headers(raw: Any) -> Headers:
    """librdkafka's headers (a list of pairs; values bytes, str or None) as the handler's."""
    pairs = raw.items() if isinstance(raw, dict) else raw
    return tuple((k, v.encode() if isinstance(v, str) else v) for k, v in pairs)


class Record:
    """One record of a data topic: ``topic, partition, offset, key, value, timestamp`` (ms, or
    None when the broker gave none) and ``headers`` (pairs of name and bytes or None)."""

    __slots__ = ("_message",)

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None,
        headers: Headers = (),
    ) -> None:
        self._message: _Message = _Fields(topic, partition, offset, key, value, timestamp, headers)

    @property
    def topic(self) -> str:
        return self._message.topic()  # type: ignore[return-value]  # set on every record

    @property
    def partition(self) -> int:
        return self._message.partition()  # type: ignore[return-value]

    @property
    def offset(self) -> int:
        return self._message.offset()  # type: ignore[return-value]

    @property
    def key(self) -> bytes | None:
        key: bytes | None = self._message.key()
        return key

    @property
    def value(self) -> bytes | None:
        value: bytes | None = self._message.value()
        return value

    @property
    def timestamp(self) -> int | None:
        kind, ms = self._message.timestamp()
        return None if kind == TIMESTAMP_NOT_AVAILABLE else ms

    @property
    def headers(self) -> Headers:
        raw = self._message.headers()
        return _normal_headers(raw) if raw else ()

    def fields(self) -> tuple[str, int, int, bytes | None, bytes | None, int | None, Headers]:
        """The seven fields, in the constructor's order."""
        return (
            self.topic,
            self.partition,
            self.offset,
            self.key,
            self.value,
            self.timestamp,
            self.headers,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return self.fields() == other.fields()

    def __hash__(self) -> int:
        return hash(self.fields())

    def __repr__(self) -> str:
        topic, partition, offset, key, value, timestamp, headers = self.fields()
        return (
            f"Record(topic={topic!r}, partition={partition!r}, offset={offset!r}, key={key!r}, "
            f"value={value!r}, timestamp={timestamp!r}, headers={headers!r})"
        )

    def __reduce__(self) -> tuple[type[Record], tuple[Any, ...]]:
        return Record, self.fields()


class FetchedRecord(Record):
    """A record over a message the child's consumer fetched (one without an error): what
    `consumer.fetch` builds, one per message, on every record's path."""

    __slots__ = ()

    def __init__(self, message: Any) -> None:  # no super().__init__: the message is the record
        self._message = message


class MessageRecords(Sequence[Record]):
    """A fetched batch as records, over the consumer's messages: a record object is made only
    for the item asked for (the child's bookkeeping reads the first and the last; a failing
    batch's dead letters read them all). What a batch plugin that opted in to the messages
    (``batch_view = "messages"``, `plugin`) is handed is ``messages`` itself."""

    __slots__ = ("messages",)

    def __init__(self, messages: list[Any]) -> None:
        self.messages = messages  # confluent_kafka.Message, none with an error

    def __len__(self) -> int:
        return len(self.messages)

    @overload
    def __getitem__(self, index: int) -> Record: ...
    @overload
    def __getitem__(self, index: slice) -> MessageRecords: ...
    def __getitem__(self, index: int | slice) -> Record | MessageRecords:
        if isinstance(index, slice):
            return MessageRecords(self.messages[index])
        return FetchedRecord(self.messages[index])
