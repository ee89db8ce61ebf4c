"""A second host started with a client id that runs elsewhere, with real processes.

Restart recovery lets a new instance of a client id take its claims over; the instance it
replaced must then stop. A review started a second host with the same `--client-id`: the first
supervisor lost its claims and ran on, idle, saying only that it signalled its children.
"""

from __future__ import annotations

import subprocess

import pytest

from marshal_workers.common.errors import EXIT_USAGE
from marshal_workers.common.ledgerfile import find_overlaps
from tests.integration.fleet import Fleet, MakeFleet

pytestmark = pytest.mark.kafka


def test_the_replaced_instance_stops_with_one_line(make_fleet: MakeFleet) -> None:
    """Host 1 runs client a; host 2 (another lock directory) starts a as well: host 2's
    instance takes the claims over, host 1's stops with exit 2 and names the instance that
    replaced it, and no partition is handled by two at once."""
    fleet: Fleet = make_fleet(hb=1.0, partitions=2)
    fleet.produce_steadily(100)
    first = fleet.start("a")
    fleet.wait_for(lambda: fleet.counts() == {"a": 2}, 40, "a holding both")
    second = fleet.start("a", env={"XDG_RUNTIME_DIR": str(fleet.root / "host2")})
    try:
        code = first.wait(60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the replaced instance ran on:\n{first.log_tail()}")
    assert code == EXIT_USAGE, first.log_tail()
    text = first.log_path.read_text()
    assert '"member_replaced"' in text
    errors = [line for line in text.splitlines() if line.startswith("marshal-run: error:")]
    assert len(errors) == 1 and "replaced by instance" in errors[0], errors
    fleet.wait_for(lambda: fleet.counts() == {"a": 2}, 40, "host 2's a holding both")
    fleet.stop_producing()
    assert find_overlaps(fleet.ledger()) == []
    assert second.proc.poll() is None
