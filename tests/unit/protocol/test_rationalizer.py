"""One test per rule of the rationalizer (docs/design.md, the rationalizer), edges included."""

from __future__ import annotations

import pytest

from marshal_workers.protocol import events as ev
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import (
    Freshness,
    RationalizerConfig,
    World,
    claim_label,
    fold,
    freshness,
    pause_of,
    resume_offset,
)
from marshal_workers.protocol.wire import (
    ClaimingPartition,
    ClaimKey,
    CoordRecord,
    Partitioner,
    encode,
)
from tests.support import GROUP, HB, TOPIC, Log, claim, hb, pause, record, release, reserve

KEY = ClaimKey(GROUP, TOPIC, 0)


def held(log: Log) -> tuple[str | None, str | None]:
    """(client, instance) holding KEY in the log's world."""
    state = log.world.claims[KEY]
    return state.holder_client, state.holder_instance


class TestFreshness:
    def test_below_hb_is_fresh(self) -> None:
        """An age just under HB is fresh."""
        assert freshness(0, HB - 1, HB) is Freshness.FRESH

    def test_exactly_hb_is_unknown(self) -> None:
        """An age of exactly HB is no longer fresh."""
        assert freshness(0, HB, HB) is Freshness.UNKNOWN

    def test_exactly_two_hb_is_unknown(self) -> None:
        """An age of exactly 2*HB is still not stale."""
        assert freshness(0, 2 * HB, HB) is Freshness.UNKNOWN

    def test_past_two_hb_is_stale(self) -> None:
        """An age of 2*HB + 1 ms is stale."""
        assert freshness(0, 2 * HB + 1, HB) is Freshness.STALE


class TestClaimingPartition:
    def test_unclaimed_partition_is_granted_with_offset_as_token(self) -> None:
        """A claim on an unclaimed partition wins; its record offset is the fencing token."""
        log = Log()
        log.at(0, hb("x", 1, part=1))  # another claim's record, to move the offset
        e = log.at(100, claim("a"))
        assert isinstance(e, ev.ClaimGranted)
        assert e.token == 1 and e.previous_client is None
        assert held(log) == ("a", "a-1")
        assert log.world.claims[KEY].last_heartbeat == 100

    def test_rival_claim_while_fresh_is_rejected(self) -> None:
        """A rival's claim on a fresh claim loses and changes nothing."""
        log = Log()
        log.at(0, claim("a"))
        before = log.world.copy()
        e = log.at(500, claim("b"))
        assert isinstance(e, ev.ClaimRejected) and e.holder_client == "a"
        assert log.world.claims == before.claims

    def test_rival_claim_at_exactly_two_hb_is_rejected(self) -> None:
        """At exactly 2*HB after the last heartbeat the claim is not stale yet."""
        log = Log()
        log.at(0, claim("a"))
        assert isinstance(log.at(2 * HB, claim("b")), ev.ClaimRejected)

    def test_rival_claim_after_two_hb_wins_and_names_the_previous_owner(self) -> None:
        """One millisecond past 2*HB the claim is stale and a rival wins it."""
        log = Log()
        log.at(0, claim("a"))
        log.at(10, hb("a", 7))
        e = log.at(10 + 2 * HB + 1, claim("b"))
        assert isinstance(e, ev.ClaimGranted)
        assert e.previous_client == "a" and e.previous_last_heartbeat == 10
        assert held(log) == ("b", "b-1")
        assert log.world.claims[KEY].committed == 7

    def test_released_partition_is_granted(self) -> None:
        """A released claim can be claimed at once."""
        log = Log()
        log.at(0, claim("a"))
        log.at(1, release("a", 9))
        e = log.at(2, claim("b"))
        assert isinstance(e, ev.ClaimGranted) and e.previous_client is None
        assert resume_offset(log.world.claims[KEY], Mode.ALO) == 9

    def test_first_valid_claim_in_log_order_wins(self) -> None:
        """Two claims at the same log time: the earlier offset wins, the later loses."""
        log = Log()
        first, second = log.at(5, claim("a")), log.at(5, claim("b"))
        assert isinstance(first, ev.ClaimGranted) and isinstance(second, ev.ClaimRejected)

    def test_holder_claiming_again_while_fresh_is_rejected(self) -> None:
        """A holder's own second claim while fresh is refused (it must heartbeat instead)."""
        log = Log()
        log.at(0, claim("a"))
        e = log.at(1, claim("a", inst="a-2"))
        assert isinstance(e, ev.ClaimRejected) and e.reason == "already held by this client"
        assert held(log) == ("a", "a-1")

    def test_tokens_grow_with_each_new_claim(self) -> None:
        """Each winning claim gets a larger fencing token than the one before."""
        log = Log()
        t1 = log.at(0, claim("a"))
        log.at(1, release("a", 0))
        t2 = log.at(2, claim("b"))
        assert isinstance(t1, ev.ClaimGranted) and isinstance(t2, ev.ClaimGranted)
        assert t2.token > t1.token

    def test_senders_clock_is_ignored(self) -> None:
        """UnixSec from the sender does not change a decision; only log time does."""
        log = Log()
        log.at(0, claim("a"))
        future = ClaimingPartition(10**11, "b-1", "b", GROUP, TOPIC, 0)  # the year 5138
        assert isinstance(log.at(HB, future), ev.ClaimRejected)


class TestHeartbeat:
    def test_holder_heartbeat_is_accepted_and_records_offset(self) -> None:
        """The holder's heartbeat refreshes the claim and sets the committed offset."""
        log = Log()
        log.at(0, claim("a"))
        e = log.at(HB, hb("a", 5))
        assert isinstance(e, ev.HeartbeatAccepted) and e.offset == 5 and e.token == 0
        state = log.world.claims[KEY]
        assert state.last_heartbeat == HB and state.committed == 5

    def test_non_holder_heartbeat_changes_nothing(self) -> None:
        """A heartbeat from a client that does not hold the claim is rejected, state unchanged."""
        log = Log()
        log.at(0, claim("a"))
        before = log.world.copy()
        e = log.at(10, hb("b", 99))
        assert isinstance(e, ev.HeartbeatRejected) and e.reason == "held by a"
        assert log.world.claims == before.claims

    def test_heartbeat_on_unclaimed_partition_is_rejected(self) -> None:
        """Nobody can heartbeat a claim that was never made."""
        log = Log()
        log.at(0, claim("a", part=1))
        e = log.at(1, hb("a", 3))
        assert isinstance(e, ev.HeartbeatRejected) and e.reason == "not claimed"

    def test_heartbeat_at_exactly_two_hb_is_accepted(self) -> None:
        """At exactly 2*HB the holder may still heartbeat."""
        log = Log()
        log.at(0, claim("a"))
        assert isinstance(log.at(2 * HB, hb("a", 1)), ev.HeartbeatAccepted)

    def test_heartbeat_of_stale_claim_is_rejected(self) -> None:
        """Past 2*HB the holder's heartbeat is invalid: it must claim again."""
        log = Log()
        log.at(0, claim("a"))
        before = log.world.copy()
        e = log.at(2 * HB + 1, hb("a", 1))
        assert isinstance(e, ev.HeartbeatRejected) and e.reason == "claim is stale"
        assert log.world.claims == before.claims

    def test_heartbeat_after_release_is_rejected(self) -> None:
        """A released claim takes no heartbeats."""
        log = Log()
        log.at(0, claim("a"))
        log.at(1, release("a", 4))
        e = log.at(2, hb("a", 8))
        assert isinstance(e, ev.HeartbeatRejected) and e.reason == "released"
        assert log.world.claims[KEY].committed == 4

    def test_new_instance_takes_over_and_old_instance_is_fenced(self) -> None:
        """A new instance of the holder's client takes the claim; the old one is refused after."""
        log = Log()
        log.at(0, claim("a", inst="a-1"))
        e = log.at(100, hb("a", 3, inst="a-2"))
        assert isinstance(e, ev.HeartbeatAccepted) and e.replaced_instance == "a-1"
        assert held(log) == ("a", "a-2")
        old = log.at(200, hb("a", 4, inst="a-1"))
        assert isinstance(old, ev.HeartbeatRejected) and "replaced" in old.reason
        assert isinstance(log.at(300, release("a", 4, inst="a-1")), ev.ReleaseRejected)
        assert held(log) == ("a", "a-2") and log.world.claims[KEY].committed == 3

    def test_takeover_gives_a_new_token_its_own_offset(self) -> None:
        """The takeover record's offset becomes the token, so a sink can refuse the replaced
        instance; later heartbeats and releases carry it."""
        log = Log()
        granted = log.at(0, claim("a", inst="a-1"))
        e = log.at(100, hb("a", 3, inst="a-2"))
        assert isinstance(granted, ev.ClaimGranted) and isinstance(e, ev.HeartbeatAccepted)
        assert e.token == e.coord_offset > granted.token
        later = log.at(200, hb("a", 5, inst="a-2"))
        assert isinstance(later, ev.HeartbeatAccepted) and later.token == e.token
        assert log.world.claims[KEY].token == e.token

    def test_takeover_never_moves_the_position_back(self) -> None:
        """The old instance committed 200 after the new one read 100: the takeover at 100
        keeps 200 (the old instance handled up to there)."""
        log = Log()
        log.at(0, claim("a", inst="a-1"))
        log.at(100, hb("a", 200, inst="a-1"))
        log.at(200, hb("a", 100, inst="a-2"))
        assert log.world.claims[KEY].committed == 200
        log.at(300, hb("a", 150, inst="a-2"))  # the holder itself may go back (its own report)
        assert log.world.claims[KEY].committed == 150

    def test_takeover_never_moves_the_position_forward_either(self) -> None:
        """The new instance looked a start up (the claim had no position when it read), the
        old instance's first heartbeat (100) landed before its takeover at 106: the claim
        stays at 100, which the old instance may have handed to a child; 100..105 skipped
        would be lost unreported (AMO) or never handled (ALO)."""
        log = Log()
        log.at(0, claim("a", inst="a-1"))
        log.at(100, hb("a", 100, inst="a-1"))
        e = log.at(200, hb("a", 106, inst="a-2"))
        assert isinstance(e, ev.HeartbeatAccepted) and e.replaced_instance == "a-1"
        assert log.world.claims[KEY].committed == 100
        log.at(300, hb("a", 106, inst="a-2"))  # the holder's own report moves it
        assert log.world.claims[KEY].committed == 106

    def test_takeover_by_the_pausing_client_sets_the_position_outright(self) -> None:
        """The pausing admin rewinds (set-position), a takeover of its own included."""
        log = Log()
        log.at(0, claim("a", inst="a-1"))
        log.at(100, hb("a", 200, inst="a-1"))
        log.at(150, pause("a", 10))
        log.at(200, hb("a", 100, inst="a-2"))
        assert log.world.claims[KEY].committed == 100

    def test_takeover_of_stale_claim_is_rejected(self) -> None:
        """Restart recovery works only while the claim is not stale."""
        log = Log()
        log.at(0, claim("a", inst="a-1"))
        e = log.at(2 * HB + 1, hb("a", 3, inst="a-2"))
        assert isinstance(e, ev.HeartbeatRejected)
        assert held(log) == ("a", "a-1")


class TestReleasingPartition:
    def test_holder_release_unclaims_and_records_offset(self) -> None:
        """The holder's release leaves the claim released at its offset, with no holder."""
        log = Log()
        log.at(0, claim("a"))
        e = log.at(5, release("a", 42))
        assert isinstance(e, ev.Released) and e.offset == 42
        assert held(log) == (None, None)
        assert claim_label(log.world.claims[KEY], 5, HB) == "released"
        assert log.world.claims[KEY].committed == 42

    def test_non_holder_release_changes_nothing(self) -> None:
        """A release from another client is refused."""
        log = Log()
        log.at(0, claim("a"))
        before = log.world.copy()
        assert isinstance(log.at(1, release("b", 1)), ev.ReleaseRejected)
        assert log.world.claims == before.claims

    def test_release_from_instance_that_has_not_taken_over_is_rejected(self) -> None:
        """A release needs the holder instance itself; a new instance must heartbeat first."""
        log = Log()
        log.at(0, claim("a", inst="a-1"))
        assert isinstance(log.at(1, release("a", 1, inst="a-2")), ev.ReleaseRejected)
        assert held(log) == ("a", "a-1")


class TestClaimingMessages:
    def test_holder_reserves_a_batch_from_its_position(self) -> None:
        """An AMO reservation spans from the current position to the proposed offset, and
        commits it: a reserved record counts as consumed, so the reservation is its own
        committing heartbeat and the position is the same in either mode."""
        log = Log()
        log.at(0, claim("a"))
        log.at(1, hb("a", 10))
        e = log.at(2, reserve("a", 510))
        assert isinstance(e, ev.MessagesClaimed) and (e.start, e.end) == (10, 510)
        state = log.world.claims[KEY]
        assert (state.committed, state.reserved) == (510, 510)
        assert resume_offset(state, Mode.AMO) == 510 and resume_offset(state, Mode.ALO) == 510

    def test_a_compacted_reader_sees_the_reservations_commit(self) -> None:
        """The newest record of a claim's position key may be a reservation (the cleaner took
        the heartbeats before it): a reader of what survives finds the same committed position
        as a reader of the whole log, since the reservation carries it (before, it carried only
        the reservation, and the committed position depended on a heartbeat the cleaner may
        take)."""
        whole = Log()
        whole.at(0, claim("a"))
        whole.at(1, hb("a", 10))
        whole.at(2, reserve("a", 510))
        survivor = Log()
        survivor.at(0, claim("a"))
        survivor.at(2, reserve("a", 510))
        for mode in Mode:
            assert resume_offset(whole.world.claims[KEY], mode) == 510
            assert resume_offset(survivor.world.claims[KEY], mode) == 510

    def test_a_reservation_first_seen_after_a_gap_commits_too(self) -> None:
        """Rule 4 on an uncertain claim (first seen after a gap: the cleaner took what came
        before): the surviving reservation is activity only, and its offset is the position in
        either mode, as it is for a reader of the whole log (decision 18)."""
        log = Log()
        e = log.raw(record(reserve("a", 510), 7, 100))
        assert isinstance(e, ev.Unverified)
        state = log.world.claims[KEY]
        assert (state.committed, state.reserved) == (510, 510)
        assert resume_offset(state, Mode.ALO) == 510 and resume_offset(state, Mode.AMO) == 510

    def test_reservation_behind_the_position_is_rejected(self) -> None:
        """A proposed offset below max(committed, reserved) would hand offsets out twice."""
        log = Log()
        log.at(0, claim("a"))
        log.at(1, reserve("a", 500))
        e = log.at(2, reserve("a", 499))
        assert isinstance(e, ev.MessagesRejected) and "behind" in e.reason
        assert log.world.claims[KEY].reserved == 500

    def test_non_holder_reservation_is_rejected(self) -> None:
        """Only the holder instance can reserve."""
        log = Log()
        log.at(0, claim("a"))
        assert isinstance(log.at(1, reserve("b", 5)), ev.MessagesRejected)
        assert log.world.claims[KEY].reserved is None

    def test_stale_holder_reservation_is_rejected(self) -> None:
        """A holder whose claim went stale cannot reserve."""
        log = Log()
        log.at(0, claim("a"))
        assert isinstance(log.at(2 * HB + 1, reserve("a", 5)), ev.MessagesRejected)

    def test_reservation_outlives_its_owner(self) -> None:
        """A new owner resumes at the old owner's reservation, not at its heartbeat."""
        log = Log()
        log.at(0, claim("a"))
        log.at(1, hb("a", 100))
        log.at(2, reserve("a", 600))
        log.at(3 + 2 * HB, claim("b"))
        state = log.world.claims[KEY]
        assert resume_offset(state, Mode.AMO) == 600
        assert resume_offset(state, Mode.ALO) == 600  # reserved is consumed (rule 4)
        assert isinstance(log.at(4 + 2 * HB, reserve("b", 599)), ev.MessagesRejected)


class TestReleaseGroup:
    def test_pause_refuses_other_clients_claims_until_it_expires(self) -> None:
        """While paused only the pausing client may claim; at the expiry time others can."""
        log = Log()
        e = log.at(1000, pause("admin", 5))
        assert isinstance(e, ev.GroupPaused) and e.until_ms == 5000
        assert pause_of(log.world, GROUP, 4999) is not None
        r = log.at(2000, claim("a"))
        assert isinstance(r, ev.ClaimRejected) and r.reason == "group paused"
        assert isinstance(log.at(2001, claim("admin", part=1)), ev.ClaimGranted)
        assert isinstance(log.at(5000, claim("a")), ev.ClaimGranted)

    def test_holders_heartbeats_stay_valid_while_paused(self) -> None:
        """A pause does not take claims away: holders heartbeat until they release."""
        log = Log()
        log.at(0, claim("a"))
        log.at(10, pause("admin", 100))
        assert isinstance(log.at(20, hb("a", 3)), ev.HeartbeatAccepted)

    def test_pausing_client_sets_position_below_a_reservation(self) -> None:
        """The pausing admin's heartbeat rewinds the position, reservation included."""
        log = Log()
        log.at(0, claim("a"))
        log.at(1, reserve("a", 700))
        log.at(2, release("a", 700))
        log.at(3, pause("admin", 100))
        log.at(4, claim("admin"))
        log.at(5, hb("admin", 50))
        log.at(6, release("admin", 50))
        state = log.world.claims[KEY]
        assert resume_offset(state, Mode.AMO) == 50

    def test_non_admin_pause_is_rejected_when_admins_are_configured(self) -> None:
        """With admin client ids configured, anyone else's ReleaseGroup changes nothing."""
        log = Log(config=RationalizerConfig(HB, admin_client_ids=frozenset({"admin"})))
        e = log.at(0, pause("mallory", 100))
        assert isinstance(e, ev.GroupPauseRejected)
        assert pause_of(log.world, GROUP, 1) is None


class TestMalformedInput:
    @pytest.mark.parametrize(
        "value",
        [
            b"",
            b"garbage",
            None,
            b"\xff\xfe",
            b"Heartbeat/2/0/i/c/g/t/0/1",
            b"Heartbeat/1/0/i/c/g/t/0",
        ],
    )
    def test_bad_records_are_counted_and_skipped(self, value: bytes | None) -> None:
        """Garbage, a wrong version or a short record is counted; the world is unchanged."""
        log = Log()
        log.at(0, claim("a"))
        before = log.world.copy()
        e = log.raw(CoordRecord(0, 1, 5, b"g/orders/0", value))
        assert isinstance(e, ev.Malformed)
        assert log.world.malformed == 1 and log.world.claims == before.claims
        assert log.world.next_offset == 2

    def test_key_that_does_not_match_the_message_is_malformed(self) -> None:
        """A record whose key is not its claim's key would escape compaction's order: refused."""
        log = Log()
        msg = claim("a")
        e = log.raw(CoordRecord(0, 0, 0, b"other", encode(msg)))
        assert isinstance(e, ev.Malformed) and KEY not in log.world.claims

    def test_message_on_the_wrong_coordination_partition_is_malformed(self) -> None:
        """With the partition count known, a misrouted claim is refused (no split brain)."""
        cfg = RationalizerConfig(HB, num_partitions=4, partitioner=Partitioner.MARSHAL_GO)
        world = World(cfg, 0)
        msg = ClaimingPartition(0, "i", "a", GROUP, "test1", 0)  # test1 belongs on 2
        e = fold(world, record(msg, 0, 0))
        assert isinstance(e, ev.Malformed) and "partition 2" in e.reason

    def test_offset_going_backwards_is_refused_without_moving_on(self) -> None:
        """A record at an offset already folded is counted and does not rewind the fold."""
        log = Log()
        log.at(0, claim("a"))
        e = log.raw(record(claim("b"), 0, 10))
        assert isinstance(e, ev.Malformed) and log.world.next_offset == 1
        assert held(log) == ("a", "a-1")


class TestLogTime:
    def test_log_time_never_goes_backwards(self) -> None:
        """A record stamped earlier than the one before is judged at the later time."""
        log = Log()
        log.at(0, claim("a"))
        log.at(3 * HB, claim("b"))  # a is stale: b wins at 3*HB
        e = log.at(0, hb("a", 1))
        assert isinstance(e, ev.HeartbeatRejected) and e.log_time == 3 * HB

    def test_events_say_where_the_record_stands(self) -> None:
        """Every event carries the record's coordination partition and offset."""
        log = Log()
        log.at(0, hb("x", 1, part=1))
        e = log.at(7, claim("a"))
        assert isinstance(e, ev.Event)
        assert (e.coord_partition, e.coord_offset, e.log_time) == (0, 1, 7)

    def test_snapshot_is_independent_of_later_folds(self) -> None:
        """World.copy() is not changed by what is folded afterwards."""
        log = Log()
        log.at(0, claim("a"))
        snap = log.world.copy()
        log.at(1, hb("a", 9))
        assert snap.claims[KEY].committed is None and log.world.claims[KEY].committed == 9
