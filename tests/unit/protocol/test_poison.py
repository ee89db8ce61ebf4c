"""Poison records in the coordination log (marshal_workers.protocol.recordfailures): the wire
format, each rule of the fold (through the rationalizer, as every reader folds them), and what
members do."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from marshal_workers.admin.records import refusal
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.memlog import MemoryLog, MemoryTopic
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.groupstatus import group_status, render_table
from marshal_workers.protocol.rationalizer import RationalizerConfig, fold
from marshal_workers.protocol.recordfailures import (
    MAX_ERROR_CHARS,
    Action,
    Outcome,
    PoisonCleared,
    PoisonNoted,
    PoisonRejected,
    PoisonResolved,
    PoisonState,
    RecordFailed,
    Step,
    decode_poison,
    encode_poison,
    escape,
    park_outcome,
    poison_action,
    poison_key,
    poison_record_key,
    unescape,
)
from marshal_workers.protocol.wire import ClaimKey, CoordRecord, DecodeError, encode, record_key
from tests.support import GROUP, HB, TOPIC, Log, claim, hb, release

KEY = ClaimKey(GROUP, TOPIC, 0)


def failed(
    client: str, offset: int, outcome: Outcome = Outcome.RETRY, error: str = "boom", part: int = 0
) -> RecordFailed:
    return RecordFailed(0, f"{client}-1", client, GROUP, TOPIC, part, offset, 1, outcome, error)


def resolved(client: str, offset: int, action: Action) -> PoisonResolved:
    return PoisonResolved(0, f"{client}-1", client, GROUP, TOPIC, 0, offset, action)


def at(log: Log, t: int, msg: RecordFailed | PoisonResolved, key: bytes | None = None) -> object:
    """Fold a poison message as the log's next record at log time ``t``."""
    k = ClaimKey(msg.group_id, msg.topic, msg.partition)
    rec = CoordRecord(0, log.world.next_offset, t, key or poison_key(k), encode_poison(msg))
    return log.raw(rec)


def held_by_a() -> Log:
    log = Log(RationalizerConfig(HB, admin_client_ids=frozenset({"admin"})))
    log.at(0, claim("a"))
    log.at(100, hb("a", 40))
    return log


class TestWireFormat:
    def test_round_trip(self) -> None:
        """Both messages decode to what was encoded, error text included."""
        for msg in (
            failed("a", 7, Outcome.PARKED, "ValueError: x/y 100% \n bad"),
            resolved("admin", 7, Action.SKIP),
        ):
            assert decode_poison(encode_poison(msg)) == msg

    def test_the_error_never_carries_a_slash_and_is_cut(self) -> None:
        """'/' and control characters are escaped; the text is cut to MAX_ERROR_CHARS."""
        text = escape("a/b\nc" + "x" * 1000)
        assert "/" not in text and "\n" not in text
        assert unescape(text) == ("a/b\nc" + "x" * 1000)[:MAX_ERROR_CHARS]

    @pytest.mark.parametrize(
        "value",
        [
            b"RecordFailed/1/0/a-1/a/g/orders/0/7/1/retry",  # a field short
            b"RecordFailed/2/0/a-1/a/g/orders/0/7/1/retry/e",  # unknown version
            b"RecordFailed/1/0/a-1/a/g/orders/0/7/1/maybe/e",  # unknown outcome
            b"RecordFailed/1/0/a-1/a/g/orders/0/-7/1/retry/e",  # negative offset
            b"RecordFailed/1/0/a-1/a/g/orders/0/7/1/retry/%G1",  # a broken escape
            b"PoisonResolved/1/0/m-1/m/g/orders/0/7/forget",  # unknown action
        ],
    )
    def test_malformed_poison_records_are_refused(self, value: bytes) -> None:
        """Anything off is a DecodeError naming the problem."""
        with pytest.raises(DecodeError):
            decode_poison(value)


class TestRecordFailed:
    def test_the_holder_counts_a_failure(self) -> None:
        """From the holder instance, not stale: the state is on that offset, count 1."""
        log = held_by_a()
        e = at(log, 200, failed("a", 40, error="ValueError: bad"))
        assert isinstance(e, PoisonNoted)
        assert log.world.poison[KEY] == PoisonState(40, 1, False, "ValueError: bad", "a", 200)

    def test_failures_add_up_across_members(self) -> None:
        """b claims after a let the claim go stale; b's failure on the same offset is the 2nd."""
        log = held_by_a()
        at(log, 200, failed("a", 40))
        log.at(100 + 2 * HB + 1, claim("b"))
        at(log, 100 + 2 * HB + 2, failed("b", 40))
        assert log.world.poison[KEY].failures == 2
        assert log.world.poison[KEY].client_id == "b"

    def test_another_offset_starts_a_new_count(self) -> None:
        """A failure on a later offset counts from 1."""
        log = held_by_a()
        at(log, 200, failed("a", 40))
        at(log, 300, failed("a", 41))
        assert log.world.poison[KEY].failures == 1 and log.world.poison[KEY].offset == 41

    def test_the_writers_parked_outcome_parks(self) -> None:
        """Outcome parked parks the record."""
        log = held_by_a()
        at(log, 200, failed("a", 40, Outcome.PARKED))
        assert log.world.poison[KEY].parked

    def test_a_non_holder_cannot_write_a_failure(self) -> None:
        """b does not hold the claim: refused, state unchanged."""
        log = held_by_a()
        at(log, 200, failed("a", 40))
        before = dict(log.world.poison)
        e = at(log, 300, failed("b", 40, Outcome.PARKED))
        assert isinstance(e, PoisonRejected) and "not the holder" in e.reason
        assert log.world.poison == before

    def test_a_stale_holder_cannot_write_a_failure(self) -> None:
        """Past 2*HB since a's last heartbeat: refused."""
        log = held_by_a()
        e = at(log, 100 + 2 * HB + 1, failed("a", 40))
        assert isinstance(e, PoisonRejected) and e.reason == "claim is stale"
        assert KEY not in log.world.poison

    def test_a_wrong_key_is_malformed(self) -> None:
        """The record key must be the claim key plus /poison."""
        log = held_by_a()
        e = at(log, 200, failed("a", 40), key=b"g/orders/0")
        assert isinstance(e, ev.Malformed) and KEY not in log.world.poison

    def test_a_poison_record_on_the_wrong_coordination_partition_is_malformed(self) -> None:
        """With the partition count known, the claim's home partition is checked."""
        log = Log(RationalizerConfig(HB, num_partitions=64))
        rec = CoordRecord(0, 0, 1, poison_key(KEY), encode_poison(failed("a", 1)))
        e = fold(log.world, rec)
        assert isinstance(e, ev.Malformed) and "belongs on" in e.reason


class TestPoisonResolved:
    @pytest.mark.parametrize("action", [Action.SKIP, Action.RETRY])
    def test_an_admin_unparks(self, action: Action) -> None:
        """skip: unparked and skipped; retry: unparked with the count back to 0."""
        log = held_by_a()
        at(log, 200, failed("a", 40, Outcome.PARKED))
        e = at(log, 300, resolved("admin", 40, action))
        assert isinstance(e, PoisonCleared)
        state = log.world.poison[KEY]
        assert not state.parked
        assert state.skipped is (action is Action.SKIP)
        assert state.failures == (1 if action is Action.SKIP else 0)

    def test_a_non_admin_cannot_resolve(self) -> None:
        """A worker (or anyone not in admin_client_ids) is refused; state unchanged."""
        log = held_by_a()
        at(log, 200, failed("a", 40, Outcome.PARKED))
        before = dict(log.world.poison)
        e = at(log, 300, resolved("a", 40, Action.SKIP))
        assert isinstance(e, PoisonRejected) and log.world.poison == before

    def test_only_the_failing_offset_can_be_resolved(self) -> None:
        """A resolution for another offset (or none failing) is refused."""
        log = held_by_a()
        assert isinstance(at(log, 150, resolved("admin", 40, Action.SKIP)), PoisonRejected)
        at(log, 200, failed("a", 40, Outcome.PARKED))
        assert isinstance(at(log, 300, resolved("admin", 39, Action.SKIP)), PoisonRejected)
        assert log.world.poison[KEY].parked


class CompactedPoisonLog:
    """A one-partition coordination log at chosen log times, compacted like Kafka's cleaner."""

    def __init__(self) -> None:
        self.now = 0
        self.topic = MemoryTopic(1, lambda: self.now)
        self.config = RationalizerConfig(HB, admin_client_ids=frozenset({"admin"}))

    def write(self, t: int, msg: object) -> None:
        self.now = t
        if isinstance(msg, RecordFailed | PoisonResolved):
            self.topic.append(0, poison_record_key(msg), encode_poison(msg))
        else:
            self.topic.append(0, record_key(msg), encode(msg))  # type: ignore[arg-type]

    def reader(self) -> FoldedLog:
        reader = FoldedLog(MemoryLog(self.topic), self.config)
        reader.catch_up(1.0)
        return reader

    def a_failed_three_times_and_released(self) -> None:
        """a holds, fails on 40 three times (counted 1, 2, 3), releases; then another claim."""
        self.write(0, claim("a"))
        for n in range(1, 4):
            self.write(n * HB // 2, hb("a", 40))
            self.write(n * HB // 2 + 1, replace(failed("a", 40), failures=n))
        self.write(2 * HB, release("a", 40))
        self.write(2 * HB + 10, claim("a", part=1))  # another key: the cut leaves a gap


class TestAfterCompaction:
    def test_a_failure_count_survives_compaction(self) -> None:
        """The newest RecordFailed survives its claim's grant and heartbeats: a reader of the
        compacted log cannot verify its writer, and takes the writer's count, as the whole log
        has it (it used to refuse it as "not the holder" and count from 1 again: marshal-sim
        seed 12 of the default faults, a record tried 6 times with poison_park_after 4)."""
        log = CompactedPoisonLog()
        log.a_failed_three_times_and_released()
        full = log.reader()
        assert full.worlds[0].poison[KEY].failures == 3
        assert log.topic.compact(clean_before_ms=2 * HB + 20) > 0
        late = log.reader()
        assert not late.worlds[0].claims[KEY].certain
        state = late.worlds[0].poison[KEY]
        assert (state.offset, state.failures, state.parked) == (40, 3, False)
        assert park_outcome(state, 40, park_after=4) == (4, Outcome.PARKED)

    def test_a_parked_record_stays_parked_after_compaction(self) -> None:
        """The writer's outcome parked holds for a reader of the compacted log too."""
        log = CompactedPoisonLog()
        log.a_failed_three_times_and_released()
        log.write(3 * HB, claim("b"))
        log.write(3 * HB + 1, replace(failed("b", 40, Outcome.PARKED), failures=4))
        log.write(3 * HB + 2, hb("b", 40))
        log.write(3 * HB + 3, claim("a", part=2))
        log.topic.compact(clean_before_ms=3 * HB + 3)
        state = log.reader().worlds[0].poison[KEY]
        assert (state.failures, state.parked) == (4, True)

    @pytest.mark.parametrize("action", [Action.SKIP, Action.RETRY])
    def test_an_operators_decision_survives_compaction(self, action: Action) -> None:
        """A PoisonResolved whose RecordFailed was compacted away still unparks (it used to be
        refused with nothing to resolve, and the record was tried again from a count of 1)."""
        log = CompactedPoisonLog()
        log.a_failed_three_times_and_released()
        log.write(3 * HB, resolved("admin", 40, action))
        log.write(3 * HB + 1, claim("a", part=2))
        log.topic.compact(clean_before_ms=3 * HB + 1)
        state = log.reader().worlds[0].poison[KEY]
        assert state.offset == 40 and not state.parked
        assert state.skipped is (action is Action.SKIP)

    @pytest.mark.parametrize(
        "refused",
        [resolved("admin", 41, Action.RETRY), resolved("mallory", 40, Action.SKIP)],
        ids=["another-offset", "not-an-admin"],
    )
    def test_a_refused_decision_does_not_erase_the_count(self, refused: PoisonResolved) -> None:
        """marshal-sim (poison,compaction, seeds 7 and 9, 2026-11-27): a decision the log
        refuses (an offset that is not the failing record's, a client that is no admin) was
        written under the key of the claim's failure counts, so the cleaner kept it alone and a
        compacted reader counted from nothing: 6 and 7 failures for a park after 4. Decisions
        have a key of their own, and a compacted reader applies one only to the offset its
        surviving count is on."""
        log = CompactedPoisonLog()
        log.a_failed_three_times_and_released()
        log.write(3 * HB, refused)
        log.write(3 * HB + 1, claim("a", part=2))
        full = log.reader().worlds[0].poison[KEY]
        assert (full.offset, full.failures) == (40, 3)
        assert log.topic.compact(clean_before_ms=3 * HB + 1) > 0
        late = log.reader().worlds[0].poison[KEY]
        assert (late.offset, late.failures, late.parked) == (40, 3, False)

    @pytest.mark.parametrize("action", [Action.SKIP, Action.RETRY])
    def test_a_decision_under_the_counts_key_is_read_but_not_applied_alone(
        self, action: Action
    ) -> None:
        """A log written before decisions had a key of their own: the cleaner kept a decision
        alone under the counts' key. It is read (not malformed), but with no count before it a
        compacted reader cannot tell a valid decision from a refused one, and a skip taken on
        that guess would skip a record in ALO (marshal-sim, the simulator's operator skipping
        under the old key: alo_no_skip at seed 7 of poison,compaction): it is refused."""
        log = CompactedPoisonLog()
        log.a_failed_three_times_and_released()
        decision = resolved("admin", 41, action)  # another offset: the whole log refuses it
        log.now = 3 * HB
        log.topic.append(0, poison_key(KEY), encode_poison(decision))
        log.write(3 * HB + 1, claim("a", part=2))
        full = log.reader().worlds[0].poison[KEY]
        assert (full.offset, full.failures, full.skipped) == (40, 3, False)
        log.topic.compact(clean_before_ms=3 * HB + 1)
        late = log.reader()
        assert late.worlds[0].malformed == 0
        assert KEY not in late.worlds[0].poison  # the count it erased is lost; no skip

    def test_a_certain_claims_holder_is_still_checked(self) -> None:
        """With the claim's history in front of the fold, a non-holder's count is refused."""
        log = held_by_a()
        e = at(log, 200, replace(failed("b", 40), failures=9))
        assert isinstance(e, PoisonRejected) and KEY not in log.world.poison


class TestMembers:
    def test_park_after_the_configured_total(self) -> None:
        """The count goes on from the log's; parked at the total (0: never)."""
        state = PoisonState(40, 2, False, "e", "a", 0)
        assert park_outcome(state, 40, park_after=3) == (3, Outcome.PARKED)
        assert park_outcome(state, 40, park_after=4) == (3, Outcome.RETRY)
        assert park_outcome(state, 41, park_after=3) == (1, Outcome.RETRY)
        assert park_outcome(state, 40, park_after=0) == (3, Outcome.RETRY)

    def test_what_a_holder_does(self) -> None:
        """Parked at its position: park; past it: run; skipped: skip; park time over: run."""
        parked = PoisonState(40, 5, True, "e", "a", 1000)
        assert poison_action(parked, 40, now_ms=2000, park_time_ms=0) is Step.PARK
        assert poison_action(parked, 41, now_ms=2000, park_time_ms=0) is Step.RUN
        assert poison_action(parked, 40, now_ms=2000, park_time_ms=5000) is Step.PARK
        assert poison_action(parked, 40, now_ms=6000, park_time_ms=5000) is Step.RUN
        skipped = PoisonState(40, 5, False, "e", "a", 1000, skipped=True)
        assert poison_action(skipped, 40, now_ms=2000, park_time_ms=0) is Step.SKIP
        assert poison_action(None, 40, now_ms=0, park_time_ms=0) is Step.RUN


class TestStatus:
    def test_status_shows_a_parked_record_with_its_offset_and_error(self) -> None:
        """marshal-admin status: the claim's poison (JSON) and a PARKED line (text); gone once
        the position is past the record."""
        log = held_by_a()
        at(log, 200, failed("a", 40, Outcome.PARKED, "ValueError: bad row"))
        status = group_status(GROUP, {0: log.world}, HB, 300, {})
        (claim,) = [c.to_json() for c in status.claims]
        assert claim["poison"] == {
            "offset": 40,
            "failures": 1,
            "parked": True,
            "last_error": "ValueError: bad row",
            "since": "1970-01-01T00:00:00.200Z",
        }
        assert "PARKED on poison record: orders/0 offset 40" in render_table(status)
        log.at(400, hb("a", 41))
        status = group_status(GROUP, {0: log.world}, HB, 500, {})
        assert "poison" not in status.claims[0].to_json()
        assert "PARKED" not in render_table(status)


class TestAdminRefusal:
    """`marshal-admin skip-record`/`retry-record` refuse on their own fold what the log would,
    and write nothing; after the cleaner their fold may not be a member's, and they write."""

    def session(self, log: CompactedPoisonLog, client: str = "admin") -> object:
        worlds = log.reader().worlds
        return SimpleNamespace(worlds=worlds, partition_of=lambda key: 0, client_id=client)

    def test_a_decision_on_another_offset_or_by_a_non_admin_is_refused(self) -> None:
        log = CompactedPoisonLog()
        log.a_failed_three_times_and_released()
        assert refusal(self.session(log), KEY, 40) is None  # type: ignore[arg-type]
        wrong = refusal(self.session(log), KEY, 41)  # type: ignore[arg-type]
        assert wrong == "nothing to resolve at 41: the failing record is 40"
        mallory = refusal(self.session(log, "mallory"), KEY, 40)  # type: ignore[arg-type]
        assert mallory == "mallory is not an admin client"

    def test_after_the_cleaner_the_offset_is_left_to_the_log(self) -> None:
        """A review of 2026-11-27: a holder that read the whole log may be parked on a record
        the admin's compacted fold does not show; refusing there would leave it parked."""
        log = CompactedPoisonLog()
        log.a_failed_three_times_and_released()
        log.write(3 * HB, claim("a", part=2))
        log.topic.compact(clean_before_ms=3 * HB)
        session = self.session(log)
        assert session.worlds[0].gap_seen  # type: ignore[attr-defined]
        assert refusal(session, KEY, 41) is None  # type: ignore[arg-type]
        mallory = refusal(self.session(log, "mallory"), KEY, 40)  # type: ignore[arg-type]
        assert mallory == "mallory is not an admin client"
