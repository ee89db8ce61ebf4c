"""The rationalizer on compacted history: uncertain claims never grant what the full log refuses."""

from __future__ import annotations

from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.memlog import MemoryLog, MemoryTopic
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import (
    RationalizerConfig,
    World,
    claim_label,
    fold,
    resume_offset,
)
from marshal_workers.protocol.wire import ClaimKey, CoordRecord, ReleaseGroup, encode, record_key
from tests.support import GROUP, HB, TOPIC, Log, claim, hb, pause, record, release, reserve

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


def fresh_reader(topic: MemoryTopic) -> FoldedLog:
    reader = FoldedLog(MemoryLog(topic), RationalizerConfig(HB))
    reader.catch_up(1.0)
    return reader


def long_held_claim() -> tuple[MemoryTopic, Clock, FoldedLog]:
    """a claims at 0 and heartbeats every HB/2 until 100*HB; a full reader follows along."""
    clock = Clock()
    topic = MemoryTopic(1, clock)
    full = FoldedLog(MemoryLog(topic), RationalizerConfig(HB))
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
        """On an uncertain claim a release (its writer's own refused one included)
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


class TestPositionsSurviveTheCleaner:
    """A claim's position must survive the cleaner whatever record of the claim
    was written last (a refused claim during a pause or a fresh hold, a claim never followed by
    a heartbeat): claims are keyed apart from the records that carry positions."""

    def test_a_refused_claim_written_last_does_not_erase_the_position(self) -> None:
        """a holds at 310 and crashes; b's refused claim is the claim's newest record; after
        the cleaner, a fresh reader still resumes at 310, and so does the next winner (the
        whole log refuses any reservation below 310: before, the reader accepted one from 0)."""
        clock = Clock()
        topic = MemoryTopic(1, clock)
        write(topic, clock, 0, claim("a"))
        for i in range(1, 11):
            write(topic, clock, i * HB // 2, hb("a", 300 + i))
        write(topic, clock, 6 * HB, claim("b"))  # refused: a's claim is fresh
        assert topic.compact(clean_before_ms=100 * HB) > 0
        late = fresh_reader(topic)
        assert resume_offset(late.worlds[0].claims[KEY], Mode.AMO) == 310
        write(topic, clock, 100 * HB, claim("c"))
        (granted,) = late.poll(0)
        assert isinstance(granted, ev.ClaimGranted)
        assert resume_offset(late.worlds[0].claims[KEY], Mode.AMO) == 310
        write(topic, clock, 100 * HB + 1, reserve("c", 60))
        (reservation,) = late.poll(0)
        assert isinstance(reservation, ev.MessagesRejected)

    def test_claims_and_positions_have_keys_of_their_own(self) -> None:
        """The claim record's key is the claim's plus `/claim`; positions keep the claim's."""
        assert record_key(claim("a")) == f"{GROUP}/{TOPIC}/0/claim".encode()
        assert record_key(hb("a", 5)) == f"{GROUP}/{TOPIC}/0".encode()
        assert record_key(release("a", 5)) == record_key(reserve("a", 5))

    def test_a_claim_under_the_old_key_is_read_and_its_lost_position_is_not_guessed(
        self,
    ) -> None:
        """A log written before the keys were split: the claim under the claim's own key is
        still a claim; if after a gap it is all that survives of a claim with history, its
        position is unknown and nobody is granted it (a start looked up in the data topic
        would hand out handled records again, or skip some)."""
        world = World(RationalizerConfig(HB), 0)
        fold(world, record(claim("x", part=1), 0, 0))
        legacy = claim("a")
        old = CoordRecord(0, 5, 10, f"{GROUP}/{TOPIC}/0".encode(), encode(legacy))
        assert isinstance(fold(world, old), ev.ClaimRejected)  # uncertain: waits for silence
        again = CoordRecord(0, 6, 10 + 3 * HB, f"{GROUP}/{TOPIC}/0".encode(), encode(claim("b")))
        event = fold(world, again)
        assert isinstance(event, ev.ClaimRejected) and "position unknown" in event.reason
        assert world.malformed == 0


class TestPausesSurviveTheCleaner:
    def test_a_pause_and_its_lift_have_keys_of_their_own(self) -> None:
        """A lift no longer supersedes its pause: after the cleaner, a reader still
        sees the pause in force at the log time of the records written under it (a claim
        refused during the pause, a set-position rewind)."""
        clock = Clock()
        topic = MemoryTopic(1, clock)
        write(topic, clock, 0, claim("a"))
        write(topic, clock, 10, pause("admin", 100))  # paused until 100 s
        write(topic, clock, 20, claim("b"))  # refused: paused
        write(topic, clock, 30, pause("admin", 0))  # the lift
        write(topic, clock, 40, claim("a", part=1))
        topic.compact(clean_before_ms=35)
        seen: list[ev.Event] = []
        reader = FoldedLog(MemoryLog(topic), RationalizerConfig(HB))
        reader.catch_up(1.0, seen.append)
        paused = [e for e in seen if isinstance(e, ev.GroupPaused)]
        assert [e.until_ms for e in paused] == [100_000, 0]
        assert record_key(pause("admin", 100)) != record_key(pause("admin", 0))

    def test_two_pauses_with_one_end_are_both_kept(self) -> None:
        """Found by hypothesis (the compaction sweep): two pauses of one group with one end (two
        `release-group --until` runs) shared one key; the cleaner kept only the later one, and a
        reader of what survived granted b's claim written between them, which the whole log
        refused (paused). A pause's key now names its writer, so both survive."""
        clock = Clock()
        topic = MemoryTopic(1, clock)
        first = ReleaseGroup(0, "admin-1", "admin", GROUP, "", 0, 25)
        again = ReleaseGroup(10, "admin-2", "admin", GROUP, "", 0, 25)
        write(topic, clock, 0, first)
        write(topic, clock, 3_000, claim("b"))  # refused: paused until 25 s
        write(topic, clock, 10_000, again)
        write(topic, clock, 11_000, hb("x", 1, part=1))
        whole: list[ev.Event] = []
        FoldedLog(MemoryLog(topic), RationalizerConfig(HB)).catch_up(1.0, whole.append)
        topic.compact(clean_before_ms=10_500)
        seen: list[ev.Event] = []
        FoldedLog(MemoryLog(topic), RationalizerConfig(HB)).catch_up(1.0, seen.append)
        assert [type(e) for e in whole if e.coord_offset == 1] == [ev.ClaimRejected]
        assert [type(e) for e in seen if e.coord_offset == 1] == [ev.ClaimRejected]
        assert record_key(first) != record_key(again)

    def test_a_pause_under_the_groups_old_key_is_still_read(self) -> None:
        """A log written before pauses were keyed apart: the pause under the group's name."""
        world = World(RationalizerConfig(HB), 0)
        msg = pause("admin", 100)
        event = fold(world, CoordRecord(0, 0, 10, GROUP.encode(), encode(msg)))
        assert isinstance(event, ev.GroupPaused) and world.malformed == 0
        keyed = fold(world, CoordRecord(0, 1, 20, f"{GROUP}/pause/100".encode(), encode(msg)))
        assert isinstance(keyed, ev.GroupPaused) and world.malformed == 0  # group/end: read too


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
        full = FoldedLog(MemoryLog(topic), RationalizerConfig(HB))
        slow = FoldedLog(MemoryLog(topic), RationalizerConfig(HB))
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
        slow = FoldedLog(MemoryLog(topic), RationalizerConfig(HB))
        write(topic, clock, 0, claim("a"))
        write(topic, clock, 10, hb("a", 1))
        slow.catch_up(1.0)
        write(topic, clock, 20, release("a", 5))
        write(topic, clock, 30, claim("b"))
        write(topic, clock, 35, hb("b", 6))  # supersedes a's release (the positions' key)
        write(topic, clock, 38, claim("c"))  # refused; supersedes b's grant (the claims' key)
        write(topic, clock, 40, claim("a", part=1))  # another key, so the cut leaves a gap
        write(topic, clock, 50, hb("b", 7))
        topic.compact(clean_before_ms=45)  # removes a's release and b's grant
        seen: list[ev.Event] = []
        slow.catch_up(1.0, seen.append)
        state = slow.worlds[0].claims[KEY]
        assert not state.certain
        assert isinstance(seen[-1], ev.Unverified)
