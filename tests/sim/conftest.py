"""Helpers for the simulator's tests: run seeds, collect violations by invariant."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from marshal_workers.core import children
from marshal_workers.core.keeping import Keeping
from marshal_workers.sim.params import SimParams
from marshal_workers.sim.scenario import run_seed


def first_violation(params: SimParams, invariant: str, seeds: int, first: int = 0) -> int | None:
    """The first seed (first..first+seeds-1) whose run violates ``invariant``, or None."""
    for seed in range(first, first + seeds):
        result = run_seed(replace(params, seed=seed))
        if any(v["invariant"] == invariant for v in result.violations):
            return seed
    return None


def violations(params: SimParams, seeds: int) -> list[tuple[int, dict[str, object]]]:
    """Every violation of seeds 0..seeds-1, with its seed."""
    found = []
    for seed in range(seeds):
        found.extend((seed, v) for v in run_seed(replace(params, seed=seed)).violations)
    return found


WAITS_FOR_RESERVATION = Keeping.waits_for_reservation


def beats_every_turn(self: Keeping, held: Any, now: float) -> bool:
    """`Keeping.waits_for_reservation` as it was before 2026-12-03, when a heartbeat that went on
    a lease with less than HB left was written again on every turn until the verdicts came:
    never waits on such a lease. Rows whose path the change took away replay the seed that
    found them with it (``monkeypatch.setattr(Keeping, "waits_for_reservation", ...)``)."""
    if held.lease - now <= self.ctx.s.heartbeat_interval:
        return False
    return WAITS_FOR_RESERVATION(self, held, now)


DECIDE = children.decide


def carried_whole(
    held: Any, exited: Any, next_: Any, end: int, *, stops_after: bool = False
) -> tuple[int, int] | None:
    """`children.carried` as it was before 2026-12-03 (third): nothing carried where part of
    the range was reported lost already."""
    stopped = exited.stopped_at
    restarts = next_ in (children.Next.RESPAWN, children.Next.RESTART_LATER)
    if stopped is None or not (restarts or stops_after):
        return None
    start = stopped if exited.position is None else max(stopped, exited.position)
    if start > end or any(a < end and b > start for a, b in held.lost):
        return None
    return (start, end)


def lets_go_at_the_lease_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """The member as it was before its claims waited for the lease's verdicts (2026-12-03,
    later): a child stopped at a record boundary as its lease was ending, its exit read with
    a kill grace or less of the lease left, let the claim go at once, what it carried
    reported lost (`childexits.decide`'s ``carries`` unused, `Keeping.lease_may_return`,
    `Keeping.too_late_to_carry` and `Keeping.carry_left` never), and a child stopped so while
    the claim was asked to stop left a carry only with time left to hand it on
    (`Keeping.carries_when_stopping`), and none where part of it was reported lost before
    (`carried_whole`). Rows whose path that change took away replay the seed
    that found them with it."""
    monkeypatch.setattr(children, "decide", lambda **kw: DECIDE(**{**kw, "carries": False}))
    monkeypatch.setattr(Keeping, "lease_may_return", lambda self, held, now: False)
    monkeypatch.setattr(Keeping, "too_late_to_carry", lambda self, held, now: False)
    monkeypatch.setattr(Keeping, "carry_left", lambda self, held: False)
    monkeypatch.setattr(Keeping, "carries_when_stopping", Keeping.stops_after_carry)
    monkeypatch.setattr(children, "carried", carried_whole)
