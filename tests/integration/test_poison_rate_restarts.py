"""`max_poison_rate` holds per partition across child restarts.

With ``--on-failure skip --retries 0`` and a handler that always raises, a child skips up to the
limit, stops (``poison_rate``), and is restarted: the restarted child counted from zero, so the
limit of 60 a minute let all 600 records of a partition be skipped in about 4 s."""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.fleet import Fleet, MakeFleet

pytestmark = pytest.mark.kafka
LIMIT = 60  # the default max_poison_rate (per minute)
WATCH_S = 8.0  # enough for ten restarts at the default back-off before the fix


@pytest.fixture
def fleet(make_fleet: MakeFleet) -> Fleet:
    return make_fleet(partitions=1)


def events(fleet: Fleet, name: str) -> list[dict[str, object]]:
    found = []
    for member in fleet.members:
        for line in member.log_path.read_text(errors="replace").splitlines():
            if f'"{name}"' in line:
                found.append(json.loads(line))
    return found


def test_a_restarted_child_does_not_count_the_poison_rate_from_zero(fleet: Fleet) -> None:
    fleet.produce(600)
    fleet.start(
        "a",
        "--on-failure",
        "skip",
        "--retries",
        "0",
        handler="tests.integration.failure_handlers:always_fails",
    )
    fleet.wait_for(lambda: bool(events(fleet, "handler_failed_record_skipped")), 60, "a skip")
    first = time.monotonic()
    time.sleep(WATCH_S)  # well inside the minute of the first skip
    assert time.monotonic() - first < 60
    skipped = sum(int(e["records"]) for e in events(fleet, "handler_failed_record_skipped"))
    stops = [e for e in events(fleet, "handler_failed") if e.get("cause") == "poison_rate"]
    assert skipped <= LIMIT, f"{skipped} records skipped within {WATCH_S}s (limit {LIMIT}/min)"
    assert skipped == LIMIT
    assert len(stops) >= 2, "the restarted child did not stop on the rate at once"
