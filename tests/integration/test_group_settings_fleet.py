"""Settings a fleet must share, with real processes.

A member whose heartbeat interval is not the group's is refused at start (exit 2, one line
naming the setting and both values) and never claims; the group's interval is changed only by
`marshal-admin group-settings --change`, after which the old members stop (exit 2) and members
with the new interval take the group over, with no partition handled by two at once.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from marshal_workers.common.errors import EXIT_USAGE
from marshal_workers.common.ledgerfile import find_overlaps
from tests.integration.fleet import MARSHAL_ADMIN, Fleet, MakeFleet

pytestmark = pytest.mark.kafka
HB = 2.0


@pytest.fixture
def fleet(make_fleet: MakeFleet) -> Fleet:
    return make_fleet(hb=HB, partitions=4)


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("marshal-run: error:")]


def change_heartbeat(fleet: Fleet, seconds: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")}
    command = [
        str(MARSHAL_ADMIN), "group-settings", "--group", fleet.group, "--change",
        "--bootstrap-servers", fleet.bootstrap, "--coordination-topic", fleet.coordination,
        "--heartbeat-interval", str(seconds), "--timeout", "60",
    ]  # fmt: skip
    return subprocess.run(
        command, capture_output=True, text=True, timeout=180, env=env, check=False
    )


def test_rolling_heartbeat_change(fleet: Fleet) -> None:
    """HB 2 s fleet: a member with HB 1 s is refused and claims nothing; after the operator's
    group-settings --change, the old member stops and one with HB 1 s takes every partition."""
    fleet.produce_steadily(200)
    a = fleet.start("a")
    fleet.wait_for(lambda: fleet.counts() == {"a": 4}, 40, "a holding all 4")
    b = fleet.start("b", "--heartbeat-interval", "1")
    try:
        code = b.wait(60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"a member with HB 1 s ran in an HB 2 s group:\n{b.log_tail()}")
    assert code == EXIT_USAGE, b.log_tail()
    (line,) = error_lines(b.log_path.read_text())
    assert f"heartbeat_interval is 1s here but 2s in group {fleet.group}'s settings" in line
    assert fleet.counts() == {"a": 4}
    assert not [r for r in fleet.ledger() if r.client_id == "b"]

    changed = change_heartbeat(fleet, 1.0)
    assert changed.returncode == 0, changed.stderr
    assert "settings changed from heartbeat_interval=2s" in changed.stdout
    assert a.wait(60) == EXIT_USAGE, a.log_tail()
    assert "group_settings_changed" in a.log_path.read_text()
    c = fleet.start("c", "--heartbeat-interval", "1")
    fleet.wait_for(lambda: fleet.counts() == {"c": 4}, 40, "c (HB 1 s) holding all 4")
    fleet.wait_for(lambda: "c" in {r.client_id for r in fleet.ledger()}, 60, "c handling")
    fleet.stop_producing()
    assert find_overlaps(fleet.ledger()) == []
    assert c.proc.poll() is None


def change_mode(fleet: Fleet, mode: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")}
    command = [
        str(MARSHAL_ADMIN), "group-settings", "--group", fleet.group, "--change",
        "--bootstrap-servers", fleet.bootstrap, "--coordination-topic", fleet.coordination,
        "--heartbeat-interval", str(HB), "--mode", mode, "--timeout", "60",
    ]  # fmt: skip
    return subprocess.run(
        command, capture_output=True, text=True, timeout=180, env=env, check=False
    )


def test_a_member_of_the_other_mode_is_refused(fleet: Fleet) -> None:
    """ALO group: an AMO member is refused at start and claims nothing (it would reserve runs
    that the next ALO owner resumes after, unhandled); the mode changes only by group-settings
    --change --mode, after which the ALO member stops and an AMO one takes every partition."""
    fleet.produce_steadily(200)
    a = fleet.start("a")
    fleet.wait_for(lambda: fleet.counts() == {"a": 4}, 40, "a holding all 4")
    b = fleet.start("b", "--mode", "amo")
    try:
        code = b.wait(60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"an AMO member ran in an ALO group:\n{b.log_tail()}")
    assert code == EXIT_USAGE, b.log_tail()
    (line,) = error_lines(b.log_path.read_text())
    assert f"mode is amo here but alo in group {fleet.group}'s settings" in line
    assert fleet.counts() == {"a": 4}
    assert not [r for r in fleet.ledger() if r.client_id == "b"]

    changed = change_mode(fleet, "amo")
    assert changed.returncode == 0, changed.stderr
    assert "mode=alo" in changed.stdout and "mode=amo" in changed.stdout, changed.stdout
    assert a.wait(60) == EXIT_USAGE, a.log_tail()
    assert "group_settings_changed" in a.log_path.read_text()
    c = fleet.start("c", "--mode", "amo")
    fleet.wait_for(lambda: fleet.counts() == {"c": 4}, 40, "c (AMO) holding all 4")
    fleet.wait_for(lambda: "c" in {r.client_id for r in fleet.ledger()}, 60, "c handling")
    fleet.stop_producing()
    assert find_overlaps(fleet.ledger()) == []
    assert c.proc.poll() is None
