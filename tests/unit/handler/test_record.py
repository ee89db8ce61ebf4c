"""The handler's `Record`: made from fields or over a consumer's message, the same view."""

from __future__ import annotations

import pickle

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE, Message

from marshal_workers.handler.record import FetchedRecord, MessageRecords, Record

FIELDS = ("orders", 3, 17, b"k", b"v", 1_700_000_000_000, (("trace", b"abc"), ("n", None)))


def message(**overrides: object) -> Message:
    """A consumer's message as librdkafka hands it over (LogAppendTime, list headers)."""
    values: dict[str, object] = {
        "topic": "orders",
        "partition": 3,
        "offset": 17,
        "key": b"k",
        "value": b"v",
        "headers": [("trace", b"abc"), ("n", None)],
        "timestamp": (TIMESTAMP_LOG_APPEND_TIME, 1_700_000_000_000),
    }
    values.update(overrides)
    try:
        return Message(**values)
    except TypeError:  # pragma: no cover (confluent-kafka before messages could be built)
        pytest.skip("this confluent-kafka cannot build a Message")


class TestRecord:
    def test_fields_read_back_by_name(self) -> None:
        record = Record(*FIELDS)
        assert (record.topic, record.partition, record.offset) == ("orders", 3, 17)
        assert (record.key, record.value, record.timestamp) == (b"k", b"v", 1_700_000_000_000)
        assert record.headers == (("trace", b"abc"), ("n", None))
        assert record.fields() == FIELDS

    def test_a_fetched_record_reads_the_same_fields_from_the_message(self) -> None:
        """LogAppendTime or CreateTime: the timestamp in ms; list headers become a tuple."""
        fetched = FetchedRecord(message())
        assert fetched.fields() == FIELDS
        assert fetched == Record(*FIELDS) and hash(fetched) == hash(Record(*FIELDS))
        assert isinstance(fetched, Record)

    def test_no_timestamp_and_no_headers(self) -> None:
        """A broker without a timestamp gives None; no headers gives an empty tuple."""
        fetched = FetchedRecord(message(timestamp=(TIMESTAMP_NOT_AVAILABLE, 0), headers=None))
        assert fetched.timestamp is None and fetched.headers == ()
        made = Record("t", 0, 1, None, None, None)
        assert made.timestamp is None and made.headers == () and made.key is None

    def test_str_header_values_are_given_as_bytes(self) -> None:
        fetched = FetchedRecord(message(headers=[("a", "text")]))
        assert fetched.headers == (("a", b"text"),)

    def test_records_differ_by_any_field(self) -> None:
        base = Record(*FIELDS)
        for i in range(len(FIELDS)):
            changed = list(FIELDS)
            changed[i] = None if i in (3, 4, 5) else ("x" if i == 0 else 99 if i < 3 else ())
            assert Record(*changed) != base  # type: ignore[arg-type]
        assert base != FIELDS  # a record is not its tuple of fields

    def test_read_only(self) -> None:
        record = Record(*FIELDS)
        with pytest.raises(AttributeError):
            record.offset = 3  # type: ignore[misc]
        with pytest.raises(AttributeError):
            record.extra = 1  # type: ignore[attr-defined]

    def test_repr_names_every_field(self) -> None:
        assert repr(FetchedRecord(message())) == (
            "Record(topic='orders', partition=3, offset=17, key=b'k', value=b'v', "
            "timestamp=1700000000000, headers=(('trace', b'abc'), ('n', None)))"
        )

    def test_pickles_as_its_fields_even_over_a_message(self) -> None:
        back = pickle.loads(pickle.dumps(FetchedRecord(message())))
        assert type(back) is Record and back == Record(*FIELDS)


class TestMessageRecords:
    def test_records_over_messages_made_only_when_asked(self) -> None:
        messages = [message(offset=o, value=b"v%d" % o) for o in (4, 5, 7)]
        view = MessageRecords(messages)
        assert len(view) == 3
        assert view.messages is messages
        assert view[0].offset == 4
        assert view[-1].offset == 7
        assert [r.value for r in view] == [b"v4", b"v5", b"v7"]
        assert isinstance(view[0], FetchedRecord)

    def test_a_slice_is_a_view_too(self) -> None:
        view = MessageRecords([message(offset=o) for o in range(10, 15)])
        part = view[1:3]
        assert isinstance(part, MessageRecords)
        assert [r.offset for r in part] == [11, 12]
        assert view[2] == Record(*view[2].fields())
