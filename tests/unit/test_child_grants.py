"""A child's AMO bookkeeping (`childgrants.Asked`): how far ahead it asks, and the answers it
keeps until their batch comes up."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from marshal_workers.child.grants import (
    AHEAD,
    RECORD_OVERHEAD_BYTES,
    Asked,
    ReservationSizer,
    record_bytes,
    reservation_size,
)
from marshal_workers.common.errors import ConfigError
from marshal_workers.config.runconfig import run_config
from marshal_workers.config.settings import resolve
from marshal_workers.ipc.messages import Grant, GrantRequest


def batch(start: int, end: int) -> list[Any]:
    return [SimpleNamespace(offset=o) for o in range(start, end)]


class TestAsked:
    def test_asks_one_batch_beyond_the_one_awaited_then_waits(self) -> None:
        """With one batch ahead: two asked, no third until the oldest is taken."""
        asked = Asked(ahead=1)
        assert asked.may_ask()
        assert asked.ask(batch(0, 5)) == GrantRequest(1, 0, 5)
        assert asked.may_ask() and not asked.full()
        assert asked.ask(batch(5, 9)) == GrantRequest(2, 5, 9)
        assert asked.full() and not asked.may_ask()
        request, records = asked.take()
        assert request == GrantRequest(1, 0, 5) and len(records) == 5
        assert asked.may_ask()

    def test_an_early_answer_is_kept_for_its_batch_and_a_stray_one_is_not(self) -> None:
        """The answer on the batch asked ahead waits for it; one for nothing asked is refused."""
        asked = Asked(ahead=1)
        first, second = asked.ask(batch(0, 5)), asked.ask(batch(5, 9))
        assert asked.keep(Grant(second.request_id, True))
        assert not asked.keep(Grant(7, True))
        assert asked.answer(first) is None
        assert asked.answer(second) == Grant(2, True)
        assert asked.answer(second) is None  # taken once

    def test_no_more_asking_once_a_refusal_is_read(self) -> None:
        """The child ends at a refusal: it asks for nothing after reading one."""
        asked = Asked(ahead=2)
        first = asked.ask(batch(0, 5))
        assert asked.keep(Grant(first.request_id, False, "claim lost"))
        assert not asked.may_ask()


def test_a_reservation_covers_half_the_window_and_never_less_than_a_batch() -> None:
    """Issue 19.2: the window holds the reservation in hand and the one asked ahead, so a crash
    loses at most ``amo_window`` records; one record in the log reserves several batches."""
    assert reservation_size(500, 2000) == 1000
    assert reservation_size(500, 1000) == 500
    assert reservation_size(500, 600) == 500  # (refused at start: below 2 x batch_size)
    assert (AHEAD + 1) * reservation_size(50, 200) == 200


def test_a_window_below_two_batches_is_refused_with_one_line() -> None:
    base = {
        "handler": "echo",
        "mode": "amo",
        "topic": ("orders",),
        "group": "g",
        "bootstrap_servers": "localhost:9092",
    }
    with pytest.raises(ConfigError, match=r"amo_window 600 is below 2 x batch_size \(1000\)"):
        run_config(resolve({**base, "amo_window": "600"}, None, environ={}))
    assert run_config(resolve({**base, "amo_window": "1000"}, None, environ={})).amo_window == 1000


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

    def test_record_bytes_reads_the_first_and_the_last(self) -> None:
        records = [
            SimpleNamespace(offset=0, key=b"k", value=b"x" * 9),
            SimpleNamespace(offset=1, key=None, value=b"y" * 1000),  # (not read)
            SimpleNamespace(offset=2, key=None, value=None),
        ]
        assert record_bytes(records) == 5.0
        assert record_bytes([]) == 0.0
