"""marshal-admin reads a group's settings from the coordination log.

A fleet at a 2 s heartbeat interval: `status`, `release-group` and `skip-record` without
--heartbeat-interval fold with the group's recorded 2 s (they were refused as "10s here but 2s
in the group's settings" before), and a --heartbeat-interval that disagrees with the log is
refused with one line, exit 2.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from marshal_workers.common.errors import EXIT_USAGE
from tests.integration.fleet import Fleet, MakeFleet

pytestmark = pytest.mark.kafka
HB = 2.0


@pytest.fixture
def fleet(make_fleet: MakeFleet) -> Fleet:
    return make_fleet(hb=HB, partitions=2)


def admin(fleet: Fleet, *args: str) -> subprocess.CompletedProcess[str]:
    """`marshal-admin ARGS` with no heartbeat interval unless ARGS give one."""
    return fleet.admin(*args, heartbeat=False)


def test_admin_commands_fold_with_the_groups_recorded_interval(fleet: Fleet) -> None:
    fleet.produce(20)
    a = fleet.start("a")
    fleet.wait_for(lambda: fleet.counts() == {"a": 2}, 40, "a holding both partitions")

    status = admin(fleet, "status", "--group", fleet.group, "--json")
    assert status.returncode == 0, status.stderr
    claims = [c for c in json.loads(status.stdout)["claims"] if c["topic"] == fleet.topic]
    assert {(c["partition"], c["state"]) for c in claims} == {(0, "fresh"), (1, "fresh")}

    lifted = admin(fleet, "release-group", "--group", fleet.group, "--for", "0")
    assert lifted.returncode == 0, lifted.stderr

    skipped = admin(
        fleet, "skip-record", "--group", fleet.group, "--topic", fleet.topic,
        "--partition", "0", "--offset", "0",
    )  # fmt: skip
    # no poison record there: the log refuses it (exit 1), but the settings were accepted
    assert skipped.returncode != EXIT_USAGE, skipped.stderr
    assert "heartbeat_interval" not in skipped.stderr

    refused = admin(fleet, "status", "--group", fleet.group, "--heartbeat-interval", "10")
    assert refused.returncode == EXIT_USAGE, refused.stderr
    (line,) = refused.stderr.splitlines()
    assert "heartbeat_interval is 10s here but 2s" in line, line
    assert a.proc.poll() is None
