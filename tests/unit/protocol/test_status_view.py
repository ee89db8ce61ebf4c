"""The group status view (pure): built from folded worlds, rendered as JSON and as a table."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from marshal_workers.protocol.amolosses import AmoLosses
from marshal_workers.protocol.groupstatus import (
    GroupStatus,
    group_known,
    group_status,
    group_topics,
    iso_ms,
    lag_trends,
    lags,
    render_table,
)
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.wire import ClaimingPartition, CoordRecord
from tests.support import GROUP, HB, Log, claim, hb, pause, record, release, reserve

T0 = 1_700_000_000_000


def held_and_released() -> Log:
    """A holds orders/0 at offset 5; orders/1 was claimed by A, then released at 42."""
    log = Log()
    log.at(T0, claim("A", 0))
    log.at(T0 + 100, hb("A", 5, 0))
    log.at(T0 + 200, claim("B", 0))
    log.at(T0 + 300, claim("A", 1))
    log.at(T0 + 400, release("A", 42, 1))
    return log


def status_of(
    log: Log, now: int, highs: dict[tuple[str, int], int] | None = None
) -> dict[str, Any]:
    return as_json(group_status(GROUP, {0: log.world}, HB, now, highs or {}))


def as_json(status: GroupStatus) -> dict[str, Any]:
    return status.to_json()


class TestClaims:
    def test_held_claim_shows_holder_offset_and_token(self) -> None:
        """A held claim shows client, instance, committed offset, fencing token and heartbeat."""
        out = status_of(held_and_released(), T0 + 150)
        held = out["claims"][0]
        assert held == {
            "topic": "orders",
            "partition": 0,
            "client_id": "A",
            "instance_id": "A-1",
            "state": "fresh",
            "offset": 5,
            "reserved": None,
            "fencing_token": 0,
            "last_heartbeat": iso_ms(T0 + 100),
            "lag": None,
            "certain": True,
            "slice": None,
            "amo_last_loss": None,
        }

    def test_released_claim_has_no_holder(self) -> None:
        """A released claim has null client and instance, state released, and its offset."""
        released = status_of(held_and_released(), T0 + 500)["claims"][1]
        assert released["partition"] == 1
        assert released["state"] == "released"
        assert released["client_id"] is None
        assert released["instance_id"] is None
        assert released["offset"] == 42

    def test_state_follows_now(self) -> None:
        """The holder is fresh below HB, unknown up to 2*HB, stale beyond, judged at now_ms."""
        log = held_and_released()
        last = T0 + 100
        states = [
            status_of(log, now)["claims"][0]["state"]
            for now in (last, last + HB, last + 2 * HB + 1)
        ]
        assert states == ["fresh", "unknown", "stale"]

    def test_lag_needs_offset_and_high_watermark(self) -> None:
        """lag = high watermark - offset when both are known, else null."""
        highs = {("orders", 0): 12, ("orders", 1): 42}
        claims = status_of(held_and_released(), T0 + 500, highs)["claims"]
        assert [c["lag"] for c in claims] == [7, 0]
        log = Log()
        log.at(T0, claim("A", 3))
        assert status_of(log, T0, {("orders", 3): 9})["claims"][0]["lag"] is None

    def test_reservation_is_shown(self) -> None:
        """An at-most-once reservation appears as reserved, and as the committed offset (a
        reserved record counts as consumed)."""
        log = Log()
        log.at(T0, claim("A", 0))
        log.at(T0 + 10, hb("A", 3))
        log.at(T0 + 20, reserve("A", 8))
        c = status_of(log, T0 + 30)["claims"][0]
        assert (c["offset"], c["reserved"]) == (8, 8)

    def test_uncertain_claim_shows_activity(self) -> None:
        """A claim first seen after a compaction gap is uncertain, timed by its last activity."""
        world = World(RationalizerConfig(HB), 0)
        fold(world, record(hb("A", 9), 4, T0))
        c = as_json(group_status(GROUP, {0: world}, HB, T0 + 10, {}))["claims"][0]
        assert c["certain"] is False
        assert c["client_id"] == "A"
        assert c["state"] == "fresh"
        assert c["last_heartbeat"] == iso_ms(T0)


class TestSelection:
    def test_only_the_group_sorted_across_worlds(self) -> None:
        """Claims of other groups are left out; claims sort by topic then partition."""
        cfg = RationalizerConfig(HB)
        w0, w1 = World(cfg, 0), World(cfg, 1)
        fold(w0, record(claim("A", 2, topic="zeta"), 0, T0))
        fold(w0, record(claim("A", 1), 1, T0))
        fold(w1, record(claim("A", 0), 0, T0, partition=1))
        other = ClaimingPartition(0, "X-1", "X", "other", "orders", 5)
        fold(w1, record(other, 1, T0, partition=1))
        out = as_json(group_status(GROUP, {0: w0, 1: w1}, HB, T0, {}))
        assert [(c["topic"], c["partition"]) for c in out["claims"]] == [
            ("orders", 0),
            ("orders", 1),
            ("zeta", 2),
        ]
        assert group_topics({0: w0, 1: w1}, GROUP) == {"orders", "zeta"}

    def test_malformed_is_summed_over_worlds(self) -> None:
        """malformed counts the malformed records of every coordination partition."""
        cfg = RationalizerConfig(HB)
        w0, w1 = World(cfg, 0), World(cfg, 1)
        fold(w0, CoordRecord(0, 0, T0, b"x", b"garbage"))
        fold(w1, CoordRecord(1, 0, T0, None, None))
        fold(w1, CoordRecord(1, 1, T0, b"y", b"Heartbeat/2/0/i/c/g/t/0/1"))
        assert group_status(GROUP, {0: w0, 1: w1}, HB, T0, {}).malformed == 3

    def test_pause_in_force_at_now(self) -> None:
        """paused_until shows a pause still in force at now_ms, and null once it expired."""
        log = Log()
        log.at(T0, pause("admin", T0 // 1000 + 60))
        paused = status_of(log, T0 + 1000)
        assert paused["paused_until"] == iso_ms(T0 + 60_000)
        assert paused["paused_by"] == "admin"
        assert status_of(log, T0 + 61_000)["paused_until"] is None

    def test_empty_group(self) -> None:
        """A group without claims has an empty list and no pause."""
        out = status_of(Log(), T0)
        assert out["claims"] == []
        assert out["paused_until"] is None
        assert out["malformed"] == 0


class TestRendering:
    def test_json_is_one_serializable_object(self) -> None:
        """to_json has the documented top-level keys and survives json.dumps."""
        out = status_of(held_and_released(), T0 + 500, {("orders", 0): 10})
        assert set(out) == {
            "group",
            "as_of",
            "members",
            "claims",
            "paused_until",
            "paused_by",
            "malformed",
            "other_groups_records",
            "complete",
            "unavailable",
            "amo_losses",
        }
        assert json.loads(json.dumps(out)) == out

    def test_iso_ms_is_utc_with_milliseconds(self) -> None:
        """Times render as ISO-8601 UTC with milliseconds and a Z; None stays None."""
        assert iso_ms(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"
        assert iso_ms(None) is None

    def test_table_has_a_row_per_claim(self) -> None:
        """The table has a header, one aligned row per claim, and the malformed count."""
        status = group_status(GROUP, {0: held_and_released().world}, HB, T0 + 150, {})
        lines = render_table(status).splitlines()
        assert lines[0].startswith(f"group {GROUP} as of ")
        assert lines[1] == "live members: (none)"
        assert lines[2].split()[:3] == ["TOPIC", "PARTITION", "STATE"]
        assert lines[3].split()[:5] == ["orders", "0", "fresh", "A", "A-1"]
        assert lines[4].split()[:4] == ["orders", "1", "released", "-"]
        assert lines[-1] == "malformed records in the log: 0"

    def test_member_claims_are_listed_as_members_not_partitions(self) -> None:
        """A member's announcement claim names a live member and is not a partition row."""
        log = held_and_released()
        log.at(T0 + 450, claim("A", 0, topic="__member.A"))
        log.at(T0 + 460, claim("C", 0, topic="__member.C"))
        out = status_of(log, T0 + 500)
        assert out["members"] == ["A", "C"]
        assert [c["topic"] for c in out["claims"]] == ["orders", "orders"]
        assert group_topics({0: log.world}, GROUP) == {"orders"}

    def test_table_of_empty_group(self) -> None:
        """An empty group renders a placeholder row."""
        status = group_status(GROUP, {0: Log().world}, HB, T0, {})
        assert "(no claims)" in render_table(status)


class TestWatchAndIncomplete:
    """`status --watch` trends and an incomplete status (item 8)."""

    def test_lag_trend_per_partition(self) -> None:
        """Growing, shrinking, steady and unknown lags, with a rate per second."""
        status = status_obj({("orders", 0): 10})
        lag = status.claims[0].lag
        assert lag is not None
        assert lag_trends({("orders", 0): lag - 30}, status, 2.0)[("orders", 0)] == "+30 (+15/s)"
        assert lag_trends({("orders", 0): lag + 4}, status, 2.0)[("orders", 0)] == "-4 (-2/s)"
        assert lag_trends({("orders", 0): lag}, status, 2.0)[("orders", 0)] == "="
        assert lag_trends({}, status, 2.0)[("orders", 0)] == "-"

    def test_table_with_trends_has_the_column(self) -> None:
        """With trends the table gains a LAG TREND column; without, it is unchanged."""
        status = status_obj({("orders", 0): 10})
        trends = lag_trends(lags(status), status, 1.0)
        assert "LAG TREND" in render_table(status, trends)
        assert "LAG TREND" not in render_table(status)

    def test_incomplete_status_says_what_is_missing(self) -> None:
        """What could not be read is listed in the JSON (complete: false) and the table."""
        status = replace(status_obj({}), unavailable=("lag of orders[0]: no leader",))
        assert status.to_json()["complete"] is False
        assert status.to_json()["unavailable"] == ["lag of orders[0]: no leader"]
        table = render_table(status)
        assert "INCOMPLETE: could not read:" in table and "orders[0]: no leader" in table


def status_obj(highs: dict[tuple[str, int], int]) -> GroupStatus:
    """The status of the held-and-released log at T0 + 500."""
    return group_status(GROUP, {0: held_and_released().world}, HB, T0 + 500, highs)


def test_a_group_the_log_never_named_is_unknown() -> None:
    """`status --group no.such.group` must say so: the fold tells a group
    with claims, a pause or settings from one it has never seen."""
    log = held_and_released()
    assert group_known({0: log.world}, GROUP)
    assert not group_known({0: log.world}, "no.such.group")
    assert not group_known({}, GROUP)
    paused = Log()
    paused.at(T0, pause("ops", T0 // 1000 + 60))
    assert group_known({0: paused.world}, GROUP)


def amo_run(crash: bool) -> tuple[Log, AmoLosses]:
    """A holds orders/0 at most once and reserves two runs; then it releases at their end
    (graceful) or goes silent and B claims (a crash). The losses see every event."""
    log = Log()
    log.at(T0, claim("A", 0))
    log.at(T0 + 50, hb("A", 0))
    log.at(T0 + 100, reserve("A", 10))
    log.at(T0 + 150, hb("A", 10))
    log.at(T0 + 200, reserve("A", 20))
    log.at(T0 + 250, hb("A", 20))
    if crash:
        log.at(T0 + 5000, claim("B", 0))
    else:
        log.at(T0 + 300, release("A", 20))
        log.at(T0 + 400, claim("B", 0))
    log.at(T0 + 5100, hb("B", 20))
    losses = AmoLosses(HB)
    losses.add_all(log.events)  # type: ignore[arg-type]
    return log, losses


class TestAmoLosses:
    def status(self, crash: bool) -> GroupStatus:
        log, losses = amo_run(crash)
        return group_status(GROUP, {0: log.world}, HB, T0 + 5200, {}, losses)

    def test_a_crash_shows_its_last_loss_per_partition(self) -> None:
        """JSON: the range at risk, up to how many records, the cause, who and when."""
        out = as_json(self.status(crash=True))
        assert out["claims"][0]["amo_last_loss"] == {
            "start": 0,
            "end": 20,
            "records": 20,
            "cause": "taken_over",
            "lost_at": iso_ms(T0 + 250 + 2 * HB),
            "reserved_at": iso_ms(T0 + 200),
            "client_id": "A",
            "instance_id": "A-1",
            "fencing_token": 0,
            "successor_client_id": "B",
        }
        assert out["amo_losses"] == {"ranges": 1, "records": 20}

    def test_the_table_shows_up_to_how_many_records_and_why(self) -> None:
        """Table: an AMO LOST column, and a line per partition with a loss."""
        lines = render_table(self.status(crash=True)).splitlines()
        header = lines[2].split()
        assert header[7:9] == ["AMO", "LOST"]
        assert lines[3].split()[7] == "<=20"
        assert (
            "AMO last loss orders/0: up to 20 records (range 0-20, taken_over, at "
            f"{iso_ms(T0 + 250 + 2 * HB)}, holder A/A-1 token 0; next owner B)"
        ) in lines
        assert any(line.startswith("AMO losses in the log: 1 range, up to 20") for line in lines)

    def test_a_graceful_handover_shows_zero(self) -> None:
        """A clean run: no last loss, 0 in the column, 0 ranges and records."""
        status = self.status(crash=False)
        out = as_json(status)
        assert out["claims"][0]["amo_last_loss"] is None
        assert out["amo_losses"] == {"ranges": 0, "records": 0}
        lines = render_table(status).splitlines()
        assert lines[3].split()[7] == "0"
        (total,) = [line for line in lines if line.startswith("AMO losses in the log:")]
        assert total.startswith("AMO losses in the log: 0 ranges, up to 0 records")
        # a member's own losses (a failed or timed-out handler) are never in the log: a
        # review read "0" beside members that had logged 14 records lost each
        assert "marshal_amo_lost_records_total" in total and "amo_records_lost" in total

    def test_an_alo_group_shows_no_amo_column(self) -> None:
        """A group that never reserved runs at least once: no AMO column, null totals."""
        log = held_and_released()
        losses = AmoLosses(HB)
        losses.add_all(log.events)  # type: ignore[arg-type]
        status = group_status(GROUP, {0: log.world}, HB, T0 + 500, {}, losses)
        assert as_json(status)["amo_losses"] is None
        assert "AMO" not in render_table(status)


class TestWhyUnclaimed:
    """`status` says why a partition is unclaimed because of a failing record, and until when."""

    @staticmethod
    def failed_then_released(outcome: str) -> Log:
        from marshal_workers.protocol.recordfailures import (  # noqa: PLC0415
            Outcome,
            RecordFailed,
            encode_poison,
            poison_record_key,
        )

        log = held_and_released()
        log.at(T0 + 500, claim("A", 1))
        msg = RecordFailed(0, "A-1", "A", GROUP, "orders", 1, 42, 1, Outcome(outcome), "bad")
        log.raw(CoordRecord(0, log.world.next_offset, T0 + 600, poison_record_key(msg),
                            encode_poison(msg)))  # fmt: skip
        log.at(T0 + 700, release("A", 42, 1))
        return log

    def test_released_after_failures_says_who_keeps_off_it_until_when(self) -> None:
        """A holder that released a claim after handler failures on its record keeps off it
        for max(60 s, 10·HB): status names the member, the record and the end of that wait."""
        log = self.failed_then_released("retry")
        status = group_status(GROUP, {0: log.world}, HB, T0 + 800, {})
        out = as_json(status)["claims"][1]
        assert out["unclaimed"] == {"why": "handler_failures", "offset": 42, "by": "A",
                                    "since": iso_ms(T0 + 700),
                                    "until": iso_ms(T0 + 60_700)}  # fmt: skip
        table = render_table(status)
        assert (f"orders/1: unclaimed: A released it after failures in a row on offset 42 (1 "
                f"counted in the log) at {iso_ms(T0 + 700)} and keeps off it until "
                f"{iso_ms(T0 + 60_700)}; any other member may claim it now") in table  # fmt: skip

    def test_a_parked_record_says_until_an_operator_decides(self) -> None:
        """Released with its record parked: unclaimed until an operator decides."""
        log = self.failed_then_released("parked")
        status = group_status(GROUP, {0: log.world}, HB, T0 + 800, {})
        assert as_json(status)["claims"][1]["unclaimed"]["why"] == "parked"
        assert "until an operator runs marshal-admin skip-record or retry-record" in (
            render_table(status)
        )

    def test_a_graceful_release_says_nothing_more(self) -> None:
        """A claim released by a stop or a rebalance: no reason line."""
        status = group_status(GROUP, {0: held_and_released().world}, HB, T0 + 500, {})
        assert "unclaimed" not in as_json(status)["claims"][1]
        assert "keeps off it" not in render_table(status)
