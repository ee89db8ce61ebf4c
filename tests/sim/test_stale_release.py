"""A holder that wakes past its lease must not leave a release the cleaner keeps as the claim's
position (marshal-sim seeds 29 and 63 of ``--faults freeze,eager-compaction --fault-count 10``).

The sequence those seeds found, scripted here under the cleaner every member accepts (a lag of
4*HB, `min_compaction_lag_ms`), on one AMO partition:

1. H holds it and is frozen (SIGSTOP) for 7 HB; its child stops at the lease.
2. R wins it 2*HB after H's last heartbeat, reserves and handles past H's position.
3. The cleaner runs while H is frozen: H's fold, which stopped before R's claim, crosses a gap
   and folds R's claim as uncertain (activity only, not a grant to R).
4. R is killed; H wakes past its lease and, its fold showing no rival, releases the claim at
   its own, older position: refused by the log (R holds it), but its key's newest record.
5. H is killed too: the group is down for 10 HB. The cleaner removes R's heartbeats and
   reservations, older than the release under the same key.
6. A member that starts on that log sees R's claim, then H's release: it resumes at H's
   position, below what R was granted, and hands R's records out again.

The fleet's other group (ALO) keeps the log moving, so the cleaner reaches past the active
segment. With members that write nothing carrying a position once their lease has run out
(`Keeping.withhold_release`), the newest record of the key is R's, and nothing is granted
twice; without it this test fails (main at 5c6bfc3 too).
"""

from __future__ import annotations

from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.sim.node import SimNode
from marshal_workers.sim.params import SimParams
from marshal_workers.sim.scenario import Fleet

KEY = ClaimKey("g1", "tg1", 0)


class StaleRelease:
    """The scripted run (HB = 1 s)."""

    def __init__(self, seed: int) -> None:
        params = SimParams(
            seed=seed, groups=2, partitions=1, faults=(), duration=22.0, coordination_partitions=1
        )
        self.fleet = fleet = Fleet(params)
        self.nodes: dict[str, SimNode] = {}
        self.roles: dict[str, SimNode] = {}

        def add_members() -> None:
            self.nodes["a0"] = fleet.add_node("g0", "a0", 0.0)
            self.nodes["c1"] = fleet.add_node("g1", "c1", 0.0)
            self.nodes["c2"] = fleet.add_node("g1", "c2", 0.05)

        def schedule_faults() -> None:
            fleet.at(3.0, "freeze the holder", self._freeze_holder)
            fleet.at(9.5, "cleaner, 4 HB behind", lambda: self._clean(9.5))
            fleet.at(9.8, "kill the rival", lambda: self._kill("R"))
            fleet.at(10.5, "kill the woken holder", lambda: self._kill("H"))
            fleet.at(20.0, "cleaner, 4 HB behind", lambda: self._clean(20.0))
            fleet.at(20.5, "a member starts on the compacted log", self._join)

        fleet.add_members = add_members  # type: ignore[method-assign]
        fleet.schedule_faults = schedule_faults  # type: ignore[method-assign]
        self.result = fleet.run()

    def _freeze_holder(self) -> None:
        g1 = [self.nodes["c1"], self.nodes["c2"]]
        (holder,) = [n for n in g1 if KEY in n.held_data()]
        self.roles["H"] = holder
        self.roles["R"] = next(n for n in g1 if n is not holder)
        holder.freeze(self.fleet.t, 7.0)
        self.fleet.window(7.0)

    def _clean(self, t: float) -> None:
        self.fleet.log.compact(int((t - 4 * self.fleet.p.heartbeat_interval) * 1000))
        self.fleet.window(0.2)

    def _kill(self, role: str) -> None:
        self.roles[role].kill(self.fleet.t)
        self.fleet.window(0.0)

    def _join(self) -> None:
        self.nodes["c3"] = self.fleet.add_node("g1", "c3", self.fleet.t)
        self.fleet.window(0.5)


def test_a_holder_woken_past_its_lease_leaves_no_release_that_outlives_the_rivals_position() -> (
    None
):
    run = StaleRelease(seed=0)
    assert set(run.roles) == {"H", "R"}
    doubles = [v for v in run.result.violations if v["invariant"] == "amo_no_double_grant"]
    assert doubles == [], doubles[:3]
    assert run.result.violations == []
