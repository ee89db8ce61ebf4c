"""End to end: error policies in a fleet of real `marshal-run` processes on a real broker.

The ledger handler fails on one offset of every partition (MARSHAL_LEDGER_FAIL_AT_OFFSET).
With ``--on-failure dlq`` those records land in the dead-letter topic and everything else is
handled exactly once; with ``stop`` the supervisor gives the partitions up after
``--max-handler-failures``.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from marshal_workers.child.deadletters import PREFIX
from marshal_workers.common.ledgerfile import find_duplicates, find_overlaps
from marshal_workers.protocol.modes import Mode
from tests.integration.childrun import read_topic
from tests.integration.fleet import Fleet, MakeFleet

pytestmark = pytest.mark.kafka
PARTITIONS = 2
PER_PARTITION = 20
POISON = 7


@pytest.fixture(params=["alo", "amo"])
def fleet(make_fleet: MakeFleet, request: pytest.FixtureRequest) -> Fleet:
    """A two-partition fleet (the mode from the parameter) with a dead-letter topic."""
    f = make_fleet(mode=request.param, hb=1.0, partitions=PARTITIONS)
    admin = AdminClient({"bootstrap.servers": f.bootstrap})
    admin.create_topics([NewTopic(f"{f.topic}.dlq", 1, 1)])[f"{f.topic}.dlq"].result(30)
    return f


def member_id() -> str:
    """A client id no other test on this host uses (client ids are locked per host)."""
    return f"pol-{uuid.uuid4().hex[:8]}"


def handled(fleet: Fleet) -> set[tuple[int, int]]:
    return {(r.partition, r.offset) for r in fleet.ledger()}


def stop_all(fleet: Fleet) -> None:
    for member in fleet.members:
        member.signal(signal.SIGTERM)
    for member in fleet.members:
        assert member.wait(20) == 0, member.log_tail()


class TestDeadLetters:
    def test_poison_records_go_to_the_dlq_and_the_rest_is_handled_exactly_once(
        self, fleet: Fleet
    ) -> None:
        """One poison record per partition: each is dead-lettered once with its headers, every
        other record is handled exactly once, and the committed positions reach the end."""
        fleet.produce(PARTITIONS * PER_PARTITION)
        fleet.start(
            member_id(),
            "--handler",
            "ledger",  # the entry point (as the fleet does by default)
            "--on-failure",
            "dlq",
            "--retries",
            "1",
            "--retry-backoff",
            "0.05",
            env={"MARSHAL_LEDGER_FAIL_AT_OFFSET": str(POISON)},
        )
        expected = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION) if o != POISON}
        fleet.wait_for(lambda: handled(fleet) >= expected, 60, "every good record handled")
        ends = fleet.end_offsets()
        fleet.wait_for(
            lambda: fleet.positions(Mode(fleet.mode)) == ends, 20, "positions at the end"
        )
        stop_all(fleet)
        rows = fleet.ledger()
        assert handled(fleet) == expected
        assert not find_duplicates(rows), "a record was handled twice"
        assert not find_overlaps(rows)
        letters = read_topic(fleet.bootstrap, f"{fleet.topic}.dlq", PARTITIONS)
        headers = [
            {k.removeprefix(PREFIX): (v or b"").decode() for k, v in m.headers() or []}
            for m in letters
        ]
        assert sorted((int(h["source.partition"]), int(h["source.offset"])) for h in headers) == [
            (p, POISON) for p in range(PARTITIONS)
        ]
        client = fleet.members[0].client_id
        for h in headers:
            assert h["source.topic"] == fleet.topic
            assert (h["group"], h["client_id"], h["attempts"]) == (fleet.group, client, "2")
            assert h["error.type"] == "marshal_workers.plugins.ledger.SimulatedError"
            assert "SimulatedError" in h["error.traceback"]
            # the token of the holder's claim, as its handler saw it on the partition's other
            # records (a set: a claim lost and won again meanwhile has a new token)
            tokens = {
                r.token
                for r in rows
                if r.partition == int(h["source.partition"]) and r.client_id == client
            }
            assert int(h["fencing_token"]) in tokens


def log_entries(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of a running supervisor's log, read whole: the last line may be half
    written (a poll read one mid-write, and its JSON did not parse)."""
    text = path.read_text(errors="replace")
    lines = text.splitlines()
    if not text.endswith("\n"):
        lines = lines[:-1]
    return [json.loads(x) for x in lines if x.startswith("{")]


class TestStopPolicy:
    @pytest.mark.parametrize("fleet", ["alo"], indirect=True)
    def test_repeated_failures_release_the_partition_and_stop_its_child(self, fleet: Fleet) -> None:
        """on_failure stop: the child is restarted on the poison record, then after
        --max-handler-failures the partition is released and no child runs for it."""
        fleet.produce(PARTITIONS * PER_PARTITION)
        a = fleet.start(
            member_id(),
            "--on-failure",
            "stop",
            "--retries",
            "0",
            "--max-handler-failures",
            "2",
            env={"MARSHAL_LEDGER_FAIL_AT_OFFSET": str(POISON)},
        )
        fleet.wait_for(lambda: len(a.children()) == PARTITIONS, 30, "a's children")

        def released() -> bool:
            entries = log_entries(a.log_path)
            return (
                sum(
                    e.get("event") == "claim_releasing" and "handler failed" in e.get("reason", "")
                    for e in entries
                )
                == PARTITIONS
            )

        fleet.wait_for(released, 40, "both partitions released")
        fleet.wait_for(lambda: not fleet.holders(), 10, "no partition held")
        assert a.children() == []
        time.sleep(0.5)
        lines = log_entries(a.log_path)
        failed = [x for x in lines if x.get("event") == "handler_failed"]
        assert {x["offset"] for x in failed} == {POISON}
        assert max(x["failures"] for x in failed) == 2
        stop_all(fleet)
        assert handled(fleet) == {(p, o) for p in range(PARTITIONS) for o in range(POISON)}, (
            "nothing past the poison record was handled"
        )
