"""A time given on the command line: ISO 8601 (UTC unless it carries an offset) or Unix seconds.

One parser for every command that takes a time (``marshal-audit --since/--until``,
``marshal-admin release-group --until`` and ``set-position --to-datetime``). It raises
`TimeArgError` (a ValueError) saying what is wrong with the text; each command turns that
into its own usage error, prefixed with the option's name.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

from marshal_workers.protocol.wire import MAX_LOG_TIME_MS

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


class TimeArgError(ValueError):
    """The text is not a usable time (the message says why, without the option's name)."""


def parse_time_ms(text: str) -> int:
    """``text`` as Unix milliseconds, rounded to the nearest one.

    Unix seconds may have a fraction (``1700000000.5``); an ISO 8601 time without an offset is
    UTC. Times before 1970 (negative seconds included) or after 9999 are refused: no log time
    is."""
    stripped = text.strip()
    try:
        seconds: Decimal | None = Decimal(stripped)
    except InvalidOperation:
        seconds = None
    if seconds is not None:
        if not seconds.is_finite():
            raise TimeArgError(f"{text!r} is not a finite number of Unix seconds")
        if seconds < 0:
            raise TimeArgError(f"{text!r} is before 1970 (negative Unix seconds)")
        ms = int((seconds * 1000).to_integral_value(ROUND_HALF_EVEN))
    else:
        try:
            stamp = datetime.fromisoformat(stripped)
        except ValueError:
            raise TimeArgError(
                f"{text!r} is neither an ISO 8601 time (e.g. 2025-01-31T12:00:00Z) nor Unix seconds"
            ) from None
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=UTC)
        micros = (stamp - _EPOCH) // _MICROSECOND
        ms = int((Decimal(micros) / 1000).to_integral_value(ROUND_HALF_EVEN))
    if ms < 0:
        raise TimeArgError(f"{text!r} is before 1970 (Unix time 0)")
    if ms > MAX_LOG_TIME_MS:
        raise TimeArgError(f"{text!r} is after the year 9999 (no log time is)")
    return ms
