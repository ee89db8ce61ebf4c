"""A member defect found by the sliced-fleet sweep (marshal-sim, sliced fleets, every fault),
written as the test that failed until the member was fixed (`Keeping.release_waits`, found
independently by the compaction sweep): a failure's count in flight when the claim is released
was lost."""

from __future__ import annotations

from dataclasses import replace

from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core.member import Member
from marshal_workers.ipc import messages as ipc
from marshal_workers.ipc.exits import EXIT_HANDLER_FAILED
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.recordfailures import PoisonNoted, RecordFailed
from marshal_workers.protocol.wire import ClaimKey
from tests.unit.core.test_member_core import Harness, fresh_topic, settings


def test_a_failure_count_written_as_the_claim_is_released_is_counted() -> None:
    """Found by marshal-sim (the sliced-fleet sweep, seed 9 of ``--ordering unordered
    --workers-per-partition 4`` with every fault; not slicing-specific): the handler failure
    that reaches ``max_handler_failures`` writes its RecordFailed and releases the claim at
    once; if that append fails, the release lands first and the retried RecordFailed is refused
    (not the holder): the failure is never counted, and the record is tried once more than
    ``poison_park_after``."""
    topic, log_ms = fresh_topic(partitions=1)
    member = Member(replace(settings(partitions=1), max_handler_failures=1))
    h = Harness(topic, member, log_ms)
    h.read()
    h.run(member.begin(h.now, 1_000.0, [KEY]))
    h.run(member.feed(inp.StartFound(h.now, KEY, 100)))
    h.tick(0.05)
    said = member.feed(inp.ChildSaid(h.now, KEY, ipc.HandlerFailed(120, "ValueError: bad", "")))
    exited = member.feed(inp.ChildExited(h.now, KEY, EXIT_HANDLER_FAILED))
    (count,) = [c for c in said + exited if isinstance(c, cmd.Append) and _is(c, RecordFailed)]
    retried = member.feed(inp.AppendFailed(h.now, count.op, "simulated append failure"))
    # the broker's order: whatever else was sent lands first, then the retried count
    pending = [c for c in said + exited + retried if isinstance(c, cmd.Append) and c is not count]
    pending.sort(key=lambda c: _is(c, RecordFailed))
    for c in pending:
        done = topic.append(c.partition, c.key, c.value)
        h.run(member.feed(inp.AppendDone(h.now, c.op, done)))
    world = World(RationalizerConfig(1000, num_partitions=1), 0)
    noted = [e for r in topic.read(0, 0) if isinstance(e := fold(world, r), PoisonNoted)]
    assert [(e.key, e.message.offset) for e in noted] == [(KEY, 120)]


KEY = ClaimKey("g", "orders", 0)


def _is(c: cmd.Append, kind: type) -> bool:
    return isinstance(c.message, kind)
