"""`marshal-admin status --watch` against real Kafka: refreshed tables with
each partition's lag trend, cleared in place on a terminal, appended elsewhere."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from marshal_workers.admin.connection import Connection
from marshal_workers.admin.status_watch import CLEAR, watch_status
from marshal_workers.clients.rdkafka import RDKAFKA_LOG
from marshal_workers.protocol.wire import (
    ClaimingPartition,
    Heartbeat,
    coordination_partition,
    encode,
    record_key,
)
from tests.integration.fleet import Fleet, MakeFleet

pytestmark = pytest.mark.kafka


@pytest.fixture
def fleet(make_fleet: MakeFleet) -> Fleet:
    f = make_fleet(hb=1.0, partitions=2)
    log = f.reader.log
    for p in range(2):
        home = coordination_partition(f.topic, p, log.num_partitions)
        for msg in (
            ClaimingPartition(1, "i-1", "w1", f.group, f.topic, p),
            Heartbeat(1, "i-1", "w1", f.group, f.topic, p, 0),
        ):
            log.append(home, record_key(msg), encode(msg), 10)
    return f


def _row(block: str, topic: str, partition: int) -> list[str]:
    for line in block.splitlines():
        cells = line.split()
        if cells[:2] == [topic, str(partition)]:
            return cells
    raise AssertionError(f"no row for {topic}[{partition}] in:\n{block}")


def test_watch_appends_refreshes_with_lag_trends(fleet: Fleet) -> None:
    """Off a terminal: each refresh appended (never cleared), the lag trend of a partition
    that grows between refreshes shown as +N, a steady one as '='."""
    producer = Producer({"bootstrap.servers": fleet.bootstrap, "logger": RDKAFKA_LOG})
    clock = [0.0]  # the watch's time: each "sleep" is the interval (HB/2 here)

    def produce_ten(interval: float) -> None:  # the time between two refreshes
        for _ in range(10):
            producer.produce(fleet.topic, b"x", partition=0)
        assert producer.flush(30) == 0
        clock[0] += interval

    out: list[str] = []
    conn = Connection(fleet.bootstrap, fleet.coordination, 1000)
    watch_status(
        conn, fleet.group, interval_s=0.5, count=3, timeout_s=30, as_json=False,
        tty=False, out=out.append, sleep=produce_ten, monotonic=lambda: clock[0],
    )  # fmt: skip
    assert len(out) == 3
    assert not any(CLEAR in block for block in out)
    assert all(block.startswith("every 0.5s\ngroup ") and block.endswith("\n") for block in out)
    assert "LAG TREND" in out[0]
    assert _row(out[0], fleet.topic, 0)[-1] == "-"  # nothing to compare with yet
    for block in out[1:]:
        assert _row(block, fleet.topic, 0)[-2:-1] == ["+10"], block
        assert _row(block, fleet.topic, 1)[-1] == "="


def test_watch_redraws_in_place_on_a_terminal(fleet: Fleet) -> None:
    """On a terminal each refresh clears the screen and draws from the top."""
    out: list[str] = []
    conn = Connection(fleet.bootstrap, fleet.coordination, 1000)
    watch_status(
        conn, fleet.group, interval_s=0.1, count=2, timeout_s=30, as_json=False,
        tty=True, out=out.append, sleep=lambda _s: None,
    )  # fmt: skip
    assert len(out) == 2 and all(block.startswith(CLEAR + "every 0.1s\n") for block in out)


def test_watch_from_the_command_line(fleet: Fleet) -> None:
    """`status --watch 0.2 --count 2` through a pipe: two tables, no terminal codes."""
    done = fleet.admin("status", "--group", fleet.group, "--watch", "0.2", "--count", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(f"group {fleet.group} as of") == 2
    assert "\x1b[" not in done.stdout
