"""The shapes a loaded handler may take, seen through one interface by the child.

docs/design.md fixes the plain form, a callable ``handle(record, ctx)``. A richer plugin is
a class (instantiated without arguments) or an instance with any of:

- ``setup(ctx)``: once, before the first record (a failure ends the child: setup failed);
- ``handle(record, ctx)``: per record, or ``handle_batch(records, ctx)``: once per fetched
  batch (preferred when both exist); the lease is checked before every call;
- ``batch_view = "messages"`` (a class or instance attribute; default ``"records"``): hand
  ``handle_batch`` the consumer's own ``confluent_kafka.Message`` objects (a list; read them
  with ``m.value()``, ``m.key()``, ``m.offset()``, ``m.timestamp()``, ``m.headers()``; none
  carries an error) instead of `Record` objects. It spares the record object made for every
  record, the one cost a batch plugin pays per record over a plain consumer loop (see
  `MessageBatch`); the failure policy, dead letters and logs still see records;
- ``teardown(ctx, reason)``: once at the end, when ``setup`` succeeded, with the reason the
  child ends (``stop``, ``handler_failed``, ``lease_expired``, ``not_granted``, ...).

A raising ``handle`` or ``handle_batch`` goes through the error policy (`failures`): retried,
then dead-lettered, skipped or stopped. A failing ``handle_batch`` cannot say which record
failed, so the batch is the unit: it is retried as a whole, counts once against the poison
rate, every record of it is dead-lettered (or skipped), and a stop reports the batch's first
record. Raise `marshal_workers.handler.StopProcessing` to stop without retries or policy.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from marshal_workers.handler import Context, Record

RECORDS = "records"
MESSAGES = "messages"
BATCH_VIEWS = (RECORDS, MESSAGES)
# What a ``batch_view = "messages"`` plugin's handle_batch gets: the consumer's messages.
MessageBatch = list[Any]


class Plugin:
    """A loaded handler in one shape: optional setup/teardown, per record or per batch."""

    def __init__(self, target: Any) -> None:
        if inspect.isclass(target):
            target = target()
        self.target = target
        batch = getattr(target, "handle_batch", None)
        single = getattr(target, "handle", None)
        self.handle_batch: Callable[[Sequence[Record], Context], object] | None = (
            batch if callable(batch) else None
        )
        self.handle: Callable[[Record, Context], object] = single if callable(single) else target
        if self.handle_batch is None and not callable(self.handle):
            raise TypeError(f"{type(target).__name__} has neither handle nor handle_batch")
        view = getattr(target, "batch_view", RECORDS)
        if view not in BATCH_VIEWS:
            raise TypeError(
                f"batch_view must be {' or '.join(map(repr, BATCH_VIEWS))}, not {view!r}"
            )
        if view == MESSAGES and self.handle_batch is None:
            raise TypeError('batch_view = "messages" needs handle_batch')
        self.messages = view == MESSAGES  # handle_batch gets the consumer's messages
        self._setup = getattr(target, "setup", None)
        self._teardown = getattr(target, "teardown", None)

    def setup(self, ctx: Context) -> None:
        """Call the plugin's ``setup(ctx)`` if it has one."""
        if callable(self._setup):
            self._setup(ctx)

    def teardown(self, ctx: Context, reason: str) -> None:
        """Call the plugin's ``teardown(ctx, reason)`` if it has one."""
        if callable(self._teardown):
            self._teardown(ctx, reason)
