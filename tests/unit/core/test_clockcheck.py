"""`core.clockcheck`: what the log's time and the wall clock say the lease clock failed to
count, as a lower bound that latencies and a reader's lag never raise."""

from __future__ import annotations

import pytest

from marshal_workers.core.clockcheck import ANCHOR_AGE_S, ClockCheck
from marshal_workers.protocol.leases import clock_tolerance, default_margin


def test_a_record_seen_after_a_stall_shows_what_the_clock_lost() -> None:
    """Sent at 10.0 s, landed at log time 50 s; 3 s of log later, seen at 10.2 s: 2.8 s lost."""
    check = ClockCheck()
    assert check.landed(0, 50_000, sent_at=10.0, now=10.01) == 0.0
    assert check.seen(0, 53_000, now=10.2) == pytest.approx(2.8)


def test_latency_and_a_lagging_reader_never_count_as_a_loss() -> None:
    """An append that took 0.4 s to land and a record read 1 s after it landed: nothing."""
    check = ClockCheck()
    check.landed(0, 50_400, sent_at=10.0, now=10.5)  # the broker took 0.4 s
    assert check.seen(0, 51_400, now=12.4) == 0.0  # landed 1 s later, read 1 s after that
    assert check.landed(0, 51_500, sent_at=11.4, now=11.6) == 0.0


def test_each_coordination_partition_is_judged_on_its_own_brokers_clock() -> None:
    """A partition whose broker's clock is 5 s ahead shows no loss against another's anchor."""
    check = ClockCheck()
    check.landed(0, 50_000, sent_at=10.0, now=10.01)
    assert check.seen(1, 55_500, now=10.5) == 0.0  # no anchor there: nothing to compare with
    check.landed(1, 55_500, sent_at=10.49, now=10.5)
    assert check.seen(1, 56_000, now=11.0) == 0.0


def test_an_anchor_is_compared_only_while_it_is_recent() -> None:
    """Clocks drift apart by NTP's slew over minutes: an old anchor proves nothing."""
    check = ClockCheck()
    check.landed(0, 50_000, sent_at=10.0, now=10.01)
    assert check.seen(0, 50_000 + int((ANCHOR_AGE_S + 5) * 1000), now=10.0 + ANCHOR_AGE_S + 1) == 0


def test_a_write_sent_on_a_clock_found_to_have_stood_still_makes_no_anchor() -> None:
    """After a stall the old anchors are forgotten, and a write sent before it does not make
    one: the next records show nothing until the member's own new writes land."""
    check = ClockCheck()
    check.landed(0, 50_000, sent_at=10.0, now=10.01)
    assert check.seen(0, 60_000, now=10.1) > 9
    check.forget_anchors()
    assert check.landed(0, 60_050, sent_at=None, now=10.15) == 0.0
    assert check.seen(0, 61_000, now=10.2) == 0.0
    check.landed(0, 61_100, sent_at=10.25, now=10.3)
    assert check.seen(0, 62_100, now=10.5) == pytest.approx(0.75)


def test_the_wall_clock_moving_further_than_the_lease_clock() -> None:
    """Between ticks: a jump forward counts, a step back does not."""
    check = ClockCheck()
    assert check.ticked(10.0, 1_000.0) == 0.0
    assert check.ticked(10.05, 1_000.05) == 0.0
    assert check.ticked(10.1, 1_030.1) == pytest.approx(30.0)
    assert check.ticked(10.15, 1_020.0) == 0.0


def test_the_tolerance_is_half_the_lease_margin() -> None:
    """At HB 1 s: 50 ms; at the default HB of 10 s: 0.5 s."""
    assert clock_tolerance(1.0) == pytest.approx(default_margin(1.0) / 2) == pytest.approx(0.05)
    assert clock_tolerance(10.0) == pytest.approx(0.5)
