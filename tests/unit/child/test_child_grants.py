"""A child's AMO bookkeeping (`child.grants.Asked`): how far ahead it asks, and the answers it
keeps until their run comes up (the sizes: `test_reservations`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from marshal_workers.child.grants import Asked, record_bytes
from marshal_workers.common.errors import ConfigError
from marshal_workers.config.runconfig import run_config
from marshal_workers.config.settings import resolve
from marshal_workers.ipc.messages import Grant, GrantRequest


def batch(start: int, end: int) -> list[Any]:
    return [SimpleNamespace(offset=o) for o in range(start, end)]


class TestAsked:
    def test_asks_one_batch_beyond_the_one_awaited_then_waits(self) -> None:
        """With one batch ahead: two asked, no third until the oldest is taken."""
        asked = Asked()
        assert asked.may_ask(1)
        assert asked.ask(batch(0, 5)) == GrantRequest(1, 0, 5)
        assert asked.may_ask(1)
        assert asked.ask(batch(5, 9)) == GrantRequest(2, 5, 9)
        assert not asked.may_ask(1)
        request, records = asked.take()
        assert request == GrantRequest(1, 0, 5) and len(records) == 5
        assert asked.may_ask(1)

    def test_nothing_ahead_means_one_run_at_a_time(self) -> None:
        """With none ahead (slow records): a second run only once the first is taken."""
        asked = Asked()
        asked.ask(batch(0, 1))
        assert not asked.may_ask(0)
        asked.take()
        assert asked.may_ask(0)

    def test_an_early_answer_is_kept_for_its_batch_and_a_stray_one_is_not(self) -> None:
        """The answer on the batch asked ahead waits for it; one for nothing asked is refused."""
        asked = Asked()
        first, second = asked.ask(batch(0, 5)), asked.ask(batch(5, 9))
        assert asked.keep(Grant(second.request_id, True))
        assert not asked.keep(Grant(7, True))
        assert asked.answer(first) is None
        assert asked.answer(second) == Grant(2, True)
        assert asked.answer(second) is None  # taken once

    def test_no_more_asking_once_a_refusal_is_read(self) -> None:
        """The child ends at a refusal: it asks for nothing after reading one."""
        asked = Asked()
        first = asked.ask(batch(0, 5))
        assert asked.keep(Grant(first.request_id, False, "claim lost"))
        assert not asked.may_ask(2)


def test_a_window_below_two_batches_is_refused_with_one_line() -> None:
    """The window must hold two batches; a smaller one is refused at start."""
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


class TestRecordBytes:
    def test_record_bytes_reads_the_first_and_the_last(self) -> None:
        """A run's record size is sampled from its ends, not from every record."""
        records = [
            SimpleNamespace(offset=0, key=b"k", value=b"x" * 9),
            SimpleNamespace(offset=1, key=None, value=b"y" * 1000),  # (not read)
            SimpleNamespace(offset=2, key=None, value=None),
        ]
        assert record_bytes(records) == 5.0
        assert record_bytes([]) == 0.0
