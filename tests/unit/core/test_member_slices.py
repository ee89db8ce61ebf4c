"""The member's core with a sliced ordering: its claims are the slices of its topics'
partitions, and it treats them as its own as it treats whole partitions."""

from __future__ import annotations

from marshal_workers.core import inputs as inp
from marshal_workers.core.claiming import start_settle
from marshal_workers.core.member import Member
from marshal_workers.log.memlog import MemoryTopic
from marshal_workers.protocol.slicing import Ordering, Slicing
from marshal_workers.protocol.wire import ClaimKey
from tests.unit.core.test_member_core import Harness, fresh_topic, settings

CUT = Slicing(Ordering.KEY, 3)


def slices(group: str = "g") -> list[ClaimKey]:
    """The claims of one partition of ``orders`` cut in 3 key slices."""
    return [ClaimKey(group, name, 0) for name in CUT.claim_topics("orders")]


def started(member: Member, topic: MemoryTopic, log_ms: list[int]) -> Harness:
    h = Harness(topic, member, log_ms)
    h.read()
    h.run(member.begin(h.now, 1_000.0, slices(member.s.group)))
    h.tick(start_settle(member.s.heartbeat_interval))  # the start's settle: the whole share
    return h


def test_discovery_keeps_the_slices_of_the_members_topics() -> None:
    """Found by marshal-sim (--ordering key): the first discovery (10 s) dropped every slice
    claim, since a slice's topic field ('orders+key.0of3') is not a topic of the member, and
    the whole fleet let its claims go and never claimed again."""
    topic, log_ms = fresh_topic()
    member = Member(settings())
    h = started(member, topic, log_ms)
    assert set(slices()) <= set(member.held)
    h.run(member.feed(inp.PartitionsFound(h.now, slices(), 2)))
    assert member.claiming.partitions == slices()
    h.tick(0.5)
    assert set(slices()) <= set(member.held)


def test_a_restart_resumes_its_clients_fresh_slice_claims() -> None:
    """Restart recovery takes a slice over as it takes a partition over."""
    topic, log_ms = fresh_topic()
    old = Member(settings())
    h = started(old, topic, log_ms)
    for key in slices():
        h.run(old.feed(inp.StartFound(h.now, key, 0)))
    h.tick(0.1)
    log_ms[0] += 300
    new = Member(settings(instance="i2"))
    started(new, topic, log_ms)
    assert set(slices()) <= set(new.held)
    assert all(new.held[key].token > old.held[key].token for key in slices())
