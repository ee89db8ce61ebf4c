"""How much an AMO child reserves at once (`protocol.reservations`)."""

from __future__ import annotations

from marshal_workers.protocol.reservations import (
    AHEAD,
    RECORD_OVERHEAD_BYTES,
    ReservationSizer,
    reservation_size,
)


def test_a_reservation_covers_half_the_window_at_most() -> None:
    """The window holds the reservation in hand and the one asked ahead, so a crash loses at
    most ``amo_window`` records; one record in the log reserves several batches."""
    assert reservation_size(500, 2000) == 1000
    assert reservation_size(500, 1000) == 500
    assert reservation_size(500, 600) == 500  # (refused at start: below 2 x batch_size)
    assert (AHEAD + 1) * reservation_size(50, 200) == 200


class TestReservationSizer:
    """Issue 19.2: a reservation covers about half a second of the child's own handling, within
    the window and a memory bound, and never less than a batch."""

    def test_one_batch_until_a_run_was_handled(self) -> None:
        sizer = ReservationSizer(500, 32000)
        assert sizer.size(10) == 500

    def test_a_fast_handler_reserves_up_to_half_the_window(self) -> None:
        """1M records/s: half a second is 500k records; the window caps it at 16000."""
        sizer = ReservationSizer(500, 32000)
        sizer.handled(1000, 0.001)
        assert sizer.size(0) == 16000

    def test_a_run_too_quick_for_the_clock_counts_as_fast_and_not_for_ever(self) -> None:
        """Zero seconds (a virtual clock's step): the window binds; the next run's time counts."""
        sizer = ReservationSizer(500, 32000)
        sizer.handled(1000, 0.0)
        assert sizer.size(0) == 16000
        sizer.handled(500, 1.0)  # 2 ms a record: the mean 1 ms, so 500 records in 0.5 s
        assert sizer.size(0) == 500

    def test_a_slow_handler_reserves_half_a_second_of_its_work(self) -> None:
        """2 ms a record: 250 records in half a second, so one batch (the least); 100 µs a
        record: 5000."""
        slow = ReservationSizer(500, 32000)
        slow.handled(500, 1.0)
        assert slow.size(0) == 500
        mid = ReservationSizer(100, 32000)
        mid.handled(1000, 0.1)
        assert mid.size(0) == 5000

    def test_the_time_per_record_is_smoothed_so_one_fast_run_does_not_size_for_slow_ones(
        self,
    ) -> None:
        """Each run weighs half of the time per record: after slow runs one fast run (records
        skipped, say) only doubles the reach, and one slow run after fast ones shrinks it at
        once."""
        sizer = ReservationSizer(100, 1_000_000, max_bytes=1 << 40)
        for _ in range(3):
            sizer.handled(500, 50.0)  # 100 ms a record
        assert sizer.size(0) == 100
        sizer.handled(500, 0.0005)  # 1 µs a record: the mean about 50 ms
        assert sizer.size(0) == 100  # 10 records' worth: still one batch
        fast = ReservationSizer(100, 1_000_000, max_bytes=1 << 40)
        fast.handled(1000, 0.001)  # 1 µs a record: 500,000 in half a second
        assert fast.size(0) == 500_000
        fast.handled(1000, 0.1)  # 100 µs: the mean about 50 µs
        assert fast.size(0) == 9_900

    def test_large_records_reserve_fewer_by_memory(self) -> None:
        """A reservation's records are held in memory until handled: about 4 MiB of them."""
        sizer = ReservationSizer(500, 32000)
        sizer.handled(1000, 0.001)
        assert sizer.size(100_000 - RECORD_OVERHEAD_BYTES) == 500  # 100 kB records: one batch
        assert sizer.size(1024 - RECORD_OVERHEAD_BYTES) == 4096
        assert sizer.size(0) == 16000  # tiny ones: the window binds

    def test_a_window_of_two_batches_reserves_one_batch_always(self) -> None:
        """The least window the settings allow: reservations of one batch, however fast."""
        sizer = ReservationSizer(500, 1000)
        assert sizer.size(0) == 500
        sizer.handled(500, 0.0001)
        assert sizer.size(0) == 500
