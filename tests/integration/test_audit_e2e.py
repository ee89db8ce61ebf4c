"""End to end: a real fleet with the ledger handler, then `marshal-audit` over its real topic.

Two supervisors share a data topic while records are produced, then stop gracefully. The
audit reads the coordination topic with Spark's Kafka source and the fleet's ledger
directory: zero violations and the claims the fleet made. Two forged ledger lines (a write
under a claim that was no longer valid, and one by an instance of the holder's client that
never held the claim) must then fail the audit and be named.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from marshal_workers.audit import jars
from marshal_workers.audit.schema import TABLES, columns
from marshal_workers.common.errors import MarshalError
from marshal_workers.common.ledgerfile import LedgerRow
from marshal_workers.protocol.modes import Mode
from tests.integration.fleet import Fleet, MakeFleet, with_suppressed

pytestmark = [pytest.mark.kafka, pytest.mark.spark]
HB = 1.0


@pytest.fixture(scope="module", autouse=True)
def kafka_connector() -> None:
    """Resolve the Spark Kafka connector once (Maven, cached outside the repo) up front."""
    try:
        jars.resolve()
    except MarshalError as exc:
        pytest.fail(f"could not resolve the Spark Kafka connector: {exc}", pytrace=False)


@pytest.fixture
def fleet(make_fleet: MakeFleet) -> Fleet:
    return make_fleet(mode="alo", hb=HB)


def run_fleet(fleet: Fleet) -> None:
    """a takes all 8 partitions under load, hands 4 over to b, both catch up and stop."""
    fleet.produce_steadily(200)
    fleet.start("a")
    fleet.wait_for(lambda: fleet.counts() == {"a": 8}, 60, "a holding all 8")
    fleet.start("b")
    fleet.wait_for(lambda: sorted(fleet.counts().values()) == [4, 4], 60, "a 4/4 split")
    time.sleep(2)
    fleet.stop_producing()
    fleet.wait_for(fleet.handled_everything, 60, "every record handled")
    for member in fleet.members:
        member.signal(signal.SIGTERM)
    for member in fleet.members:
        assert member.wait(30) == 0, member.log_tail()


@pytest.mark.timeout(900)
def test_real_fleet_audits_clean_then_a_forged_write_fails_it(fleet: Fleet, tmp_path: Path) -> None:
    """Clean fleet: exit 0, tables and report written, the hand-overs seen; forged: exit 1."""
    run_fleet(fleet)
    rows = fleet.ledger()
    out = tmp_path / "audit"
    code, summary, err = fleet.audit(out)
    assert code == 0, err
    assert summary["violations"] == 0, summary["violation_examples"]
    assert summary["partitions_claimed"] == fleet.partitions
    assert summary["clients"] == ["a", "b"]
    assert set(summary["claims_ended"]) == {"released"}, summary["claims_ended"]
    assert summary["handovers"] >= 4 and summary["failovers"] == 0
    assert summary["ledger"]["checked"] == len(rows) and summary["ledger"]["unverifiable"] == 0
    assert [g["group"] for g in summary["groups"]] == [fleet.group]
    assert summary["groups"][0]["mode"] == "alo"
    for name in TABLES:
        assert tuple(pq.read_table(out / name).column_names) == columns(name), name
    claims = pq.read_table(out / "claims").to_pylist()
    assert {c["partition"] for c in claims} == set(range(fleet.partitions))
    # The handlers name the claim's group and the instance the log knows (the clean audit
    # above already checked every row against its own instance's intervals).
    assert {r.group for r in rows} == {fleet.group}
    assert {r.instance_id for r in rows} <= {c["instance_id"] for c in claims}
    lag = pq.read_table(out / "lag").to_pylist()
    assert lag and all(r["high_watermark"] is not None for r in lag)
    assert (out / "report.html").stat().st_size > 10_000

    # A forged write: a's process writes under its first token after that claim was released,
    # and after every row of that partition: a row of another process at the same moment is
    # an overlap too (a CI run saw 4 beside the zombie work, the next owner at work then).
    first = min((r for r in rows if r.client_id == "a"), key=lambda r: r.start)
    released = max(c["end_ms"] for c in claims if c["token"] == first.token) / 1000
    last = max(r.end for r in rows if (r.topic, r.partition) == (first.topic, first.partition))
    at = max(released, last) + 1.0
    forged = first._replace(offset=first.offset + 1_000_000, start=at, end=at + 0.01)
    with (fleet.ledger_dir / f"ledger-{first.pid}.jsonl").open("a") as f:
        f.write(forged.line() + "\n")
    # Another forged write: under b's token, inside b's claim, but by an instance of b that
    # never held it (a restarted b's old process, say).
    theirs = max((r for r in rows if r.client_id == "b"), key=lambda r: r.start)
    impostor = theirs._replace(offset=theirs.offset + 2_000_000, instance_id="impostor")
    with (fleet.ledger_dir / f"ledger-{theirs.pid}.jsonl").open("a") as f:
        f.write(impostor.line() + "\n")
    ledger_topic = f"ledger_{fleet.coordination}"
    _produce_lines(fleet.bootstrap, ledger_topic, rows)  # the clean rows again, from a topic
    code, summary, err = fleet.audit(tmp_path / "audit2", "--ledger-topic", ledger_topic)
    assert code == 1, err
    assert summary["violations_by_kind"] == {"zombie_work": 2}
    assert summary["ledger"]["rows"] == 2 * len(rows) + 2
    assert summary["ledger"]["alo_redeliveries"] == len(rows)
    for bad in (forged, impostor):
        named = f"{bad.topic}[{bad.partition}]@{bad.offset} by {bad.client_id} pid"
        assert f"{named} {bad.pid}" in err
    assert "never by instance impostor" in err


def _produce_lines(bootstrap: str, topic: str, rows: list[LedgerRow]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, -1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for r in rows:
        producer.produce(topic, r.line().encode())
        producer.poll(0)
    assert producer.flush(30) == 0


@pytest.mark.timeout(900)
def test_a_clean_amo_fleet_loses_nothing(make_fleet: MakeFleet, tmp_path: Path) -> None:
    """On a real fleet: AMO members hand partitions over and stop gracefully; every
    reserved range is handled and committed, so the audit shows 0 AMO losses."""
    fleet = make_fleet(mode="amo", hb=HB)
    run_fleet(fleet)
    out = tmp_path / "audit"
    code, summary, err = fleet.audit(out)
    assert code == 0, err
    assert summary["groups"][0]["mode"] == "amo" and summary["reservations"] > 0
    assert summary["handovers"] >= 4
    assert summary["amo_losses"] == {"ranges": 0, "records": 0, "by_cause": {}}, pq.read_table(
        out / "amo_losses"
    ).to_pylist()
    assert "No AMO losses" in (out / "report.html").read_text()


@pytest.mark.timeout(900)
def test_a_killed_amo_holder_s_unhandled_records_are_all_reported_lost(
    make_fleet: MakeFleet, tmp_path: Path
) -> None:
    """An AMO member is killed (SIGKILL, children too) while it handles slow
    batches; another takes over. Every record nobody handled lies in a reported loss, caused
    by the takeover, and every reported unhandled record is absent from the ledger."""
    fleet = make_fleet(mode="amo", hb=HB, partitions=2,
                  ledger_delay_ms=20)  # fmt: skip
    fleet.produce_steadily(100)
    victim = fleet.start("a")
    fleet.wait_for(lambda: len(fleet.ledger()) >= 40, 60, "a handling records")
    for pid in victim.children():
        with_suppressed(lambda p=pid: os.killpg(p, signal.SIGKILL))
    with_suppressed(lambda: os.killpg(victim.pid, signal.SIGKILL))
    victim.wait(10)
    fleet.start("b")
    fleet.wait_for(lambda: fleet.counts() == {"b": 2}, 60, "b taking both partitions over")
    time.sleep(2)
    fleet.stop_producing()
    ends = fleet.end_offsets()
    fleet.wait_for(
        lambda: all(fleet.positions(Mode.AMO).get(p) == end for p, end in ends.items()),
        60, "b reaching the end",
    )  # fmt: skip
    fleet.members[-1].signal(signal.SIGTERM)
    assert fleet.members[-1].wait(30) == 0, fleet.members[-1].log_tail()

    out = tmp_path / "audit"
    code, summary, err = fleet.audit(out)
    assert code == 0, err
    losses = pq.read_table(out / "amo_losses").to_pylist()
    handled = {(r.partition, r.offset) for r in fleet.ledger()}
    never = {(p, o) for p, end in ends.items() for o in range(end)} - handled
    in_losses = {(r["partition"], o) for r in losses
                 for o in range(r["start_offset"], r["end_offset"])}  # fmt: skip
    assert never <= in_losses, (sorted(never - in_losses), losses)
    assert {r["cause"] for r in losses} <= {"taken_over"}
    assert all(r["successor_client_id"] == "b" and r["client_id"] == "a" for r in losses)
    assert summary["amo_losses"]["records"] == len(never)
