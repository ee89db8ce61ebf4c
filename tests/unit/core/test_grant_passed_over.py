"""A member defect found by marshal-sim's ``release_claimed`` (seed 3882007 of
``twins,freeze,stall,restart,forged-takeover`` with 6 faults, 4 members in 1 group), written as
the test that failed until the member was fixed (`Claiming.grant_passed`): a stalled member's
claim landed, lapsed, and was claimed and released by two others before the member ran again.
Its turn folded all of that, then learnt from the acknowledgement that the first grant was its
own: it held a claim the log had long passed, whose lease was over, released it and stayed off
the partition for a heartbeat interval, so the free partition waited."""

from __future__ import annotations

from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core.member import Member
from marshal_workers.protocol.wire import ClaimingPartition, Heartbeat, ReleasingPartition
from tests.unit.core.test_member_core import Harness, fresh_topic, keys, settings, start, write


def stalled_claim() -> tuple[Harness, Member, cmd.Append]:
    """A lone member's data claim, in the log but not acknowledged yet (the member stalls)."""
    topic, log_ms = fresh_topic(partitions=1)
    member = Member(settings(partitions=1))
    h = Harness(topic, member, log_ms)
    h.read()
    commands = member.begin(h.now, 1_000.0, keys(1))
    (claim,) = [c for c in commands if isinstance(c, cmd.Append) and c.message.topic == "orders"]
    assert isinstance(claim.message, ClaimingPartition)
    h.run([c for c in commands if c is not claim])  # the member claim lands
    return h, member, claim


def acknowledged_after_a_rival(
    h: Harness, member: Member, claim: cmd.Append, released: bool
) -> None:
    """The stalled claim lands; 3 s later (its lease over) a rival claims the partition and
    works (and releases it). The member's next turn folds the grant, the rival's tenure (and
    its release), then is told its claim landed."""
    landed = h.topic.append(claim.partition, claim.key, claim.value)
    h.log_ms[0] += 3_000
    rival = ("i2", "c2", "g", "orders", 0)
    write(h.topic, ClaimingPartition(h.log_ms[0], *rival))
    write(h.topic, Heartbeat(h.log_ms[0], *rival, 5))
    if released:
        write(h.topic, ReleasingPartition(h.log_ms[0], *rival, 7))
    h.now += 3.0
    h.commands = []
    h.read()
    h.run(member.feed(inp.AppendDone(h.now, claim.op, landed)))


def test_a_grant_the_log_passed_before_its_acknowledgement_is_not_held() -> None:
    """The stalled member's claim lands; 3 s later (its lease over) a rival claims, works and
    releases the partition. The member's next turn folds all of it, then is told its claim
    landed: it does not hold the passed grant, and claims the free partition again at once."""
    h, member, claim = stalled_claim()
    (key,) = keys(1)
    acknowledged_after_a_rival(h, member, claim, released=True)
    h.tick()
    releases = h.appended(ReleasingPartition)
    assert not releases, "the member held a grant the log had passed, and released it"
    again = [m for m in h.appended(ClaimingPartition) if m.topic == "orders"]
    assert again, "the released partition waited for the passed grant's release"
    assert key in member.held
    state = member.ctx.state_of(key)
    assert state is not None and state.holder_client == "c1"
    assert member.held[key].token == state.token, "held the passed grant's token"


def test_a_grant_the_log_passed_to_a_live_rival_backs_off_as_a_refusal() -> None:
    """The same, but the rival holds the partition still: the member neither holds nor
    releases it, and does not claim it while the rival's claim is live."""
    h, member, claim = stalled_claim()
    (key,) = keys(1)
    acknowledged_after_a_rival(h, member, claim, released=False)
    h.tick(0.1)
    assert key not in member.held
    assert not h.appended(ReleasingPartition)
    assert not [m for m in h.appended(ClaimingPartition) if m.topic == "orders"]


def test_a_current_grant_on_a_fold_a_gap_made_uncertain_is_held() -> None:
    """A review: the member's grant is folded, then a gap (records compacted before it read
    them) makes the claim uncertain, and the fold names as holder whoever writes next: here a
    lapsed holder's late heartbeat, which the whole log refuses. The acknowledgement then
    comes. The grant is still the log's newest (its token stands): the member holds it, and
    does not leave the partition idle until its own claim goes stale (2*HB and more)."""
    topic, log_ms = fresh_topic(partitions=1)
    zombie = ("i2", "c2", "g", "orders", 0)
    log_ms[0] = 7_000
    write(topic, ClaimingPartition(log_ms[0], *zombie))
    write(topic, Heartbeat(log_ms[0], *zombie, 5))
    log_ms[0] = 10_000  # the zombie froze: its claim lapsed
    write(topic, Heartbeat(log_ms[0], "i9", "c9", "g", "orders", 7, 1))  # (log time moves on)
    member = Member(settings(partitions=1))
    h = Harness(topic, member, log_ms)
    h.read()
    commands = member.begin(h.now, 1_000.0, keys(1))
    (claim,) = [c for c in commands if isinstance(c, cmd.Append) and c.message.topic == "orders"]
    h.run([c for c in commands if c is not claim])
    (key,) = keys(1)
    h.log_ms[0] += 50
    h.now += 0.05
    landed = topic.append(claim.partition, claim.key, claim.value)  # granted; acknowledged late
    h.read()
    state = member.ctx.state_of(key)
    assert state is not None and state.holder_client == "c1"
    write(topic, Heartbeat(h.log_ms[0], "i3", "c3", "g", "orders", 0, 5))
    h.cursor[claim.partition] += 1  # compacted before this reader got to it: a gap
    h.log_ms[0] += 50
    h.now += 0.05
    write(topic, Heartbeat(h.log_ms[0], *zombie, 5))  # refused by the whole log
    h.read()
    state = member.ctx.state_of(key)
    assert state is not None and not state.certain and state.holder_client == "c2"
    h.run(member.feed(inp.AppendDone(h.now, claim.op, landed)))
    assert key in member.held, "a current grant refused on a holder an uncertain fold guessed"
    assert key not in member.ctx.avoid_until


def test_a_takeover_the_log_passed_before_its_acknowledgement_is_not_held() -> None:
    """The same for a restart's takeover of its client's claim: the new instance stalls while
    its takeover lands; its lease ends, and a rival claims, works and releases the partition.
    Told then that the takeover was accepted, it does not hold the passed takeover (whose
    lease is over) but claims the free partition again at once."""
    topic, log_ms = fresh_topic(partitions=1)
    (key,) = keys(1)
    old = start(Member(settings(partitions=1)), topic, log_ms, n=1)
    old.run(old.member.feed(inp.StartFound(old.now, key, 7)))
    old.tick(0.1)  # the old instance heartbeats position 7, then dies
    log_ms[0] += 300
    member = Member(settings(instance="i2", partitions=1))
    h = Harness(topic, member, log_ms)
    h.read()
    commands = member.begin(h.now, 1_000.0, [key])
    (takeover,) = [c for c in commands if isinstance(c, cmd.Append) and c.message.topic == "orders"]
    assert isinstance(takeover.message, Heartbeat)
    h.run([c for c in commands if c is not takeover])
    landed = topic.append(takeover.partition, takeover.key, takeover.value)
    h.log_ms[0] += 3_000
    rival = ("i3", "c2", "g", "orders", 0)
    write(topic, ClaimingPartition(h.log_ms[0], *rival))
    write(topic, Heartbeat(h.log_ms[0], *rival, 9))
    write(topic, ReleasingPartition(h.log_ms[0], *rival, 11))
    h.now += 3.0
    h.commands = []
    h.read()
    h.run(member.feed(inp.AppendDone(h.now, takeover.op, landed)))
    h.tick()
    assert not h.appended(ReleasingPartition), "held a passed takeover, and released it"
    again = [m for m in h.appended(ClaimingPartition) if m.topic == "orders"]
    assert again, "the released partition waited for the passed takeover's release"
    assert key in member.held
