"""A hostile writer on a running fleet's coordination topic: malformed records (a 4.3 KB integer
field in every record type), pauses past 9999 in the admin's name, extreme records of invented
groups and a flood of their claims. Every member keeps running and handling, a member started
after them catches up over them, and status, dump and group-settings answer."""

from __future__ import annotations

import json
import random
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from marshal_workers.sim.forgery import hostile_records
from tests.integration.fleet import DEFAULT_ADMINS, MARSHAL_AUDIT, Fleet, MakeFleet

HB = 1.0
FLOOD = 5_000


@pytest.fixture
def fleet(make_fleet: MakeFleet) -> Fleet:
    return make_fleet(hb=HB, partitions=6, coordination_partitions=3)


def write_hostile(fleet: Fleet, seed: int) -> None:
    """Append the hostile writer's records (`sim.forgery`) to the fleet's coordination topic,
    aimed at its group and data topic."""
    rng = random.Random(seed)
    (admin,) = DEFAULT_ADMINS
    records = hostile_records(rng, [(fleet.group, fleet.topic)], admin, 3, FLOOD)
    producer = Producer({"bootstrap.servers": fleet.bootstrap, "message.max.bytes": 2_000_000})
    for partition, key, value in records:
        where = rng.randrange(3) if partition is None else partition
        producer.produce(fleet.coordination, value=value, key=key, partition=where)
        producer.poll(0)
    assert producer.flush(30) == 0


def handled(fleet: Fleet) -> int:
    return len(fleet.ledger())


@pytest.mark.kafka
def test_hostile_records_leave_every_member_running_and_every_reader_answering(
    fleet: Fleet,
) -> None:
    """After the hostile writer's records, both members still run and handle what is produced,
    a third member catches up over them and takes its share, and status (text and JSON), dump
    and group-settings answer, exit 0."""
    a, b = fleet.start("a"), fleet.start("b")
    fleet.produce_steadily(200)
    fleet.wait_split([3, 3])
    write_hostile(fleet, seed=1)
    before = handled(fleet)
    fleet.wait_for(lambda: handled(fleet) > before + 400, 60, "handling after the records")
    time.sleep(3 * HB)  # every member has folded them (it polls the log all the time)
    for member in (a, b):
        assert member.proc.poll() is None, member.log_tail()
    assert fleet.holders(), "claims held"
    c = fleet.start("c")
    fleet.wait_split([2, 2, 2])
    write_hostile(fleet, seed=2)  # again, while c runs too
    before = handled(fleet)
    fleet.wait_for(lambda: handled(fleet) > before + 400, 60, "handling after more records")
    for member in (a, b, c):
        assert member.proc.poll() is None, member.log_tail()
        assert "Traceback" not in member.log_path.read_text()

    status = fleet.admin("status", "--group", fleet.group)
    assert status.returncode == 0, status.stderr
    assert f"group {fleet.group}" in status.stdout
    assert "malformed records in the log:" in status.stdout
    as_json = fleet.admin("status", "--group", fleet.group, "--json")
    assert as_json.returncode == 0, as_json.stderr
    view = json.loads(as_json.stdout)
    assert view["paused_until"] is None  # no pause past 9999 took
    # (the cleaner may keep only the newest of the malformed records that share a key)
    assert view["malformed"] >= 10 and len(view["claims"]) == 6
    dump = fleet.admin("dump", "--json")
    assert dump.returncode == 0, dump.stderr[-2000:]
    lines = [json.loads(line) for line in dump.stdout.splitlines()]
    assert len(lines) >= FLOOD
    assert sum(1 for e in lines if e["verdict"] == "Malformed") >= 10
    settings = fleet.admin("group-settings", "--group", fleet.group, heartbeat=False)
    assert settings.returncode == 0, settings.stderr
    assert "heartbeat_interval=1s" in settings.stdout


@pytest.mark.spark
def test_the_audit_reads_a_dump_of_hostile_records(tmp_path: Path) -> None:
    """`marshal-audit --input` (Spark) on a dump of the hostile writer's records, the 4.3 KB
    integer fields among them: it runs to its summary (it used to fail on the first) and
    counts them malformed."""
    rng = random.Random(3)
    landings = hostile_records(rng, [("g", "orders")], "marshal-admin", 1, 200)
    dump = tmp_path / "dump.jsonl"
    with dump.open("w") as out:
        for offset, (_, key, value) in enumerate(landings):
            out.write(json.dumps({
                "partition": 0, "offset": offset, "log_time_ms": 1_700_000_000_000 + offset,
                "key": None if key is None else key.decode(errors="backslashreplace"),
                "message": None if value is None else value.decode(errors="backslashreplace"),
            }) + "\n")  # fmt: skip
    argv = [str(MARSHAL_AUDIT), "--input", str(dump), "--out", str(tmp_path / "audit"), "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode in (0, 1), done.stderr[-2000:]  # 3 would be: the audit failed
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["records"] == len(landings)
    assert summary["malformed"] >= 10
