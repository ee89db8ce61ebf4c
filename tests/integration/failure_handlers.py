"""Handlers for the error-policy tests (loaded by the spawned children): they write the ledger
(plugins/ledger.py) for every record they complete."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from marshal_workers.handler import Context, Record
from marshal_workers.handler.record import FetchedRecord
from marshal_workers.plugins import ledger

POISON_ENV = "FAILURE_TEST_POISON"  # comma-separated offsets that fail
TIMES_ENV = "FAILURE_TEST_TIMES"  # fail only the first N attempts on each (default: always)

_attempts: dict[int, int] = {}


class Poisoned(Exception):  # noqa: N818 (reads better in the dead-letter headers)
    """Raised on a poison offset."""


def _poison() -> set[int]:
    return {int(o) for o in os.environ.get(POISON_ENV, "").split(",") if o}


def _fails(offset: int) -> bool:
    if offset not in _poison():
        return False
    _attempts[offset] = _attempts.get(offset, 0) + 1
    times = os.environ.get(TIMES_ENV)
    return times is None or _attempts[offset] <= int(times)


def handle(record: Record, ctx: Context) -> None:
    """Fail on the poison offsets (the first N attempts, or always), else write the ledger."""
    if _fails(record.offset):
        raise Poisoned(f"poison at offset {record.offset}")
    ledger.handle(record, ctx)


class BatchLedger:
    """A handle_batch plugin that fails on any batch holding a poison offset."""

    def handle_batch(self, records: Sequence[Record], ctx: Context) -> None:
        """Fail the whole batch if it holds a poison offset, else ledger every record."""
        poison = [r.offset for r in records if _fails(r.offset)]
        if poison:
            raise Poisoned(f"poison at offsets {poison} in a batch of {len(records)}")
        for record in records:
            ledger.handle(record, ctx)


class MessageBatchLedger:
    """`BatchLedger` taking the consumer's messages (``batch_view = "messages"``)."""

    batch_view = "messages"

    def handle_batch(self, messages: Sequence[Any], ctx: Context) -> None:
        """Fail the whole batch if it holds a poison offset, else ledger every message."""
        if not all(type(m).__name__ == "Message" for m in messages):
            raise TypeError(f"not the consumer's messages: {messages!r}")
        poison = [m.offset() for m in messages if _fails(m.offset())]
        if poison:
            raise Poisoned(f"poison at offsets {poison} in a batch of {len(messages)}")
        for message in messages:
            ledger.handle(FetchedRecord(message), ctx)


def always_fails(record: Record, ctx: Context) -> None:
    """Fail on every record (the poison-rate tests)."""
    raise Poisoned(f"poison at offset {record.offset}")
