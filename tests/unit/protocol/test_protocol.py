"""The Marshal version-1 wire format, record keys and coordination partitioners."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from marshal_workers.protocol.wire import (
    MAX_UNIX_SEC,
    ClaimingMessages,
    ClaimingPartition,
    DecodeError,
    Heartbeat,
    Message,
    Partitioner,
    ReleaseGroup,
    ReleasingPartition,
    _decode_strictly,
    coordination_partition,
    decode,
    encode,
    record_key,
    validate_name,
)

SAMPLES: list[tuple[Message, bytes]] = [
    (
        Heartbeat(1700000000, "i1", "c1", "g", "orders", 3, 42),
        b"Heartbeat/1/1700000000/i1/c1/g/orders/3/42",
    ),
    (ClaimingPartition(5, "i1", "c1", "g", "orders", 0), b"ClaimingPartition/1/5/i1/c1/g/orders/0"),
    (
        ReleasingPartition(5, "i1", "c1", "g", "orders", 1, 7),
        b"ReleasingPartition/1/5/i1/c1/g/orders/1/7",
    ),
    (
        ClaimingMessages(5, "i1", "c1", "g", "orders", 1, 500),
        b"ClaimingMessages/1/5/i1/c1/g/orders/1/500",
    ),
    (
        ReleaseGroup(5, "i1", "admin", "g", "", 0, 1700000100),
        b"ReleaseGroup/1/5/i1/admin/g//0/1700000100",
    ),
]


# Field values that are valid somewhere, invalid elsewhere, or invalid everywhere.
ODD_FIELDS = [
    b"", b"0", b"01", b"1", b"7", b"-1", b"+1", b"1a", b"9223372036854775807",
    b"9223372036854775808", b"a", b"x y", b"\xc3\xa9", b"\xff", b"\x00",
    b"Heartbeat", b"ReleaseGroup", b"ClaimingPartition",
]  # fmt: skip


def _carriable(name: str) -> bool:
    try:
        validate_name("name", name)
    except ValueError:
        return False
    return True


names = st.text(
    alphabet=st.characters(
        blacklist_characters="/", blacklist_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Z")
    ),
    min_size=1,
    max_size=20,
).filter(_carriable)


class TestCodec:
    @pytest.mark.parametrize(("msg", "wire"), SAMPLES)
    def test_encodes_to_the_go_text_format(self, msg: Message, wire: bytes) -> None:
        """Each message type encodes to the Go implementation's version-1 text."""
        assert encode(msg) == wire

    @pytest.mark.parametrize(("msg", "wire"), SAMPLES)
    def test_decodes_the_go_text_format(self, msg: Message, wire: bytes) -> None:
        """Each version-1 text decodes to the message it stands for."""
        assert decode(wire) == msg

    @given(
        st.integers(0, MAX_UNIX_SEC),
        names,
        names,
        names,
        names,
        st.integers(0, 2**31 - 1),
        st.integers(0, 2**63 - 1),
    )
    def test_round_trip(
        self, sec: int, inst: str, client: str, group: str, topic: str, part: int, offset: int
    ) -> None:
        """decode(encode(m)) == m for every message type, ASCII and non-ASCII names alike, up
        to every bound (a pause's end is a time: at most the last second of 9999)."""
        for msg in (
            Heartbeat(sec, inst, client, group, topic, part, offset),
            ClaimingPartition(sec, inst, client, group, topic, part),
            ReleasingPartition(sec, inst, client, group, topic, part, offset),
            ClaimingMessages(sec, inst, client, group, topic, part, offset),
            ReleaseGroup(sec, inst, client, group, topic, part, min(offset, MAX_UNIX_SEC)),
        ):
            assert decode(encode(msg)) == msg

    @pytest.mark.parametrize(
        ("wire", "complaint"),
        [
            (b"Bogus/1/0/i/c/g/t/0", "unknown message type"),
            (b"Heartbeat/2/0/i/c/g/t/0/1", "unsupported version"),
            (b"Heartbeat/1/0/i/c/g/t/0", "needs 9"),
            (b"ClaimingPartition/1/0/i/c/g/t/0/5", "needs 8"),
            (b"Heartbeat/1/0/i/c/g/t/0/-1", "Offset '-1'"),
            (b"Heartbeat/1/0/i/c/g/t/0/+1", "Offset '+1'"),
            (b"Heartbeat/1/0/i/c/g/t/x/1", "Partition 'x'"),
            (b"Heartbeat/1/zz/i/c/g/t/0/1", "UnixSec"),
            (b"Heartbeat/1/0//c/g/t/0/1", "InstanceID is empty"),
            (b"Heartbeat/1/0/i/c/g//0/1", "Topic is empty"),
            (b"Heartbeat/1/0/i/c c/g/t/0/1", "ClientID"),
            (b"Heartbeat/1/0/i/c/g/t/0/99999999999999999999", "Offset"),
            (b"\xff\xfeHeartbeat", "not UTF-8"),
            (b"", "unknown message type"),
        ],
    )
    def test_rejects_malformed_text_saying_why(self, wire: bytes, complaint: str) -> None:
        """Strict validation: each defect is refused with a reason naming it."""
        with pytest.raises(DecodeError, match=complaint.replace("+", r"\+")):
            decode(wire)

    def test_rejects_a_missing_value(self) -> None:
        """A tombstone (no value) is not a message."""
        with pytest.raises(DecodeError, match="no value"):
            decode(None)

    def test_fast_and_strict_paths_agree_on_every_one_field_edit(self) -> None:
        """Every sample with any one field replaced by any odd value, or dropped: the fast path
        and the strict one refuse the same values and read the others alike."""
        for _, wire in SAMPLES:
            fields = wire.split(b"/")
            for at in range(len(fields)):
                for token in [*ODD_FIELDS, None]:
                    edited = fields[:at] + ([] if token is None else [token]) + fields[at + 1 :]
                    value = b"/".join(edited)
                    fast, strict = _both_paths(value)
                    assert fast == strict, value

    @given(st.data())
    def test_fast_and_strict_paths_agree(self, data: st.DataObject) -> None:
        """The same with up to three edits, fields added too."""
        _, wire = data.draw(st.sampled_from(SAMPLES))
        fields = wire.split(b"/")
        for _ in range(data.draw(st.integers(1, 3))):
            at = data.draw(st.integers(0, len(fields)))
            edit = data.draw(st.sampled_from(["replace", "insert", "delete"]))
            token = data.draw(st.sampled_from(ODD_FIELDS))
            if edit == "insert":
                fields.insert(at, token)
            elif at < len(fields):
                fields[at : at + 1] = [] if edit == "delete" else [token]
        fast, strict = _both_paths(b"/".join(fields))
        assert fast == strict


def _both_paths(value: bytes) -> tuple[Message | None, Message | None]:
    """What `decode` (fast path first) and the strict path alone make of ``value``; None:
    refused."""
    outcomes: list[Message | None] = []
    for read in (decode, _decode_strictly):
        try:
            outcomes.append(read(value))
        except DecodeError:
            outcomes.append(None)
    return outcomes[0], outcomes[1]


class TestKeysAndNames:
    def test_record_key_is_group_topic_partition(self) -> None:
        """Compaction keeps the newest record per claim: the key names the claim."""
        assert record_key(SAMPLES[0][0]) == b"g/orders/3"

    def test_release_group_key_is_the_group_its_end_and_its_writer(self) -> None:
        """A ReleaseGroup is keyed by its group, its end and its writer (instance, wall
        second): neither a lift nor another pause with the same end supersedes it."""
        msg = SAMPLES[4][0]
        assert isinstance(msg, ReleaseGroup)
        assert record_key(msg) == (
            f"g/pause/{msg.expire_time}/{msg.instance_id}/{msg.unix_sec}".encode()
        )

    @pytest.mark.parametrize("bad", ["", "a/b", "with space", "tab\there"])
    def test_names_the_wire_cannot_carry_are_refused(self, bad: str) -> None:
        """IDs, groups and topics with '/', whitespace or nothing at all are refused up front."""
        with pytest.raises(ValueError):
            validate_name("client id", bad)

    def test_valid_name_is_returned(self) -> None:
        """A name the wire can carry passes through."""
        assert validate_name("group", "shop.billing") == "shop.billing"


class TestPartitioners:
    @pytest.mark.parametrize(
        ("topic", "expected"), [("test1", 2), ("test2", 1), ("test3", 2), ("unknown", 1)]
    )
    def test_marshal_go_known_answers(self, topic: str, expected: int) -> None:
        """md5(topic), first 8 bytes little-endian, mod 4: what the Go implementation computes."""
        assert coordination_partition(topic, 0, 4, Partitioner.MARSHAL_GO) == expected

    def test_marshal_go_ignores_the_partition(self) -> None:
        """The Go partitioner puts all of a topic's partitions on one coordination partition."""
        assert {coordination_partition("t", p, 8, Partitioner.MARSHAL_GO) for p in range(20)} == {
            coordination_partition("t", 0, 8, Partitioner.MARSHAL_GO)
        }

    def test_spec_spreads_a_topics_partitions(self) -> None:
        """The spec partitioner hashes topic and partition, spreading one topic's partitions."""
        parts = {coordination_partition("orders", p, 8) for p in range(64)}
        assert len(parts) == 8

    @given(st.text(min_size=1, max_size=20), st.integers(0, 10_000), st.integers(1, 64))
    def test_partition_is_in_range_and_stable(self, topic: str, part: int, n: int) -> None:
        """Both partitioners are deterministic and land in [0, n)."""
        for how in Partitioner:
            p = coordination_partition(topic, part, n, how)
            assert 0 <= p < n and p == coordination_partition(topic, part, n, how)

    def test_zero_partitions_is_refused(self) -> None:
        """A coordination topic with no partitions is a configuration error."""
        with pytest.raises(ValueError):
            coordination_partition("t", 0, 0)
