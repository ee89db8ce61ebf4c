"""A deploy across many groups on one coordination topic: every member restarted in turn.

How a company runs it: several groups on one placed `__marshal` (two of them sharing a home
partition), each with its own data topic, the same client ids on one host in every group
(``a`` and ``b``), records arriving all the while, and a rolling deploy that stops each member
gracefully and starts it again, one after another, waiting for its group to settle before the
next. Nothing may be handled by two processes at once, ALO may skip nothing, AMO may hand
nothing out twice and lose nothing (no member crashed), every member follows its group's home
only, and the audit of the whole topic, with every group's ledger, finds no violation.
"""

from __future__ import annotations

import json
import shutil
import signal
import time
from pathlib import Path

import pytest

from marshal_workers.protocol.members import is_live
from marshal_workers.protocol.placement import home
from tests.integration.fleet import Fleet, MakeFleet, Member
from tests.integration.test_fleet import assert_ledger_sound, stop_all
from tests.integration.test_group_placement import (
    COORDINATION,
    group_with_home_apart,
    located,
    wait_handled,
)

pytestmark = pytest.mark.kafka


def group_at(at: int) -> str:
    """A group name whose home (of COORDINATION partitions) is ``at``."""
    return group_with_home_apart(set(range(COORDINATION)) - {at})


def started_instance(member: Member) -> str | None:
    """The instance id of the member's `supervisor_started` line, once it is logged."""
    for line in member.log_path.read_text(errors="replace").splitlines():
        if '"supervisor_started"' in line:
            return str(json.loads(line)["instance_id"])
    return None


def held_by(fleet: Fleet, instance: str) -> int:
    """How many of the fleet's data partitions ``instance`` holds with a live claim."""
    fleet.reader.poll(0.2)
    now, hb_ms = int(time.time() * 1000), int(fleet.hb * 1000)
    return sum(
        1
        for world in fleet.reader.worlds.values()
        for key, state in world.claims.items()
        if key.topic == fleet.topic
        and state.holder_instance == instance
        and is_live(state, now, hb_ms)
    )


def restart(fleet: Fleet, client_id: str, host: dict[str, str]) -> None:
    """Stop ``client_id``'s running member gracefully (exit 0), start it again, and wait until
    the new instance holds two partitions and the other member two (the client id alone would
    count the old instance's claims until their releases are folded)."""
    (running,) = [m for m in fleet.members if m.client_id == client_id and m.proc.poll() is None]
    running.signal(signal.SIGTERM)
    assert running.wait(30) == 0, running.log_tail()
    new = fleet.start(client_id, env=host)
    fleet.wait_for(lambda: started_instance(new) is not None, 60, f"{client_id} started")
    instance = started_instance(new)
    assert instance is not None
    fleet.wait_for(
        lambda: held_by(fleet, instance) == 2 and sorted(fleet.counts().values()) == [2, 2],
        60,
        f"the new {client_id} holding 2 of a 2/2 split",
    )


@pytest.mark.timeout(600)
def test_a_rolling_deploy_of_every_member_of_three_groups(
    make_fleet: MakeFleet, tmp_path: Path
) -> None:
    """Three groups (ALO, AMO, ALO), two sharing a home partition, two members each with the
    same client ids; records flow while every member is restarted in turn."""
    first = make_fleet(coordination_partitions=COORDINATION, placed=True, partitions=4)
    shared = home(first.group, COORDINATION)
    second = make_fleet(
        coordination=first.coordination, group=group_at(shared), partitions=4, mode="amo"
    )
    third = make_fleet(
        coordination=first.coordination, group=group_with_home_apart({shared}), partitions=4
    )
    fleets = (first, second, third)
    host = {"XDG_RUNTIME_DIR": str(tmp_path / "host-run")}  # one host's client-id locks
    for fleet in fleets:
        fleet.produce_steadily(150)
        fleet.start("a", env=host)
        fleet.start("b", env=host)
    for fleet in fleets:
        fleet.wait_split([2, 2])
    for client_id in ("a", "b"):
        for fleet in fleets:
            restart(fleet, client_id, host)
    for fleet in fleets:
        fleet.stop_producing()
    for fleet in fleets:
        wait_handled(fleet)  # AMO too: graceful stops lose nothing
        stop_all(fleet)
    for fleet in fleets:
        assert_ledger_sound(fleet, alo=fleet.mode == "alo")
        at = home(fleet.group, COORDINATION)
        for member in fleet.members:
            assert located(member.log_path)["followed"] == [at], member.log_tail()
    handled = sum(len(f.ledger()) for f in fleets)
    ledgers = tmp_path / "all-ledgers"
    ledgers.mkdir()
    for i, fleet in enumerate(fleets):
        for path in fleet.ledger_dir.glob("*.jsonl"):
            shutil.copy(path, ledgers / f"ledger-{i}-{path.name[len('ledger-') :]}")
    first.ledger_dir = ledgers  # the audit reads every group's ledger with the whole topic
    code, summary, err = first.audit(tmp_path / "audit")
    assert code == 0, err
    assert summary["handovers"] >= 6, summary  # (each restart hands its claims over)
    assert summary["violations"] == 0, summary["violation_examples"]
    assert sorted(g["group"] for g in summary["groups"]) == sorted(f.group for f in fleets)
    assert summary["ledger"]["checked"] == handled
    assert summary["ledger"]["unverifiable"] == 0
    assert summary["amo_losses"]["records"] == 0, summary["amo_losses"]
