"""A member defect found by marshal-sim's ``release_claimed`` (seed 967010 of ``--ordering
unordered --workers-per-partition 4`` with every fault, ``--fault-count 6``), written as the
test that failed until the member was fixed (`Claiming.gave_up`): a claim whose write failed,
told in the turn whose fold showed the rival's release, backed off after the release had
lifted every wait, and the free partition waited for that back-off."""

from __future__ import annotations

from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core.member import Member
from marshal_workers.protocol.wire import ClaimingPartition, Heartbeat, ReleasingPartition
from tests.unit.core.test_member_core import Harness, fresh_topic, keys, settings, write


def test_a_claim_that_failed_after_the_rivals_release_is_sent_again_in_that_turn() -> None:
    """The member claims a partition its fold shows free; a rival's claim, heartbeat and
    release land before the member's claim, which fails unwritten; the turn folds the release
    first, then learns of the failure: it claims the free partition again in that turn."""
    topic, log_ms = fresh_topic(partitions=1)
    member = Member(settings(partitions=1))
    h = Harness(topic, member, log_ms)
    h.read()
    (key,) = keys(1)
    commands = member.begin(h.now, 1_000.0, [key])
    (claim,) = [c for c in commands if isinstance(c, cmd.Append) and c.message.topic == "orders"]
    assert isinstance(claim.message, ClaimingPartition)
    h.run([c for c in commands if c is not claim])  # the member claim lands
    rival = ("i2", "c2", "g", "orders", 0)
    write(topic, ClaimingPartition(1_000, *rival))
    write(topic, Heartbeat(1_000, *rival, 5))
    write(topic, ReleasingPartition(1_000, *rival, 7))
    h.now += 0.05
    h.read()  # the turn folds the release ...
    h.run(member.feed(inp.AppendFailed(h.now, claim.op, "simulated append failure")))  # ... then
    h.commands = []
    h.tick()  # its tick
    again = [m for m in h.appended(ClaimingPartition) if m.topic == "orders"]
    assert again, "the released partition waited for the failed claim's back-off"
    assert key in member.held


def test_claims_on_a_released_partition_that_fail_at_once_back_off() -> None:
    """A review: a claim on a partition the fold shows released whose write fails at once
    (the producer's queue full) was written again at every tick: 201 claims in 10 s. After one
    claim again at once, the next failure backs off as any failed claim does."""
    topic, log_ms = fresh_topic(partitions=1)
    write(topic, ClaimingPartition(1000, "i9", "c2", "g", "orders", 0))
    write(topic, ReleasingPartition(1001, "i9", "c2", "g", "orders", 0, 50))
    member = Member(settings(partitions=1))
    h = Harness(topic, member, log_ms)
    h.read()
    claims = 0

    def run(out: list[cmd.Command]) -> None:
        nonlocal claims
        for c in out:
            if isinstance(c, cmd.Append) and c.message.topic == "orders":
                claims += 1
                run(member.feed(inp.AppendFailed(h.now, c.op, "producer queue is full")))
            elif isinstance(c, cmd.Append):
                done = topic.append(c.partition, c.key, c.value)
                run(member.feed(inp.AppendDone(h.now, c.op, done)))
        h.read()

    run(member.begin(h.now, 1_000.0, keys(1)))
    for _ in range(200):  # 10 s of 50 ms turns, HB = 1 s
        h.now += 0.05
        log_ms[0] += 50
        run(member.feed(inp.Tick(h.now, 1_000.0 + h.now)))
    assert claims <= 60, claims  # (a back-off of 0.1-0.5 s after every second failure)
