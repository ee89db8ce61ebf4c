"""A claim's start lookup that nobody used owes no records (`marshal-sim` seed 28 of
``--ordering key --workers-per-partition 3`` with every fault, on wp-amo before its rebase onto
5c6bfc3; that seed replayed clean on every commit of the branch tried since, so the scenario
it was read as is forced here instead).

A member that wins a claim with no position asks where it starts (`LookupStart`: in a group
that starts at ``latest``, the high watermark W1 then). Stopped (TERM) or killed before the
answer comes, it releases the claim with no position (or dies): nothing was reserved,
committed or handed to a child at W1. The next holder looks up again and starts at W2 > W1.
The records W1..W2 were never owed: the group had not started there. The checker counted
the first lookup issued as the partition's start, and reported W1..W2 as AMO records "lost in
no crash" (and would report them as skipped in an ALO group). The partition starts where its
first child starts (at a looked-up start only once a heartbeat put it in the log:
`test_failed_first_start.py`); that is what is checked."""

from __future__ import annotations

import signal
from dataclasses import replace

import pytest

from marshal_workers.core import commands as cmd
from marshal_workers.core.claiming import Claiming
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.sim.node import SimNode
from marshal_workers.sim.params import SimParams
from marshal_workers.sim.scenario import run_seed

# g1 is AMO and starts at latest, g2 ALO at latest (`Fleet`: g0 earliest, g1 and g2 latest)
LATEST_GROUPS = ("g1", "g2")


def _stop_at_first_lookup(monkeypatch: pytest.MonkeyPatch, how: str) -> list[str]:
    """The first member of each latest group to ask where a claim starts is stopped (TERM) or
    killed in that turn, before the answer comes. Returns the names of the members hit."""
    hit: list[str] = []
    run = SimNode._run

    def stopping(self: SimNode, commands: list[cmd.Command], t: float) -> None:
        run(self, commands, t)
        asks = any(isinstance(c, cmd.LookupStart) for c in commands)
        group = self.settings.group
        first = not any(name.startswith(f"{group}:") for name in hit)
        if asks and group in LATEST_GROUPS and first and self.alive:
            hit.append(self.name)
            if how == "term":
                self.signal(signal.SIGTERM, t)
            else:
                self.kill(t)

    monkeypatch.setattr(SimNode, "_run", stopping)
    return hit


@pytest.mark.parametrize("how", ["term", "kill"])
def test_a_member_stopped_before_its_start_lookup_answers_owes_nothing(
    monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    hit = _stop_at_first_lookup(monkeypatch, how)
    params = SimParams(members=9, groups=3, faults=(), fault_count=0, duration=20)
    for seed in range(3):
        hit.clear()
        result = run_seed(replace(params, seed=seed))
        assert any(name.startswith("g1:") for name in hit)  # an AMO member was hit
        assert any(name.startswith("g2:") for name in hit)  # and an ALO one
        assert result.violations == [], seed


def test_a_holder_that_looks_its_start_up_again_still_loses_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check is no looser where a start was adopted: a core that ignores the position the
    log carries in a latest group, and looks its start up again at each claim, skips what lay
    between the last holder's position and the new high watermark; found in both modes."""
    resume_position = Claiming.resume_position

    def looked_up(self: Claiming, key: ClaimKey) -> int | None:
        return None if key.group in LATEST_GROUPS else resume_position(self, key)

    monkeypatch.setattr(Claiming, "resume_position", looked_up)
    params = SimParams(members=9, groups=3, faults=("restart",), fault_count=3)
    found = {v["invariant"] for v in run_seed(params).violations}
    assert {"amo_loss_only_on_crash", "alo_no_skip"} <= found, found
