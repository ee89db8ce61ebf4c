"""``heartbeat_pace`` (`sim.pace`): at most two heartbeats of a claim's tenure in any HB/4."""

from __future__ import annotations

from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.sim.pace import HeartbeatPace

KEY = ClaimKey("g", "t", 0)
OTHER = ClaimKey("g", "t", 1)


def test_a_heartbeat_and_the_one_after_its_verdicts_are_in_pace() -> None:
    """Every HB/2, and one more after a reservation's verdict: two in HB/4 at most."""
    pace = HeartbeatPace()
    assert [pace.beat(KEY, 1, t, 1.0) for t in (0.0, 0.05, 0.5, 0.52, 1.0, 1.2)] == [None] * 6


def test_a_third_within_hb_over_4_is_told_once_per_tenure() -> None:
    pace = HeartbeatPace()
    told = [pace.beat(KEY, 1, t, 1.0) for t in (0.0, 0.05, 0.1, 0.15)]
    assert told == [None, None, 3, None]  # (told once: one defect, one line)
    assert pace.beat(KEY, 2, 0.2, 1.0) is None  # a new tenure counts afresh
    assert [pace.beat(KEY, 2, t, 1.0) for t in (0.21, 0.22)] == [None, 3]


def test_claims_and_a_window_just_past_are_counted_apart() -> None:
    pace = HeartbeatPace()
    assert [pace.beat(k, 1, 0.0, 1.0) for k in (KEY, OTHER, KEY, OTHER)] == [None] * 4
    assert pace.beat(KEY, 1, 0.25, 1.0) is None  # HB/4 after the first: out of its window
    assert pace.beat(OTHER, 1, 0.2, 2.0) == 3  # HB = 2 s: 0.2 s is within HB/4
