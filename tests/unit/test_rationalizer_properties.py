"""Property tests: the rationalizer's invariants over random interleavings of several clients."""

from __future__ import annotations

from collections.abc import Iterator

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from marshal_workers import events as ev
from marshal_workers.memlog import MemoryTopic
from marshal_workers.protocol import (
    ClaimKey,
    CoordRecord,
    Heartbeat,
    Message,
    ReleasingPartition,
    claim_key,
    encode,
    record_key,
)
from marshal_workers.rationalizer import Mode, RationalizerConfig, World, fold, resume_offset
from tests.support import HB, claim, hb, release, reserve

CLIENTS = ("a", "b", "c")
settings.register_profile(
    "default", max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("default")


@st.composite
def messages(draw: st.DrawFn) -> Message:
    """One message from a random client and instance, about one of two partitions."""
    client = draw(st.sampled_from(CLIENTS))
    inst = f"{client}-{draw(st.integers(1, 2))}"
    part = draw(st.sampled_from([0, 0, 0, 1]))
    offset = draw(st.integers(0, 60))
    kind = draw(
        st.sampled_from(["claim", "claim", "hb", "hb", "hb", "release", "reserve", "reserve"])
    )
    if kind == "claim":
        return claim(client, part, inst)
    if kind == "hb":
        return hb(client, offset, part, inst)
    if kind == "release":
        return release(client, offset, part, inst)
    return reserve(client, offset, part, inst)


@st.composite
def logs(draw: st.DrawFn) -> list[CoordRecord]:
    """A log of random messages at non-decreasing log times (steps up to 3*HB)."""
    msgs = draw(st.lists(messages(), min_size=1, max_size=80))
    t, out = 0, []
    for offset, msg in enumerate(msgs):
        t += draw(st.sampled_from([0, 1, HB // 2, HB, 2 * HB, 2 * HB + 1, 3 * HB]))
        out.append(CoordRecord(0, offset, t, record_key(msg), encode(msg)))
    return out


def fold_all(records: list[CoordRecord]) -> tuple[World, list[ev.Event]]:
    world = World(RationalizerConfig(HB), 0)
    return world, [fold(world, r) for r in records]


def per_key(events: list[ev.Event]) -> Iterator[tuple[ClaimKey, list[ev.Event]]]:
    keys: dict[ClaimKey, list[ev.Event]] = {}
    for e in events:
        key = getattr(e, "key", None)
        if key is not None:
            keys.setdefault(key, []).append(e)
    yield from keys.items()


@given(logs())
def test_two_folds_of_one_log_are_equal(records: list[CoordRecord]) -> None:
    """Any two readers of the same log reach the same world and the same verdicts."""
    w1, e1 = fold_all(records)
    w2, e2 = fold_all(records)
    assert w1 == w2 and e1 == e2


@given(logs())
def test_at_most_one_valid_holder_at_any_log_time(records: list[CoordRecord]) -> None:
    """A claim is granted only when the previous holder released or was stale (> 2*HB silent)."""
    _, events = fold_all(records)
    for _, evs in per_key(events):
        holder: str | None = None
        last_valid = 0
        for e in evs:
            if isinstance(e, ev.ClaimGranted):
                assert holder is None or e.log_time - last_valid > 2 * HB, (holder, e)
                holder, last_valid = e.client_id, e.log_time
            elif isinstance(e, ev.HeartbeatAccepted):
                assert e.client_id == holder
                last_valid = e.log_time
            elif isinstance(e, ev.Released):
                assert e.client_id == holder
                holder = None


@given(logs())
def test_fencing_tokens_strictly_increase_per_partition(records: list[CoordRecord]) -> None:
    """Each new winner of a claim gets a larger token than every earlier winner."""
    _, events = fold_all(records)
    for _, evs in per_key(events):
        tokens = [e.token for e in evs if isinstance(e, ev.ClaimGranted)]
        assert tokens == sorted(set(tokens))


@given(logs())
def test_amo_reservations_never_overlap(records: list[CoordRecord]) -> None:
    """No offset is reserved twice for one partition, across all owners (AMO)."""
    _, events = fold_all(records)
    for _, evs in per_key(events):
        high = None
        for e in evs:
            if isinstance(e, ev.MessagesClaimed):
                assert e.start is None or e.end >= e.start
                if high is not None:
                    assert e.start is not None and e.start >= high
                high = e.end


@given(logs())
def test_alo_new_owner_resumes_at_the_last_valid_report(records: list[CoordRecord]) -> None:
    """ALO never skips: a new owner starts exactly at the last offset a valid holder reported."""
    world = World(RationalizerConfig(HB), 0)
    last_report: dict[ClaimKey, int] = {}
    for r in records:
        e = fold(world, r)
        if isinstance(e, ev.HeartbeatAccepted | ev.Released):
            last_report[e.key] = e.offset
        if isinstance(e, ev.ClaimGranted):
            assert resume_offset(world.claims[e.key], Mode.ALO) == last_report.get(e.key)


@given(logs())
def test_non_holder_heartbeat_or_release_changes_nothing(records: list[CoordRecord]) -> None:
    """A heartbeat or release from anyone but the holder leaves that claim as it was."""
    world = World(RationalizerConfig(HB), 0)
    for r in records:
        before = world.copy()
        e = fold(world, r)
        if isinstance(e, ev.HeartbeatRejected | ev.ReleaseRejected):
            assert isinstance(e.message, Heartbeat | ReleasingPartition)
            key = claim_key(e.message)
            assert world.claims.get(key) == before.claims.get(key)


@given(
    st.lists(
        st.tuples(st.binary(max_size=60), st.one_of(st.none(), st.binary(max_size=60))), max_size=50
    )
)
def test_arbitrary_bytes_never_raise(pairs: list[tuple[bytes, bytes | None]]) -> None:
    """Random keys and values are folded without an exception, each counted as malformed."""
    world = World(RationalizerConfig(HB), 0)
    for offset, (key, value) in enumerate(pairs):
        e = fold(world, CoordRecord(0, offset, offset, key, value))
        assert isinstance(e, ev.Malformed)
    assert world.malformed == len(pairs)


@given(st.lists(st.text(alphabet="HeartbClaimingPsRlsGoup/0123456789-x", max_size=60), max_size=50))
def test_near_miss_text_never_raises(values: list[str]) -> None:
    """Text that looks almost like messages is folded without an exception."""
    world = World(RationalizerConfig(HB), 0)
    for offset, value in enumerate(values):
        fold(world, CoordRecord(0, offset, offset, b"g/orders/0", value.encode()))
    assert world.next_offset == len(values)


@given(logs(), st.integers(0, 80), st.integers(0, 80))
def test_compacted_reader_never_grants_what_the_full_reader_refuses(
    records: list[CoordRecord], cut_at: int, cut_again: int
) -> None:
    """Compact a prefix of the log (twice, like Kafka's cleaner) and fold it afresh: every claim,
    heartbeat and release the compacted reader accepts, a reader of the whole log accepts too.
    (Reservations are left out: on a compacted claim the position is a best estimate, a residual
    risk the README names.)"""
    _, full_events = fold_all(records)
    verdict = {e.coord_offset: type(e) for e in full_events}
    clock = iter(r.timestamp_ms for r in records)
    topic = MemoryTopic(1, lambda: next(clock))
    for r in records:
        assert r.key is not None and r.value is not None
        topic.append(0, r.key, r.value)
    times = [r.timestamp_ms for r in records]
    for cut in sorted((cut_at, cut_again)):
        topic.compact(times[min(cut, len(times) - 1)])
    _, late_events = fold_all(topic.read(0, 0))
    for e in late_events:
        if isinstance(e, ev.ClaimGranted | ev.HeartbeatAccepted | ev.Released):
            assert verdict[e.coord_offset] is type(e), e
