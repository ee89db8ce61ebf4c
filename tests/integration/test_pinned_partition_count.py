"""The coordination topic's partition count is pinned at init.

A member started on a topic whose count differs from the recorded one is refused (exit 4,
which the systemd unit does not restart on), one that has no record is refused with a line
saying to run `marshal-admin init`, and init records the count once on such a topic.
"""

from __future__ import annotations

import subprocess
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from marshal_workers.common.errors import EXIT_COORDINATION_CHANGED, EXIT_USAGE
from marshal_workers.log.partitioncount import read_topic_record
from marshal_workers.log.topicadmin import coordination_topic_config
from tests.integration.fleet import Fleet, MakeFleet
from tests.integration.test_fleet_ops import grow

pytestmark = pytest.mark.kafka
HB = 1.0


@pytest.fixture
def fleet(make_fleet: MakeFleet) -> Fleet:
    return make_fleet(hb=HB, partitions=4)


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("marshal-run: error:")]


def test_init_records_the_partition_count(fleet: Fleet) -> None:
    """The topic `marshal-admin init` (ensure_coordination_topic) created carries its count."""
    record = read_topic_record(fleet.bootstrap, fleet.coordination, 20.0)
    assert record is not None and record.partitions == 2


def test_a_fresh_member_is_refused_after_a_partition_was_added(fleet: Fleet) -> None:
    """A partition added to the coordination topic: a freshly started marshal-run refuses to
    run (it used to run happily, adopting the new count), with one line and exit 4."""
    grow(fleet.bootstrap, fleet.coordination, 3)
    a = fleet.start("a")
    try:
        code = a.wait(60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"marshal-run ran on a grown coordination topic:\n{a.log_tail()}")
    assert code == EXIT_COORDINATION_CHANGED, a.log_tail()
    (line,) = error_lines(a.log_path.read_text())
    assert "has 3 partitions but 2 were recorded at init" in line
    assert fleet.counts() == {}


def test_a_topic_without_a_record_is_refused_until_init_records_it(fleet: Fleet) -> None:
    """No recorded count: refused (exit 2, run init); `marshal-admin init` records it once,
    then the member runs."""
    bare = f"__marshal_bare_{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": fleet.bootstrap})
    topic = NewTopic(bare, 2, 1, config=coordination_topic_config(1))
    admin.create_topics([topic])[bare].result(30)
    fleet.coordination = bare
    a = fleet.start("a")
    assert a.wait(60) == EXIT_USAGE, a.log_tail()
    (line,) = error_lines(a.log_path.read_text())
    assert "no recorded partition count: run `marshal-admin init`" in line
    init = fleet.admin("init")
    assert init.returncode == 0, init.stderr
    assert "partition count pinned at 2 (recorded now)" in init.stdout
    assert "recorded partition count is none" in init.stderr
    again = fleet.admin("init")
    assert "partition count pinned at 2 (as recorded at init)" in again.stdout
    b = fleet.start("b")
    fleet.wait_for(
        lambda: (
            f'"topic": "{fleet.topic}"' in b.log_path.read_text()
            and "claim_won" in b.log_path.read_text()
        ),
        60,
        "the member claiming data partitions once init recorded the count",
    )
    assert b.proc.poll() is None
