"""A second host started with a client id that runs elsewhere, with real processes.

Restart recovery lets a new instance of a client id take its claims over; the instance it
replaced must then stop handling. A review started a second host with the same `--client-id`:
the first supervisor lost its claims and ran on, idle, saying only that it signalled its
children. It then stopped with exit 2, which a forged takeover could cause with one record; it
now goes dormant, and claims again once the other instance is gone.
"""

from __future__ import annotations

import signal

import pytest

from marshal_workers.common.ledgerfile import find_overlaps
from tests.integration.fleet import Fleet, MakeFleet, http_get
from tests.integration.test_operator_signals import logged

pytestmark = pytest.mark.kafka


def test_the_replaced_instance_goes_dormant_and_claims_again_once_the_other_stops(
    make_fleet: MakeFleet,
) -> None:
    """Host 1 runs client a; host 2 (another lock directory) starts a as well: host 2's
    instance takes the claims over, host 1's goes dormant with one error line naming the
    instance that replaced it, and runs on with no child; its /readyz says 503 and why, its
    /healthz 200, `marshal_member_dormant` 1. Host 2 stopped (TERM), host 1's claims both
    partitions again, ready. No partition is handled by two at once."""
    fleet: Fleet = make_fleet(hb=1.0, partitions=2)
    fleet.produce_steadily(100)
    first = fleet.start("a", "--metrics-port", "0")
    fleet.wait_for(lambda: fleet.counts() == {"a": 2}, 40, "a holding both")
    fleet.wait_for(lambda: bool(logged(first, "metrics_serving")), 30, "the metrics server")
    port = logged(first, "metrics_serving")[0]["port"]
    fleet.wait_for(lambda: http_get(port, "/readyz")[0] == 200, 30, "host 1 ready")
    second = fleet.start("a", env={"XDG_RUNTIME_DIR": str(fleet.root / "host2")})

    def replaced() -> list[str]:
        text = first.log_path.read_text(errors="replace")
        return [line for line in text.splitlines() if '"member_replaced"' in line]

    fleet.wait_for(lambda: replaced() != [], 60, "host 1's instance replaced")
    fleet.wait_for(
        lambda: len(second.children()) == 2 and first.children() == [],
        40,
        "host 2's a working both, host 1's none",
    )
    fleet.wait_for(lambda: fleet.counts() == {"a": 2}, 40, "a holding both")
    assert first.proc.poll() is None, first.log_tail()
    lines = replaced()
    assert len(lines) == 1 and '"level": "error"' in lines[0] and "dormant" in lines[0], lines
    status, text = http_get(port, "/readyz")
    assert status == 503 and text.startswith("dormant: instance "), text
    assert http_get(port, "/healthz")[0] == 200
    assert (
        f'marshal_member_dormant{{client_id="a",group="{fleet.group}"}} 1.0'
        in http_get(port, "/metrics")[1]
    )
    second.signal(signal.SIGTERM)
    assert second.wait(60) == 0, second.log_tail()
    fleet.wait_for(lambda: len(first.children()) == 2, 60, "host 1's a working both again")
    assert '"member_resumed"' in first.log_path.read_text(errors="replace")
    assert http_get(port, "/readyz") == (200, "ready\n")
    fleet.stop_producing()
    assert find_overlaps(fleet.ledger()) == []
    assert first.proc.poll() is None
