"""Why a claim stands unclaimed because of a failing record, as the log shows it (pure).

A member whose child failed ``max_handler_failures`` times in a row releases the partition and
keeps off it for `keep_away_s` (any other member may claim it at once); a record failed
``poison_park_after`` times in total is parked: its holder keeps the claim and runs no child
until an operator decides. `marshal-admin status` says which, and until when, from the claim's
release and the record's count in the log (`why_unclaimed`); the member applies the same
`keep_away_s` (`core.childexits.decide`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from marshal_workers.protocol.rationalizer import ClaimState
from marshal_workers.protocol.recordfailures import PoisonState


def keep_away_s(heartbeat_interval_s: float) -> float:
    """How long a member keeps off a partition it released after ``max_handler_failures``
    failures in a row: max(60 s, 10·HB)."""
    return max(60.0, 10 * heartbeat_interval_s)


class Why(StrEnum):
    """Why nobody holds the claim."""

    HANDLER_FAILURES = "handler_failures"  # released after failures in a row; others may claim
    PARKED = "parked"  # the record is parked: a holder would run no child until an operator


@dataclass(frozen=True, slots=True)
class Unclaimed:
    """A claim nobody holds because of its failing record: why, who released it and when (log
    time, ms), and until when that member keeps off it (None: until an operator decides)."""

    why: Why
    offset: int
    failures: int
    by: str
    since_ms: int
    until_ms: int | None

    def describe(self, stamp: Callable[[int | None], str | None]) -> str:
        """One line for `marshal-admin status` (``stamp`` writes a log time)."""
        if self.why is Why.PARKED:
            return (
                f"unclaimed, its record at offset {self.offset} parked after {self.failures} "
                "failures: a member that claims it runs no child until an operator runs "
                "marshal-admin skip-record or retry-record"
            )
        return (
            f"unclaimed: {self.by} released it after failures in a row on offset "
            f"{self.offset} ({self.failures} counted in the log) at {stamp(self.since_ms)} and "
            f"keeps off it until {stamp(self.until_ms)}; any other member may claim it now"
        )


def why_unclaimed(
    state: ClaimState, poison: PoisonState | None, heartbeat_interval_ms: int
) -> Unclaimed | None:
    """Why a released claim is unclaimed because of its failing record ``poison`` (the
    record's count, active at the claim's position), or None (held, or released for another
    reason: a stop, a rebalance)."""
    if state.holder_client is not None or not state.released or not state.certain:
        return None
    released_ms = state.last_activity
    if poison is None or released_ms is None or poison.skipped:
        return None
    if poison.parked:
        return Unclaimed(Why.PARKED, poison.offset, poison.failures, poison.client_id,
                         released_ms, None)  # fmt: skip
    if poison.failures == 0 or released_ms < poison.log_time:
        return None  # retried by an operator, or counted after the release: not why
    until = released_ms + int(keep_away_s(heartbeat_interval_ms / 1000) * 1000)
    return Unclaimed(Why.HANDLER_FAILURES, poison.offset, poison.failures, poison.client_id,
                     released_ms, until)  # fmt: skip
