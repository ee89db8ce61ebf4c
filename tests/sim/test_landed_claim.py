"""A claim whose write times out and then lands is held at once (`Claiming.adopt_landed`),
scripted: the seed search that found it (seed 11 of ``poison,failures`` at a fail rate of 0.2
with skipping operators) went blind when the runtime's turn began folding the log before the
children's messages, as any change to which records a run writes moves such seeds. Here a lone
member's first claim of each partition is acknowledged as failed and lands 0.2 s later (had the
fold seen it before the acknowledgement, the write would be decided on that verdict).

Without adopting it the member held nothing while the log said it held the claims, and could
claim them again only once they went stale, 2*HB later at the soonest.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from marshal_workers.core.claiming import Claiming
from marshal_workers.sim.params import SimParams
from marshal_workers.sim.scenario import Fleet, RunResult

HB = 1.0


class FirstClaimsTimeOut(Fleet):
    """Every member's first write of each data claim fails, and lands all the same."""

    def __init__(self, params: SimParams) -> None:
        super().__init__(params)
        self.seen: set[bytes] = set()

    def advance(self, step: int) -> float:
        for node in self.nodes:
            for write in node.in_flight:
                data_claim = write.value.startswith(b"ClaimingPartition/") and b"__member" not in (
                    write.value
                )
                if data_claim and write.value not in self.seen:
                    self.seen.add(write.value)
                    write.fails, write.lands_anyway = True, False  # told it failed ...
                    late = write.lands_at + 0.2  # ... and it lands after that, all the same
                    self.at(late, "a claim lands late", self._lands(write.partition, write.key,
                            write.value, late))  # fmt: skip
        return super().advance(step)

    def _lands(self, partition: int, key: bytes, value: bytes, t: float) -> Callable[[], None]:
        return lambda: self.log.land(partition, key, value, t) and None


def run(seed: int) -> RunResult:
    params = SimParams(seed=seed, members=1, groups=1, partitions=2, faults=(), duration=8.0)
    return FirstClaimsTimeOut(params).run()


@pytest.mark.parametrize("seed", range(3))
def test_a_claim_that_timed_out_but_landed_is_held_at_once(seed: int) -> None:
    """The lone member holds and works both partitions within HB of its start."""
    result = run(seed)
    assert result.violations == []
    assert result.cold_start_s is not None and result.cold_start_s < HB


@pytest.mark.parametrize("seed", range(3))
def test_not_adopting_it_costs_two_heartbeat_intervals_or_more(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """The defect reintroduced: the member does not hold its own claims (it waits for them to
    go stale at least, and here its own claims' refusals keep them from it)."""
    monkeypatch.setattr(Claiming, "adopt_landed", lambda self, key, now: False)
    result = run(seed)
    assert result.cold_start_s is None or result.cold_start_s > 2 * HB
