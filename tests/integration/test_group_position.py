"""End to end: pausing a running fleet, setting its position, and its offsets in Kafka.

Real `marshal-run` supervisors and the real `marshal-admin` on the session broker; the ledger
shows what the handlers did, the coordination log who held what.
"""

from __future__ import annotations

import json
import signal
import time

import pytest

from marshal_workers.common.ledgerfile import find_gaps, find_overlaps
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.kafkalog import KafkaLog
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import RationalizerConfig
from tests.integration.fleet import DEFAULT_ADMINS, Fleet, MakeFleet

pytestmark = pytest.mark.kafka
HB = 1.0
PARTITIONS = 4


@pytest.fixture
def fleet(make_fleet: MakeFleet) -> Fleet:
    return make_fleet(hb=HB, partitions=PARTITIONS)


def stop_all(fleet: Fleet) -> None:
    running = [m for m in fleet.members if m.proc.poll() is None]
    for member in running:
        member.signal(signal.SIGTERM)
    for member in running:
        assert member.wait(20) == 0, member.log_tail()


def admin_verdicts(fleet: Fleet) -> list[ev.Verdict]:
    """Every verdict on a record written by the admin client, from a fresh read of the log."""
    log = KafkaLog(fleet.bootstrap, fleet.coordination)
    config = RationalizerConfig(
        int(fleet.hb * 1000), log.num_partitions, admin_client_ids=DEFAULT_ADMINS
    )
    found: list[ev.Verdict] = []

    def keep(e: ev.Event) -> None:
        if isinstance(e, ev.Verdict) and e.client_id == "marshal-admin":
            found.append(e)

    try:
        FoldedLog(log, config).catch_up(30, on_event=keep)
    finally:
        log.close()
    return found


def handled_after(fleet: Fleet, since: float) -> dict[int, set[int]]:
    """Offsets handled per partition by work that started after ``since``."""
    out: dict[int, set[int]] = {p: set() for p in range(fleet.partitions)}
    for row in fleet.ledger():
        if row.start > since:
            out[row.partition].add(row.offset)
    return out


def test_release_group_pauses_a_running_fleet(fleet: Fleet) -> None:
    """A non-admin's pause is refused and changes nothing; the admin's pause makes every holder
    release, nobody claims or handles while it lasts, and claiming resumes after it. The
    group's positions reach Kafka's committed offsets."""
    fleet.produce_steadily(200)
    fleet.start("a")
    fleet.start("b")
    fleet.wait_for(lambda: len(fleet.holders()) == PARTITIONS, 30, "every partition held")

    refused = fleet.admin(
        "release-group", "--group", fleet.group, "--for", "30", "--client-id", "intruder"
    )
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.strip() == (
        "marshal-admin: error: refused: intruder is not an admin client "
        f"(pausing group {fleet.group})"
    )
    time.sleep(2 * HB)
    assert len(fleet.holders()) == PARTITIONS, "a refused pause released claims"

    pause_s = 8
    paused = fleet.admin("release-group", "--group", fleet.group, "--for", str(pause_s))
    paused_at = time.time()
    assert paused.returncode == 0, paused.stderr
    assert f"group {fleet.group} paused until" in paused.stdout
    assert "on all 2 coordination partitions" in paused.stdout
    fleet.wait_for(lambda: not fleet.holders(), pause_s - 2, "every holder to release")
    released_at = time.time()
    while time.time() < paused_at + pause_s - 1.5:
        assert not fleet.holders(), "a partition was claimed while the group was paused"
        time.sleep(0.2)
    assert not any(handled_after(fleet, released_at + 0.2).values()), "handled while paused"
    fleet.wait_for(lambda: len(fleet.holders()) == PARTITIONS, 20, "claims after the pause")
    assert time.time() >= paused_at + pause_s - 1.5

    fleet.stop_producing()
    fleet.wait_for(fleet.handled_everything, 30, "every record handled")
    ends = fleet.end_offsets()
    # the mirror commits at most every HB/2 and asks a coordinator of its own: on a loaded CI
    # machine it once took longer than 10 s, so as long as the other waits here
    fleet.wait_for(
        lambda: fleet.committed() == ends, 30, f"the positions committed to Kafka (ends {ends})"
    )
    stop_all(fleet)
    rows = fleet.ledger()
    assert not find_overlaps(rows)
    expected = {(fleet.topic, p): range(end) for p, end in ends.items()}
    assert not find_gaps(rows, expected)


def test_set_position_moves_a_running_fleet(fleet: Fleet) -> None:
    """A rewind of a busy fleet: partition 0 is handled again from 5. Then, with the fleet
    paused and new records waiting, --dry-run changes nothing, and a forward move of
    partition 1 to 35 skips 20..34 while the other partitions carry on where they were."""
    fleet.produce(PARTITIONS * 20)
    fleet.start("a")
    fleet.start("b")
    fleet.wait_for(fleet.handled_everything, 30, "the first 20 records of each partition")
    fleet.produce_steadily(100)
    time.sleep(1)

    moved_at = time.time()
    common = ["--group", fleet.group, "--topic", fleet.topic]
    rewind = fleet.admin("set-position", *common, "--to-offset", "0=5", "--timeout", "30")
    assert rewind.returncode == 0, rewind.stderr
    assert rewind.stdout.strip().endswith("pause lifted"), rewind.stdout
    assert "paused until" in rewind.stderr
    assert "partition 0: " in rewind.stderr and " -> 5" in rewind.stderr
    fleet.wait_for(
        lambda: set(range(5, 20)) <= handled_after(fleet, moved_at)[0], 30, "0:5..19 again"
    )
    assert min(handled_after(fleet, moved_at)[0]) == 5
    fleet.stop_producing()
    fleet.wait_for(fleet.handled_everything, 30, "every record handled")

    paused = fleet.admin("release-group", "--group", fleet.group, "--for", "60")
    assert paused.returncode == 0, paused.stderr
    fleet.wait_for(lambda: not fleet.holders(), 20, "every holder to release")
    before = fleet.end_offsets()
    fleet.produce(PARTITIONS * 20)
    written = len(admin_verdicts(fleet))
    target = f"1={before[1] + 15}"
    dry = fleet.admin("set-position", *common, "--to-offset", target, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["dry_run"] is True
    assert plan["partitions"] == [
        {
            "partition": 1,
            "slice": None,
            "current": before[1],
            "reserved": None,
            "holder": None,
            "state": "released",
            "target": before[1] + 15,
            "target_is_end": False,  # an offset asked for: set as planned
        }
    ]
    assert len(admin_verdicts(fleet)) == written, "--dry-run wrote to the coordination log"
    assert fleet.positions(Mode.ALO) == before

    moved_at = time.time()
    forward = fleet.admin("set-position", *common, "--to-offset", target)
    assert forward.returncode == 0, forward.stderr
    assert "pause lifted" in forward.stdout
    ends = fleet.end_offsets()
    fleet.wait_for(lambda: fleet.positions(Mode.ALO) == ends, 30, "every partition at its end")
    after = handled_after(fleet, moved_at)
    assert after[1] == set(range(before[1] + 15, ends[1])), "partition 1 did not skip"
    for p in (0, 2, 3):
        assert after[p] == set(range(before[p], ends[p])), f"partition {p} did not carry on"
    # the mirror commits at most every HB/2 and asks a coordinator of its own: on a loaded CI
    # machine it once took longer than 10 s, so as long as the other waits here
    fleet.wait_for(
        lambda: fleet.committed() == ends, 30, f"the positions committed to Kafka (ends {ends})"
    )
    stop_all(fleet)
    assert not find_overlaps(fleet.ledger())


def test_set_position_rewinds_every_slice_of_a_key_ordered_fleet(make_fleet: MakeFleet) -> None:
    """--ordering key cuts each partition into slices, each a claim with its own position:
    a rewind of partition 0 moves all of its slices, so partition 0 is handled again from 5 by
    the slices together (each record by the slice of its key), and partition 1 is untouched."""
    fleet = make_fleet(hb=HB, partitions=2)
    fleet.produce(40, key=lambda i: f"customer-{i % 7}".encode())
    fleet.start("a", "--ordering", "key", "--workers-per-partition", "3")
    fleet.wait_for(fleet.handled_everything, 30, "every record handled once")
    moved_at = time.time()
    common = ["--group", fleet.group, "--topic", fleet.topic]
    dry = fleet.admin("set-position", *common, "--to-offset", "0=5", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    slices = [
        (p["partition"], p["slice"], p["target"]) for p in json.loads(dry.stdout)["partitions"]
    ]
    assert slices == [(0, f"key.{i}of3", 5) for i in range(3)]
    rewind = fleet.admin("set-position", *common, "--to-offset", "0=5", "--timeout", "30")
    assert rewind.returncode == 0, rewind.stderr
    assert "0 key.2of3: 20 -> 5" in rewind.stdout, rewind.stdout
    fleet.wait_for(
        lambda: handled_after(fleet, moved_at)[0] == set(range(5, 20)), 30, "0:5..19 again"
    )
    assert handled_after(fleet, moved_at)[1] == set()
    stop_all(fleet)
    assert not find_overlaps(fleet.ledger())
