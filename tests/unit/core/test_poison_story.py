"""A poison record, one story: a member that parks a record keeps the claim (it runs no child
for it) even when the failure that parks it is also its own ``max_handler_failures``-th in a
row; before it, a member that reaches ``max_handler_failures`` releases the partition."""

from __future__ import annotations

from dataclasses import replace

from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core import observations as obs
from marshal_workers.core.member import Member
from marshal_workers.ipc import messages as ipc
from marshal_workers.ipc.exits import EXIT_HANDLER_FAILED
from marshal_workers.protocol.wire import ClaimKey, ReleasingPartition
from tests.unit.core.test_member_core import Harness, fresh_topic, settings

KEY = ClaimKey("g", "orders", 0)


def failing(park_after: int, max_failures: int) -> tuple[Harness, Member]:
    """A member holding KEY, its child started at offset 100."""
    topic, log_ms = fresh_topic(partitions=1)
    s = replace(settings(partitions=1), max_handler_failures=max_failures,
                poison_park_after=park_after, restart_backoff=0.01)  # fmt: skip
    member = Member(s)
    h = Harness(topic, member, log_ms)
    h.read()
    h.run(member.begin(h.now, 1_000.0, [KEY]))
    h.run(member.feed(inp.StartFound(h.now, KEY, 100)))
    h.tick(0.05)
    return h, member


def fail_once(h: Harness, member: Member) -> None:
    """The child fails on offset 120 and exits; the member's timers run on a little."""
    h.run(member.feed(inp.ChildSaid(h.now, KEY, ipc.HandlerFailed(120, "ValueError: bad", ""))))
    h.run(member.feed(inp.ChildExited(h.now, KEY, EXIT_HANDLER_FAILED)))
    for _ in range(5):
        h.tick(0.2)


def spawns(h: Harness) -> int:
    return sum(1 for c in h.commands if isinstance(c, cmd.Spawn))


def test_the_failure_that_parks_the_record_keeps_the_claim() -> None:
    """poison_park_after = max_handler_failures = 2: the second failure parks the record and
    is the member's second in a row; the member keeps the claim, heartbeats it and starts no
    child (the docs: the holder keeps the claim)."""
    h, member = failing(park_after=2, max_failures=2)
    fail_once(h, member)
    fail_once(h, member)
    started = spawns(h)
    for _ in range(10):
        h.tick(0.2)
    assert h.appended(ReleasingPartition) == []
    assert KEY in member.held
    assert spawns(h) == started  # parked: no child
    told = [c.what for c in h.commands if isinstance(c, cmd.Observe)
            and isinstance(c.what, obs.RecordFailures)]  # fmt: skip
    assert told[-1] == obs.RecordFailures(KEY, 120, 2, True)  # the metrics' parked record


def test_below_the_park_a_streak_of_failures_releases_the_partition() -> None:
    """poison_park_after 10, max_handler_failures 2: the member's second failure in a row
    releases the partition (another member may try it; this one keeps away)."""
    h, member = failing(park_after=10, max_failures=2)
    fail_once(h, member)
    fail_once(h, member)
    assert [(m.topic, m.partition) for m in h.appended(ReleasingPartition)] == [("orders", 0)]
    assert KEY not in member.held
