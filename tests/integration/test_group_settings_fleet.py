"""Settings a fleet must share, with real processes.

A member whose heartbeat interval is not the group's is refused at start (exit 2, one line
naming the setting and both values) and never claims; the group's interval is changed only by
`marshal-admin group-settings --change`, after which the old members stop (exit 2) and members
with the new interval take the group over, with no partition handled by two at once.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

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


def change_settings(fleet: Fleet, *options: str) -> subprocess.CompletedProcess[str]:
    """`marshal-admin group-settings --change` with ``options``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")}
    command = [
        str(MARSHAL_ADMIN), "group-settings", "--group", fleet.group, "--change",
        "--bootstrap-servers", fleet.bootstrap, "--coordination-topic", fleet.coordination,
        *options, "--timeout", "60",
    ]  # fmt: skip
    return subprocess.run(
        command, capture_output=True, text=True, timeout=180, env=env, check=False
    )


@dataclass(frozen=True)
class Change:
    """A setting a fleet must share: a member started with ``other`` is refused with ``line``
    (the group's name after it); ``change`` records it; ``shown`` is in the change's output."""

    other: tuple[str, ...]
    line: str
    change: tuple[str, ...]
    shown: tuple[str, ...]


HEARTBEAT = Change(("--heartbeat-interval", "1"), "heartbeat_interval is 1s here but 2s in group",
                   ("--heartbeat-interval", "1"), ("settings changed from heartbeat_interval=2s",))
# an AMO member in an ALO group would reserve runs that the next ALO owner resumes after,
# unhandled (a review: 4 records never handled)
MODE = Change(("--mode", "amo"), "mode is amo here but alo in group",
              ("--heartbeat-interval", str(HB), "--mode", "amo"),
              ("mode=alo", "mode=amo"))  # fmt: skip


@pytest.mark.parametrize("setting", [HEARTBEAT, MODE], ids=["heartbeat", "mode"])
def test_a_rolling_change(fleet: Fleet, setting: Change) -> None:
    """HB 2 s ALO fleet: a member with another heartbeat interval (or mode) is refused and
    claims nothing; after the operator's group-settings --change, the old member stops and one
    with the new setting takes every partition, with no partition handled by two at once."""
    fleet.produce_steadily(200)
    a = fleet.start("a")
    fleet.wait_for(lambda: fleet.counts() == {"a": 4}, 40, "a holding all 4")
    b = fleet.start("b", *setting.other)
    try:
        code = b.wait(60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"a member with {setting.other} ran in the group:\n{b.log_tail()}")
    assert code == EXIT_USAGE, b.log_tail()
    (line,) = error_lines(b.log_path.read_text())
    assert f"{setting.line} {fleet.group}'s settings" in line
    assert fleet.counts() == {"a": 4}
    assert not [r for r in fleet.ledger() if r.client_id == "b"]

    changed = change_settings(fleet, *setting.change)
    assert changed.returncode == 0, changed.stderr
    assert all(text in changed.stdout for text in setting.shown), changed.stdout
    assert a.wait(60) == EXIT_USAGE, a.log_tail()
    assert "group_settings_changed" in a.log_path.read_text()
    c = fleet.start("c", *setting.other)
    fleet.wait_for(lambda: fleet.counts() == {"c": 4}, 40, "c holding all 4")
    fleet.wait_for(lambda: "c" in {r.client_id for r in fleet.ledger()}, 60, "c handling")
    fleet.stop_producing()
    assert find_overlaps(fleet.ledger()) == []
    assert c.proc.poll() is None
