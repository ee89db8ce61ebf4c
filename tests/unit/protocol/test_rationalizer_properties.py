"""Property tests: the rationalizer's invariants over random interleavings of several clients."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from marshal_workers.log.memlog import MemoryTopic
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import (
    RationalizerConfig,
    World,
    fold,
    pause_of,
    resume_offset,
)
from marshal_workers.protocol.slicing import Ordering, Slice, slice_topic
from marshal_workers.protocol.wire import (
    ClaimingMessages,
    ClaimKey,
    CoordRecord,
    Heartbeat,
    Message,
    ReleaseGroup,
    ReleasingPartition,
    claim_key,
    decode,
    encode,
    record_key,
)
from tests.support import HB, TOPIC, claim, hb, pause, release, reserve

CLIENTS = ("a", "b", "c")
KINDS = ["claim", "claim", "hb", "hb", "hb", "release", "reserve", "reserve", "pause"]
# Claims on whole partitions and on slices (ordering key, N = 2) of one topic, side by side in one
# log: a slice is a claim key of its own, so every property below holds for slices as it does
# for partitions, and nothing done to a slice's claim touches its partition's or its sibling's.
SLICES = [slice_topic(TOPIC, Slice(Ordering.KEY, 2, i)) for i in range(2)]
CLAIM_TOPICS = [TOPIC, TOPIC, *SLICES]
# Applied to each test here (a profile loaded at import would change the whole session).
PROPERTY = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def bursts(draw: st.DrawFn) -> list[Message]:
    """One to four messages from one random client instance about one of two partitions (so
    that a claim is often followed by its holder's own records), each now and then a pause of
    the group for 0 to 30 s (`logs` makes its expiry time absolute)."""
    client = draw(st.sampled_from(CLIENTS))
    inst = f"{client}-{draw(st.integers(1, 2))}"
    part = draw(st.sampled_from([0, 0, 0, 1]))
    topic = draw(st.sampled_from(CLAIM_TOPICS))
    out: list[Message] = []
    for kind in draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=4)):
        offset = draw(st.integers(0, 60))
        if kind == "pause":
            out.append(pause(client, draw(st.integers(0, 30))))
        elif kind == "claim":
            out.append(claim(client, part, inst, topic))
        elif kind == "hb":
            out.append(hb(client, offset, part, inst, topic))
        elif kind == "release":
            out.append(release(client, offset, part, inst, topic))
        else:
            out.append(reserve(client, offset, part, inst, topic))
    return out


@st.composite
def logs(draw: st.DrawFn) -> list[CoordRecord]:
    """A log of random bursts at non-decreasing log times (steps up to 3*HB); each pause
    expires 0 to 30 s after its own log time (0 s lifts the group's pause at once)."""
    msgs = [m for burst in draw(st.lists(bursts(), min_size=1, max_size=20)) for m in burst]
    t, out = 0, []
    for offset, drawn in enumerate(msgs):
        t += draw(st.sampled_from([0, 1, HB // 2, HB, 2 * HB, 2 * HB + 1, 3 * HB]))
        msg = drawn
        if isinstance(drawn, ReleaseGroup):
            # stamped as a writer does (its wall second); each pause is its own write (an
            # idempotent producer never writes one record twice), and its key names the writer
            # (`pause_key`): two pauses of one client with one end are two keys
            msg = replace(
                pause(drawn.client_id, t // 1000 + drawn.expire_time),
                instance_id=f"{drawn.client_id}-p{offset}",
                unix_sec=t // 1000,
            )
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


@PROPERTY
@given(logs(), st.integers(0, 80))
def test_folding_on_from_a_copy_equals_one_fold(records: list[CoordRecord], cut: int) -> None:
    """A reader that snapshots its world part way and folds the rest into the snapshot reaches
    the world and the verdicts of a reader that folds the whole log, and the world it
    snapshotted is left as it was."""
    head, tail = records[:cut], records[cut:]
    world, head_events = fold_all(head)
    snapshot = world.copy()
    tail_events = [fold(snapshot, r) for r in tail]
    whole, events = fold_all(records)
    assert snapshot == whole and head_events + tail_events == events
    assert world == fold_all(head)[0]


@PROPERTY
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


@PROPERTY
@given(logs())
def test_holder_verdicts_carry_the_token_of_the_latest_grant(records: list[CoordRecord]) -> None:
    """Every accepted heartbeat, release and reservation carries the fencing token of the
    latest ClaimGranted or takeover on its claim (there is always one before them); a takeover's
    token is its own offset, so tokens only grow."""
    _, events = fold_all(records)
    for _, evs in per_key(events):
        latest: int | None = None
        for e in evs:
            if isinstance(e, ev.ClaimGranted):
                assert latest is None or e.token > latest
                latest = e.token
            elif isinstance(e, ev.HeartbeatAccepted) and e.replaced_instance is not None:
                assert latest is not None and e.token == e.coord_offset > latest, (latest, e)
                latest = e.token
            elif isinstance(e, ev.HeartbeatAccepted | ev.Released | ev.MessagesClaimed):
                assert latest is not None and e.token == latest, (latest, e)


@PROPERTY
@given(logs())
def test_amo_reservations_never_overlap(records: list[CoordRecord]) -> None:
    """No offset is reserved twice for one partition, across all owners (AMO), unless the
    client that paused the group set the position in between (how ``set-position`` rewinds):
    its heartbeats and releases drop the reservation."""
    world = World(RationalizerConfig(HB), 0)
    high: dict[ClaimKey, int] = {}
    for r in records:
        e = fold(world, r)
        if isinstance(e, ev.HeartbeatAccepted | ev.Released):
            paused = pause_of(world, e.key.group, e.log_time)
            if paused is not None and paused.client_id == e.client_id:
                assert world.claims[e.key].reserved is None
                high.pop(e.key, None)
        elif isinstance(e, ev.MessagesClaimed):
            assert e.start is None or e.end >= e.start
            if e.key in high:
                assert e.start is not None and e.start >= high[e.key]
            high[e.key] = e.end


@PROPERTY
@given(logs())
def test_alo_new_owner_resumes_at_the_last_valid_report(records: list[CoordRecord]) -> None:
    """ALO never skips: a new owner starts exactly at the last offset a valid holder reported
    (a takeover keeps the position the claim has: never back, as the replaced instance handled
    up to there, and never forward, past what nobody handled). An accepted AMO reservation is
    such a report: what it reserves counts as consumed."""
    world = World(RationalizerConfig(HB), 0)
    last_report: dict[ClaimKey, int] = {}
    for r in records:
        e = fold(world, r)
        before = last_report.get(e.key) if isinstance(e, ev.ClaimVerdict) else None
        pause = pause_of(world, e.key.group, e.log_time) if isinstance(e, ev.ClaimVerdict) else None
        pausing = pause is not None and pause.client_id == e.client_id  # sets it outright
        if isinstance(e, ev.HeartbeatAccepted) and e.replaced_instance and before is not None:
            last_report[e.key] = e.offset if pausing else before
        elif isinstance(e, ev.HeartbeatAccepted | ev.Released):
            last_report[e.key] = e.offset
        elif isinstance(e, ev.MessagesClaimed):  # a reservation commits what it reserves (rule 4)
            last_report[e.key] = e.message.offset
        if isinstance(e, ev.ClaimGranted):
            assert resume_offset(world.claims[e.key], Mode.ALO) == last_report.get(e.key)


@PROPERTY
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


@PROPERTY
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


@PROPERTY
@given(st.lists(st.text(alphabet="HeartbClaimingPsRlsGoup/0123456789-x", max_size=60), max_size=50))
def test_near_miss_text_never_raises(values: list[str]) -> None:
    """Text that looks almost like messages is folded without an exception."""
    world = World(RationalizerConfig(HB), 0)
    for offset, value in enumerate(values):
        fold(world, CoordRecord(0, offset, offset, b"g/orders/0", value.encode()))
    assert world.next_offset == len(values)


@PROPERTY
@given(logs(), st.integers(0, 80), st.integers(0, 80))
def test_compacted_reader_never_grants_what_the_full_reader_refuses(
    records: list[CoordRecord], cut_at: int, cut_again: int
) -> None:
    """Compact a prefix of the log (twice, like Kafka's cleaner) and fold it afresh: every claim,
    heartbeat and release the compacted reader accepts, a reader of the whole log accepts too.
    (Reservations are left out: on a compacted claim the position is a best estimate, a residual
    risk docs/design.md names.)"""
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


@PROPERTY
@given(logs(), st.integers(0, 80), st.integers(0, 80), st.integers(0, 80))
def test_a_reader_behind_the_cleaner_never_grants_what_the_full_reader_refuses(
    records: list[CoordRecord], read_first: int, cut_at: int, cut_again: int
) -> None:
    """A reader folds the first ``read_first`` records, the cleaner runs (twice), then it folds
    what survives after them: every claim, heartbeat and release it accepts, a reader of the
    whole log accepts too (it saw a prefix of each key, a gap, then a suffix: not a suffix)."""
    _, full_events = fold_all(records)
    verdict = {e.coord_offset: type(e) for e in full_events}
    clock = iter(r.timestamp_ms for r in records)
    topic = MemoryTopic(1, lambda: next(clock))
    for r in records:
        assert r.key is not None and r.value is not None
        topic.append(0, r.key, r.value)
    world = World(RationalizerConfig(HB), 0)
    events = [fold(world, r) for r in records[:read_first]]
    times = [r.timestamp_ms for r in records]
    for cut in sorted((cut_at, cut_again)):
        topic.compact(times[min(cut, len(times) - 1)])
    events += [fold(world, r) for r in topic.read(0, 0) if r.offset >= world.next_offset]
    for e in events:
        if isinstance(e, ev.ClaimGranted | ev.HeartbeatAccepted | ev.Released):
            assert verdict[e.coord_offset] is type(e), e


@st.composite
def behaved_logs(draw: st.DrawFn) -> list[CoordRecord]:
    """A log written by clients that behave: a holder only reports positions at or after the
    claim's position (as the runtime does), and the only backward moves are rewinds by the
    client that paused the group (``set-position``). Every record the full fold refuses is
    dropped, refused claims included, and a granted claim is followed at once by the winner's
    heartbeat at its position, as the runtime writes them (a ClaimingPartition carries no
    offset: were it the newest record of its key when the cleaner runs, the position would be
    lost). A reservation is followed by nothing: it commits itself (rule 4, decision 18), so it
    is often its key's newest survivor; and no heartbeat reports a position behind an accepted
    reservation (the member's heartbeat waits for a reservation in flight). A takeover by a
    new instance of the holder's client carries a position the claim had when its writer read
    the log, at or below the one it has when the takeover lands (the old instance may have
    committed more meanwhile), and one below it is followed at once by the new instance's
    heartbeat at the claim's position, as the runtime writes it (the takeover would otherwise be
    its key's newest record, and a reader of the compacted log would resume at its offset); the
    runtime never takes over a claim with no position."""
    drawn = draw(logs())
    world = World(RationalizerConfig(HB), 0)
    out: list[CoordRecord] = []
    for r in drawn:
        msg = decode(r.value)
        assert r.value is not None
        if isinstance(msg, Heartbeat | ReleasingPartition | ClaimingMessages):
            state = world.claims.get(claim_key(msg))
            paused = pause_of(world, msg.group_id, max(world.log_time, r.timestamp_ms))
            rewinds = paused is not None and paused.client_id == msg.client_id
            if not rewinds and state is not None:
                floor = resume_offset(state, Mode.AMO) or 0
                msg = replace(msg, offset=floor + msg.offset % 7)
                takeover = (
                    isinstance(msg, Heartbeat)
                    and state.holder_client == msg.client_id
                    and state.holder_instance != msg.instance_id
                )
                if takeover and state.committed is not None:  # what it read: at or below
                    msg = replace(msg, offset=max(0, state.committed - msg.offset % 3))
        rec = CoordRecord(0, len(out), r.timestamp_ms, record_key(msg), encode(msg))
        trial = world.copy()
        e = fold(trial, rec)
        if isinstance(e, ev.ClaimRejected | ev.HeartbeatRejected | ev.ReleaseRejected):
            continue
        if isinstance(e, ev.MessagesRejected):
            continue
        world = trial
        out.append(rec)
        below = (
            isinstance(e, ev.HeartbeatAccepted)
            and e.replaced_instance is not None
            and e.message.offset < (resume_offset(world.claims[e.key], Mode.AMO) or 0)
        )
        if isinstance(e, ev.ClaimGranted) or below:
            assert isinstance(e, ev.ClaimGranted | ev.HeartbeatAccepted)
            start = resume_offset(world.claims[e.key], Mode.AMO) or 0
            m = e.message
            beat = Heartbeat(0, m.instance_id, m.client_id, m.group_id, m.topic, m.partition, start)
            rec = CoordRecord(0, len(out), rec.timestamp_ms, record_key(beat), encode(beat))
            assert isinstance(fold(world, rec), ev.HeartbeatAccepted)
            out.append(rec)
    return out


def compacted(records: list[CoordRecord], cuts: list[int]) -> list[CoordRecord]:
    """``records`` after Kafka's cleaner ran once per cut (a log-time index into them)."""
    clock = iter(r.timestamp_ms for r in records)
    topic = MemoryTopic(1, lambda: next(clock))
    for r in records:
        assert r.key is not None and r.value is not None
        topic.append(0, r.key, r.value)
    times = [r.timestamp_ms for r in records]
    for cut in sorted(cuts):
        topic.compact(times[min(cut, len(times) - 1)])
    return topic.read(0, 0)


@PROPERTY
@given(behaved_logs(), st.integers(0, 80), st.integers(0, 80))
def test_compacted_reader_resumes_where_the_full_reader_does(
    records: list[CoordRecord], cut_at: int, cut_again: int
) -> None:
    """Positions, not only grants: after compaction, every claim resumes (ALO and AMO) where a
    reader of the whole log resumes it, rewinds by the pausing client (set-position) included."""
    if not records:
        return
    full, _ = fold_all(records)
    late, _ = fold_all(compacted(records, [cut_at, cut_again]))
    for key in full.claims.keys() | late.claims.keys():
        for mode in Mode:
            want = resume_offset(full.claims.get(key), mode)
            got = resume_offset(late.claims.get(key), mode)
            assert got == want, (key, mode, want, got)
