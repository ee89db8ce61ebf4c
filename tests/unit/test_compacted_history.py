"""The rationalizer on compacted history: uncertain claims never grant what the full log refuses."""

from __future__ import annotations

from marshal_workers.log.memlog import MemoryLog, MemoryTopic
from marshal_workers.log.reader import LogReader
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import (
    RationalizerConfig,
    World,
    claim_label,
    fold,
    resume_offset,
)
from marshal_workers.protocol.wire import ClaimKey, encode, record_key
from tests.support import GROUP, HB, TOPIC, Log, claim, hb, pause, record, release

KEY = ClaimKey(GROUP, TOPIC, 0)


class Clock:
    """A settable broker clock in ms."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def write(topic: MemoryTopic, clock: Clock, t: int, msg: object) -> ev.Event | None:
    clock.now = t
    topic.append(0, record_key(msg), encode(msg))  # type: ignore[arg-type]
    return None


def fresh_reader(topic: MemoryTopic) -> LogReader:
    reader = LogReader(MemoryLog(topic), RationalizerConfig(HB))
    reader.catch_up(1.0)
    return reader


def long_held_claim() -> tuple[MemoryTopic, Clock, LogReader]:
    """a claims at 0 and heartbeats every HB/2 until 100*HB; a full reader follows along."""
    clock = Clock()
    topic = MemoryTopic(1, clock)
    full = LogReader(MemoryLog(topic), RationalizerConfig(HB))
    write(topic, clock, 0, claim("a"))
    for i in range(1, 201):
        write(topic, clock, i * HB // 2, hb("a", i))
    full.catch_up(1.0)
    return topic, clock, full


class TestCertainty:
    def test_claims_first_seen_before_any_gap_are_certain(self) -> None:
        """With offsets gap-free so far, a claim's whole history is in front of the fold."""
        log = Log()
        log.at(0, claim("a"))
        assert log.world.claims[KEY].certain

    def test_claim_first_seen_after_a_gap_is_uncertain(self) -> None:
        """After an offset gap, a newly seen claim may have lost its start: uncertain."""
        world = World(RationalizerConfig(HB), 0)
        fold(world, record(claim("x", part=1), 0, 0))
        e = fold(world, record(hb("a", 5), 3, 10))
        assert isinstance(e, ev.Unverified)
        assert world.gap_seen and not world.claims[KEY].certain
        # x's claim was folded before the gap, which may hide x's later records (a reader that
        # fell behind the cleaner): it is uncertain now too, active until the gap
        before = world.claims[ClaimKey(GROUP, TOPIC, 1)]
        assert not before.certain and before.last_activity == 10

    def test_uncertain_first_claim_waits_for_silence(self) -> None:
        """A claim that is the first visible record of an uncertain claim is not granted."""
        world = World(RationalizerConfig(HB), 0)
        e = fold(world, record(claim("b"), 5, 10 * HB))
        assert isinstance(e, ev.ClaimRejected) and "silence" in e.reason

    def test_uncertain_claim_wins_after_two_hb_of_silence_and_becomes_certain(self) -> None:
        """After activity and then more than 2*HB without records, a claim wins and is certain."""
        world = World(RationalizerConfig(HB), 0)
        fold(world, record(hb("a", 5), 5, 0))
        assert isinstance(fold(world, record(claim("b"), 6, 2 * HB)), ev.ClaimRejected)
        e = fold(world, record(claim("b"), 7, 4 * HB + 1))
        assert isinstance(e, ev.ClaimGranted) and e.token == 7
        state = world.claims[KEY]
        assert state.certain and state.holder_client == "b"

    def test_uncertain_position_is_the_largest_offset_seen(self) -> None:
        """Unsure which reports were valid, the fold keeps the largest offset (nothing is redone
        in AMO; in ALO those offsets were handled by whoever reported them)."""
        world = World(RationalizerConfig(HB), 0)
        fold(world, record(hb("a", 50), 1, 0))
        fold(world, record(hb("b", 30), 2, 1))
        fold(world, record(release("a", 40), 3, 2))
        assert resume_offset(world.claims[KEY], Mode.ALO) == 50
        assert claim_label(world.claims[KEY], 2, HB) == "fresh"


    def test_an_uncertain_release_never_makes_its_writer_the_holder(self) -> None:
        """Issue 18.2: on an uncertain claim a release (its writer's own refused one included)
        is no proof of holding: the holder stays whoever heartbeated, so a member never reads
        its own stale release back as 'I hold it' and writes it again forever."""
        world = World(RationalizerConfig(HB), 0)
        fold(world, record(hb("a", 50), 1, 0))
        fold(world, record(release("b", 40), 2, 1))
        state = world.claims[KEY]
        assert (state.holder_client, state.committed) == ("a", 50)
        world = World(RationalizerConfig(HB), 0)
        fold(world, record(release("b", 40), 1, 0))  # the only record that survived the cleaner
        assert world.claims[KEY].holder_client is None


class TestCompactedLog:
    def test_long_held_claim_is_not_lost_to_a_fresh_reader(self) -> None:
        """A holder's ClaimingPartition compacted away: a rival still cannot take the claim."""
        topic, clock, full = long_held_claim()
        assert topic.compact(clean_before_ms=90 * HB) > 0
        late = fresh_reader(topic)
        assert not late.worlds[0].claims[KEY].certain
        write(topic, clock, 100 * HB + 10, claim("b"))
        (e_full,) = full.poll(0)
        (e_late,) = late.poll(0)
        assert isinstance(e_full, ev.ClaimRejected) and isinstance(e_late, ev.ClaimRejected)

    def test_after_the_holder_dies_both_readers_grant_the_same_claim(self) -> None:
        """Once the holder is silent for 2*HB, full and compacted readers agree on the winner."""
        topic, clock, full = long_held_claim()
        topic.compact(clean_before_ms=90 * HB)
        late = fresh_reader(topic)
        write(topic, clock, 103 * HB, claim("b"))
        (e_full,) = full.poll(0)
        (e_late,) = late.poll(0)
        assert isinstance(e_full, ev.ClaimGranted) and isinstance(e_late, ev.ClaimGranted)
        assert e_full.token == e_late.token
        assert resume_offset(late.worlds[0].claims[KEY], Mode.ALO) == 200
        write(topic, clock, 103 * HB + 5, hb("b", 201))
        assert [type(e) for e in full.poll(0)] == [type(e) for e in late.poll(0)]


class TestRewindAfterCompaction:
    def test_set_position_rewind_is_kept_by_a_reader_that_starts_after_compaction(self) -> None:
        """The issue's case: a holder at 500 releases, the admin that paused the group claims,
        heartbeats and releases at 100; compacted so that the rewind is read on an uncertain
        claim: both readers resume at 100 (the compacted one used to resume at 500)."""
        clock = Clock()
        topic = MemoryTopic(1, clock)
        write(topic, clock, 0, claim("a"))
        write(topic, clock, 10, hb("a", 500))
        write(topic, clock, 20, release("a", 500))
        write(topic, clock, 30, claim("a", part=1))  # another claim: the cut leaves a gap
        write(topic, clock, 40, pause("ops", 3600))
        write(topic, clock, 50, claim("ops"))
        write(topic, clock, 60, hb("ops", 100))
        write(topic, clock, 70, release("ops", 100))
        full = fresh_reader(topic)
        topic.compact(clean_before_ms=50)  # keeps a's release at 500, drops its claim
        late = fresh_reader(topic)
        assert not late.worlds[0].claims[KEY].certain
        for mode in Mode:
            assert resume_offset(full.worlds[0].claims[KEY], mode) == 100
            assert resume_offset(late.worlds[0].claims[KEY], mode) == 100


class TestReadingAcrossACleaning:
    def test_a_reader_behind_the_cleaner_does_not_grant_what_the_full_log_refuses(self) -> None:
        """A reader that folded a's claim and its first heartbeats, then fell behind while the
        cleaner removed a's next heartbeats, sees its prefix, a gap, then a's surviving
        heartbeat more than 2*HB after the last one it saw: the removed heartbeats kept the
        claim fresh, so b's claim right after must be refused, as the full log refuses it
        (marshal-sim seed 165: a frozen member granted itself a fresh claim)."""
        clock = Clock()
        topic = MemoryTopic(1, clock)
        full = LogReader(MemoryLog(topic), RationalizerConfig(HB))
        slow = LogReader(MemoryLog(topic), RationalizerConfig(HB))
        write(topic, clock, 0, claim("a"))
        for i in range(1, 5):
            write(topic, clock, i * HB // 2, hb("a", i))
        slow.catch_up(1.0)  # up to a's heartbeat at 2*HB, then it stalls
        for i in range(5, 21):
            write(topic, clock, i * HB // 2, hb("a", i))
        assert topic.compact(clean_before_ms=10 * HB) > 0  # keeps a's heartbeat at 9.5*HB
        write(topic, clock, 10 * HB + 10, claim("b"))
        seen_full: list[ev.Event] = []
        seen_slow: list[ev.Event] = []
        full.catch_up(1.0, seen_full.append)
        slow.catch_up(1.0, seen_slow.append)
        assert isinstance(seen_full[-1], ev.ClaimRejected)
        assert isinstance(seen_slow[-1], ev.ClaimRejected)
        state = slow.worlds[0].claims[KEY]
        assert not state.certain, "records of a certain claim may be behind the gap"

    def test_a_certain_claim_read_across_a_cleaning_becomes_uncertain(self) -> None:
        """Behind a gap a claim may have been released and won by another (its grant removed,
        its heartbeats kept): a claim folded before the gap is no longer certain after it."""
        clock = Clock()
        topic = MemoryTopic(1, clock)
        slow = LogReader(MemoryLog(topic), RationalizerConfig(HB))
        write(topic, clock, 0, claim("a"))
        write(topic, clock, 10, hb("a", 1))
        slow.catch_up(1.0)
        write(topic, clock, 20, release("a", 5))
        write(topic, clock, 30, claim("b"))
        write(topic, clock, 40, claim("a", part=1))  # another key, so the cut leaves a gap
        write(topic, clock, 50, hb("b", 7))
        topic.compact(clean_before_ms=45)  # removes a's release and b's grant
        seen: list[ev.Event] = []
        slow.catch_up(1.0, seen.append)
        state = slow.worlds[0].claims[KEY]
        assert not state.certain
        assert isinstance(seen[-1], ev.Unverified)
