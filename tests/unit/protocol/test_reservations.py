"""How much an AMO child reserves at once (`protocol.reservations`): about a second of its own
handling in the reservations in hand and ahead, whatever the handler's speed and the batch."""

from __future__ import annotations

import math

import pytest

from marshal_workers.protocol.reservations import (
    AHEAD,
    AT_RISK_S,
    GROWTH,
    RECORD_OVERHEAD_BYTES,
    ReservationSizer,
    reservation_size,
)


def at_risk_s(sizer: ReservationSizer, seconds_per_record: float) -> float:
    """The handling a crash can lose once the sizer knows the time per record: the reservation
    in hand and those it may have asked ahead, all full."""
    return (1 + sizer.ahead()) * sizer.size(0.0) * seconds_per_record


def test_a_reservation_covers_half_the_window_at_most() -> None:
    """The window holds the reservation in hand and the one asked ahead, so a crash loses at
    most ``amo_window`` records; one record in the log reserves several batches."""
    assert reservation_size(500, 2000) == 1000
    assert reservation_size(500, 1000) == 500
    assert reservation_size(500, 600) == 500  # (refused at start: below 2 x batch_size)
    assert (AHEAD + 1) * reservation_size(50, 200) == 200


class TestReservationSizer:
    def test_one_record_and_nothing_ahead_until_a_run_was_handled(self) -> None:
        """The time per record is unknown: a crash must not lose a batch of slow records."""
        sizer = ReservationSizer(500, 32000)
        assert sizer.size(10) == 1
        assert sizer.ahead() == 0

    def test_a_fast_handler_reserves_up_to_half_the_window_and_asks_ahead(self) -> None:
        """1M records/s: half a second is 500k records; the window caps it at 16000."""
        sizer = ReservationSizer(500, 32000)
        sizer.handled(1000, 0.001)
        assert sizer.size(0) == 16000
        assert sizer.ahead() == AHEAD

    @pytest.mark.parametrize("seconds_per_record", [0.0001, 0.002, 0.008, 0.05, 0.3, 0.5])
    def test_in_hand_and_ahead_stay_within_about_a_second_whatever_the_batch(
        self, seconds_per_record: float
    ) -> None:
        """A reservation is no longer a batch at least: at 8 ms a record two of them hold 124
        records (a second), where two batches of 500 held 8 s."""
        for batch in (1, 50, 500, 5000):
            sizer = ReservationSizer(batch, 1_000_000, max_bytes=1 << 40)
            sizer.handled(100, 100 * seconds_per_record)
            assert at_risk_s(sizer, seconds_per_record) <= AT_RISK_S + 1e-9
            # and no smaller than the rounding forces: a share of the time, whole records
            share = AT_RISK_S / (AHEAD + 1)
            assert sizer.size(0) == max(1, math.floor(share / seconds_per_record + 1e-9))

    def test_eight_ms_records_reserve_62_and_two_reservations_hold_a_second(self) -> None:
        """The figure the kill -9 test derives its bound from."""
        sizer = ReservationSizer(500, 32000)
        sizer.handled(500, 4.0)
        assert (sizer.size(100), sizer.ahead()) == (62, 1)

    @pytest.mark.parametrize("seconds_per_record", [0.51, 0.9, 5.0, 600.0])
    def test_a_record_slower_than_half_a_second_is_reserved_alone_with_nothing_ahead(
        self, seconds_per_record: float
    ) -> None:
        """Then a crash loses that one record (about a second, or one record that takes
        longer), not two."""
        sizer = ReservationSizer(500, 32000)
        sizer.handled(1, seconds_per_record)
        assert (sizer.size(0), sizer.ahead()) == (1, 0)

    def test_a_run_too_quick_for_the_clock_counts_as_fast_and_not_for_ever(self) -> None:
        """Zero seconds (a virtual clock's step): the window binds; the next run's time counts."""
        sizer = ReservationSizer(500, 32000)
        sizer.handled(1000, 0.0)
        assert sizer.size(0) == 16000
        sizer.handled(500, 1.0)  # 2 ms a record: the mean 1 ms, so 500 records in 0.5 s
        assert sizer.size(0) == 500

    def test_the_time_per_record_is_smoothed_so_one_fast_run_does_not_size_for_slow_ones(
        self,
    ) -> None:
        """Each run weighs half of the time per record: after slow runs one fast run (records
        skipped, say) only doubles the reach, and one slow run after fast ones shrinks it at
        once."""
        sizer = ReservationSizer(100, 1_000_000, max_bytes=1 << 40)
        for _ in range(3):
            sizer.handled(500, 50.0)  # 100 ms a record
        assert sizer.size(0) == 5
        sizer.handled(500, 0.0005)  # 1 µs a record: the mean about 50 ms
        assert sizer.size(0) == 9  # (not quite 10: the mean is a little over 50 ms)
        fast = ReservationSizer(100, 1_000_000, max_bytes=1 << 40)
        fast.handled(1000, 0.001)  # 1 µs a record: 500,000 in half a second
        assert fast.size(0) == 500_000
        fast.handled(1000, 0.1)  # 100 µs: the mean about 50 µs
        assert fast.size(0) == 9_900

    def test_large_records_reserve_fewer_by_memory_but_a_batch_and_never_more_than_time(
        self,
    ) -> None:
        """A reservation's records are held in memory until handled: about 4 MiB of them, or
        one batch (a fetch holds that many anyway); the time bound still comes first."""
        sizer = ReservationSizer(500, 32000)
        sizer.handled(1000, 0.001)
        assert sizer.size(100_000 - RECORD_OVERHEAD_BYTES) == 500  # 100 kB records: one batch
        assert sizer.size(1024 - RECORD_OVERHEAD_BYTES) == 4096
        assert sizer.size(0) == 16000  # tiny ones: the window binds
        slow = ReservationSizer(500, 32000)
        slow.handled(10, 0.1)  # 10 ms a record
        assert slow.size(100_000 - RECORD_OVERHEAD_BYTES) == 50

    def test_a_window_of_two_batches_reserves_one_batch_at_most(self) -> None:
        """The least window the settings allow: reservations of one batch at most, however
        fast."""
        sizer = ReservationSizer(500, 1000)
        sizer.handled(500, 0.0001)
        assert sizer.size(0) == 500


class TestGrowthOfARealChild:
    """A real child's sizer grows a reservation by at most `GROWTH` times the last run: a short
    run's time says little (a saturated host ran a child's first record inside one time slice,
    1.7 ms, where its records took 20 ms each once it waited for a core between slices; sized
    from it, a kill -9 lost about 5 s of handling: a review of a CPU-bound fleet)."""

    @staticmethod
    def _start(growth: int | None) -> tuple[float, float]:
        """The reviewer's child: the first run (one record) timed at 1.7 ms, a run of up to 4
        records too (inside a slice after the grant's wake-up), every longer one at 20.4 ms a
        record. The most of its real handling a crash could lose over its first dozen runs,
        and after them (s)."""
        sizer = ReservationSizer(100, 32000, growth=growth)
        real = 0.0204
        worst = 0.0
        for _ in range(12):
            run = sizer.size(0)
            worst = max(worst, (1 + sizer.ahead()) * run * real)
            sizer.handled(run, run * (0.0017 if run <= 4 else real))
        return worst, (1 + sizer.ahead()) * sizer.size(0) * real

    def test_a_saturated_childs_start_puts_about_two_seconds_at_risk_not_twelve(self) -> None:
        worst, settled = self._start(GROWTH)
        assert worst <= 2.2 * AT_RISK_S and settled <= AT_RISK_S * 1.01, (worst, settled)
        before, _ = self._start(None)
        assert before > 10 * AT_RISK_S, before

    def test_one_quick_record_lets_the_next_reservation_grow_by_growth_only(self) -> None:
        sizer = ReservationSizer(100, 32000, growth=GROWTH)
        sizer.handled(1, 0.0017)
        assert (sizer.size(0), sizer.ahead()) == (GROWTH, AHEAD)

    def test_a_fast_handler_reaches_the_window_in_a_few_runs(self) -> None:
        """1 µs a record: the window's half (16000) after 7 reservations (the log's round trip
        paid a few more times at a child's start)."""
        sizer = ReservationSizer(100, 32000, growth=GROWTH)
        sizes = []
        while sizer.size(0) < 16000:
            run = sizer.size(0)
            sizes.append(run)
            sizer.handled(run, run * 1e-6)
        assert sizes == [1, 4, 16, 64, 256, 1024, 4096]

    def test_the_cap_only_ever_makes_a_reservation_smaller(self) -> None:
        """What the simulator (no cap) proves of the losses holds for the real child."""
        for runs in ([(1, 0.0017), (4, 0.0068), (16, 0.33)], [(1000, 0.001), (5, 5.0)],
                     [(3, 0.0), (7, 0.07), (100, 0.01)]):  # fmt: skip
            capped = ReservationSizer(100, 32000, growth=GROWTH)
            free = ReservationSizer(100, 32000)
            for records, seconds in runs:
                capped.handled(records, seconds)
                free.handled(records, seconds)
                assert capped.size(0) <= free.size(0) and capped.ahead() == free.ahead()
