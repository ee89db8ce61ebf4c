"""Migrating a group from Marshal Go: `marshal-admin` reads a Go fleet's topic
read-only (keyless records in Go's exact format, a delete-policy topic, sender clocks), shows
its claims and positions with `status` and `dump`, and `import-go` seeds our coordination log,
so that our fleet starts where the Go fleet stopped: no record skipped, none handled twice."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from tests.integration.fleet import Fleet, MakeFleet
from tests.integration.go_fleet import create_go_topic, fixture_lines, write_go_records

pytestmark = pytest.mark.kafka
PER_PARTITION = 25
GO_POSITIONS = {0: 9, 1: 20, 2: 13, 3: 6}  # what the fixture's Go fleet stopped at


@pytest.fixture
def fleet(make_fleet: MakeFleet) -> Fleet:
    return make_fleet(mode="alo", hb=1.0, partitions=4)


def test_status_and_dump_read_a_go_fleets_topic(fleet: Fleet) -> None:
    """status --go-topic shows Go's positions and claims; dump --go-topic every record with
    what Go did with it; neither writes to the Go topic."""
    go = create_go_topic(fleet.bootstrap, 2)
    lines = fixture_lines(fleet.group, fleet.topic)
    assert all(e is None for e in write_go_records(fleet.bootstrap, go, 2, lines))
    done = fleet.admin("status", "--group", fleet.group, "--go-topic", go, "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    shown = {c["partition"]: (c["state"], c["offset"]) for c in status["claims"]}
    assert shown == {
        0: ("released", 9),
        1: ("released", 20),
        2: ("stale", 13),  # crashed: its last heartbeat holds the position
        3: ("released", 6),
    }
    assert status["source"] == "marshal-go" and status["topic"] == go
    dump = fleet.admin("dump", "--go-topic", go, "--json")
    assert dump.returncode == 0, dump.stderr
    entries = [json.loads(line) for line in dump.stdout.splitlines()]
    assert len(entries) == len(lines) and all(e["key"] is None for e in entries)
    assert sorted(e["message"].encode() for e in entries) == sorted(lines)
    verdicts = Counter(e["reason"].split(":")[0] for e in entries)
    assert verdicts["ignored"] == 1  # the ClaimingMessages
    assert verdicts["claim ignored"] == 1 and verdicts["release dropped"] == 1
    again = fleet.admin("dump", "--go-topic", go, "--json")
    assert len(again.stdout.splitlines()) == len(lines)  # read-only: nothing was added


def test_import_go_then_our_fleet_starts_where_go_stopped(fleet: Fleet) -> None:
    """After import-go, a member handles exactly the records from each Go position on."""
    fleet.produce(4 * PER_PARTITION)
    go = create_go_topic(fleet.bootstrap, 2)
    write_go_records(fleet.bootstrap, go, 2, fixture_lines(fleet.group, fleet.topic))
    done = fleet.admin("import-go", "--group", fleet.group, "--go-topic", go)
    assert done.returncode == 0, done.stderr
    moved = fleet.admin("status", "--group", fleet.group, "--json")
    offsets = {c["partition"]: c["offset"] for c in json.loads(moved.stdout)["claims"]}
    assert offsets == GO_POSITIONS

    fleet.start("ours-1")
    expected = {(p, o) for p, start in GO_POSITIONS.items() for o in range(start, PER_PARTITION)}
    fleet.wait_for(
        lambda: {(r.partition, r.offset) for r in fleet.ledger()} >= expected,
        90,
        "the member to handle everything after the Go positions",
    )
    handled = Counter((r.partition, r.offset) for r in fleet.ledger())
    assert set(handled) == expected, "a record below a Go position was handled (or one missed)"
    assert max(handled.values()) == 1, "a record was handled twice"


def test_import_go_refuses_while_the_go_fleet_runs(fleet: Fleet) -> None:
    """A Go claim heartbeated just now (sender clock) is live: import-go refuses, exit 1,
    and nothing is written to our coordination topic."""
    go = create_go_topic(fleet.bootstrap, 2)
    now = int(time.time())
    live = f"Heartbeat/1/{now}/5f3a9c1e/go-w1/{fleet.group}/{fleet.topic}/0/5".encode()
    write_go_records(fleet.bootstrap, go, 2, [live])
    done = fleet.admin("import-go", "--group", fleet.group, "--go-topic", go)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].startswith("marshal-admin: error: the Marshal Go fleet")
    status = fleet.admin("status", "--group", fleet.group, "--json")
    # nothing of the group is in our log: status says the group is unknown, and
    # --json answers JSON all the same: no claim
    assert status.returncode == 1
    assert json.loads(status.stdout)["known"] is False
    assert json.loads(status.stdout)["claims"] == []
    assert f"group {fleet.group} is unknown" in status.stderr
