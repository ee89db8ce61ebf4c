"""A fast stop (INT, QUIT or a second TERM) kills the children at once and still releases
every claim (found by CI on the merge that stopped members writing past their lease: the
fast stop revokes the child's lease by setting it to 0, and the member then took its own
claim's lease for run out and wrote no release; tests/integration/test_fleet_ops.py found it
with real processes). Scripted in the simulator, in both modes: the member's releases are
written, and the other member takes the claims over with no wait for them to go stale."""

from __future__ import annotations

import signal

import pytest

from marshal_workers.core import commands as cmd
from marshal_workers.protocol.members import is_member_key
from marshal_workers.protocol.wire import ClaimingPartition, ClaimKey, ReleasingPartition, claim_key
from marshal_workers.sim.node import SimNode
from marshal_workers.sim.params import SimParams
from marshal_workers.sim.scenario import Fleet


class FastStop:
    """Group ``group`` of two members on 4 partitions; the first gets ``sig`` at 3 s."""

    def __init__(self, seed: int, group: str, signals: list[signal.Signals]) -> None:
        params = SimParams(seed=seed, groups=2, partitions=4, faults=(), duration=8.0)
        self.fleet = fleet = Fleet(params)
        self.released: list[ClaimKey] = []
        self.held_at_stop: list[ClaimKey] = []
        self.taken_over: list[tuple[ClaimKey, float]] = []
        self.stopped_at = 0.0

        def add_members() -> None:
            other = "g1" if group == "g0" else "g0"
            fleet.add_node(other, "o1", 0.0)
            self.stopping = fleet.add_node(group, "c1", 0.0)
            self.watch(self.stopping, mine=True)
            self.watch(fleet.add_node(group, "c2", 0.05), mine=False)

        def schedule_faults() -> None:
            fleet.at(3.0, "fast stop", lambda: self._stop(signals))

        fleet.add_members = add_members  # type: ignore[method-assign]
        fleet.schedule_faults = schedule_faults  # type: ignore[method-assign]
        self.result = fleet.run()

    def watch(self, node: SimNode, mine: bool) -> None:
        run = node._run

        def watching(commands: list[cmd.Command], t: float) -> None:
            run(commands, t)
            for c in commands:
                message = getattr(c, "message", None)
                if isinstance(c, cmd.Append) and isinstance(message, ReleasingPartition) and mine:
                    self.released.append(claim_key(message))
                later = not mine and self.stopped_at and t > self.stopped_at
                if isinstance(c, cmd.Append) and isinstance(message, ClaimingPartition) and later:
                    self.taken_over.append((claim_key(message), t - self.stopped_at))

        node._run = watching  # type: ignore[method-assign]

    def _stop(self, signals: list[signal.Signals]) -> None:
        self.held_at_stop = [k for k in self.stopping.held_data() if not is_member_key(k)]
        self.stopped_at = self.fleet.t
        for sig in signals:
            self.stopping.signal(sig, self.fleet.t)


@pytest.mark.parametrize("group", ["g0", "g1"])  # ALO, AMO
@pytest.mark.parametrize(
    "signals", [[signal.SIGINT], [signal.SIGTERM, signal.SIGTERM]], ids=["INT", "TERM-twice"]
)
def test_a_fast_stop_releases_every_claim(group: str, signals: list[signal.Signals]) -> None:
    run = FastStop(0, group, signals)
    assert run.held_at_stop, "the stopping member held nothing"
    assert set(run.held_at_stop) <= set(run.released), (run.held_at_stop, run.released)
    hb = run.fleet.p.heartbeat_interval
    waits = {key: dt for key, dt in run.taken_over if key in run.held_at_stop}
    assert set(waits) == set(run.held_at_stop)
    assert max(waits.values()) < 2 * hb, waits  # released: no wait for them to go stale
    assert run.result.violations == []
