"""A partition another member releases is claimed in the turn its release is folded, by a member
with room in its fair share, whatever that member handed over recently and at any HB; a stopping
member says it leaves (releases its member claim) before it releases its partitions."""

from __future__ import annotations

import signal
from dataclasses import replace

import pytest

from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core import observations as obs
from marshal_workers.core.member import Member
from marshal_workers.core.settings import MemberSettings
from marshal_workers.ipc import messages as ipc
from marshal_workers.protocol.members import member_key
from marshal_workers.protocol.rationalizer import RationalizerConfig
from marshal_workers.protocol.wire import (
    ClaimingPartition,
    ClaimKey,
    Heartbeat,
    ReleasingPartition,
)
from tests.unit.core.test_member_core import Harness, fresh_topic, keys, settings, write

OTHER = ("i9", "c9")  # another member's instance and client id


def with_hb(hb: float) -> MemberSettings:
    s = settings()
    return replace(s, rationalizer=RationalizerConfig(int(hb * 1000), num_partitions=2))


def other(kind: type, key: ClaimKey, *offset: int) -> object:
    """A message of the other member about ``key``."""
    return kind(1_000, *OTHER, key.group, key.topic, key.partition, *offset)


def begin(member: Member, n: int = 2) -> Harness:
    """The member holds all ``n`` partitions, each with its child's position known."""
    topic, log_ms = fresh_topic()
    h = Harness(topic, member, log_ms)
    h.read()
    h.run(member.begin(h.now, 1_000.0, keys(n)))
    for key in keys(n):
        h.run(member.feed(inp.StartFound(h.now, key, 0)))
    h.tick(0.01)
    assert set(keys(n)) <= set(member.held)
    return h


def claims_of(h: Harness, key: ClaimKey, since: int) -> int:
    """How many claims of ``key`` the member wrote after its ``since``-th command."""
    return sum(
        1
        for c in h.commands[since:]
        if isinstance(c, cmd.Append)
        and isinstance(c.message, ClaimingPartition)
        and (c.message.topic, c.message.partition) == (key.topic, key.partition)
    )


def hand_over(h: Harness) -> ClaimKey:
    """Another member announces itself; the member releases its excess to it, and the other
    member wins that partition: returned."""
    announce = member_key("g", OTHER[1])
    write(h.topic, other(ClaimingPartition, announce))  # type: ignore[arg-type]
    write(h.topic, other(Heartbeat, announce, 0))  # type: ignore[arg-type]
    h.read()
    h.tick(h.member.s.heartbeat_interval / 5)  # a round: over its share of one, it releases one
    (released,) = [k for k in keys() if h.member.held.get(k) is None or
                   h.member.held[k].phase.name in ("STOPPING", "RELEASING")]  # fmt: skip
    h.run(h.member.feed(inp.ChildExited(h.now, released, 0)))  # its child finished its batch
    h.tick(0.01)  # the release is written and folded
    assert released not in h.member.held
    write(h.topic, other(ClaimingPartition, released))  # type: ignore[arg-type]
    write(h.topic, other(Heartbeat, released, 5))  # type: ignore[arg-type]
    h.read()
    h.tick(0.01)
    return released


@pytest.mark.parametrize("hb", [1.0, 4.0, 10.0])
def test_a_partition_handed_over_and_released_again_is_claimed_in_the_turn_its_release_is_folded(
    hb: float,
) -> None:
    """The member handed a partition over (a release to make room for a newcomer keeps it off
    that partition for 2*HB); the newcomer stops at once: its release is folded and the member,
    back under its fair share, claims the partition in that very turn, not when its cooldown
    ends or at its next planning round (HB/10 at most)."""
    h = begin(Member(with_hb(hb)))
    released = hand_over(h)
    h.tick(0.3 * hb)  # the newcomer works for a while (well within the 2*HB cooldown)
    since = len(h.commands)
    write(h.topic, other(ReleasingPartition, member_key("g", OTHER[1]), 0))  # type: ignore[arg-type]
    write(h.topic, other(ReleasingPartition, released, 9))  # type: ignore[arg-type]
    h.read()
    h.tick(0.001)  # the same turn: records read, then the tick
    assert claims_of(h, released, since) == 1
    assert released in h.member.held


def test_a_release_within_the_fair_share_of_others_is_not_claimed() -> None:
    """While the releasing member is still announced, the member is at its fair share: the
    released partition is left for whoever has room (no member claims past its share)."""
    h = begin(Member(with_hb(4.0)))
    released = hand_over(h)
    h.tick(0.5)
    since = len(h.commands)
    write(h.topic, other(ReleasingPartition, released, 9))  # type: ignore[arg-type]
    h.read()
    h.tick(0.001)
    h.tick(1.0)
    assert claims_of(h, released, since) == 0


def test_its_own_release_still_keeps_it_off_the_partition() -> None:
    """The cooldown after the member's own over-share release stands until someone else has
    had the partition: it does not claim back what it just gave up."""
    h = begin(Member(with_hb(4.0)))
    announce = member_key("g", OTHER[1])
    write(h.topic, other(ClaimingPartition, announce))  # type: ignore[arg-type]
    write(h.topic, other(Heartbeat, announce, 0))  # type: ignore[arg-type]
    h.read()
    h.tick(0.8)
    since = len(h.commands)
    (released,) = [k for k in keys() if h.member.held[k].phase.name == "STOPPING"]
    h.run(h.member.feed(inp.ChildExited(h.now, released, 0)))
    h.tick(0.01)
    assert released not in h.member.held
    # the newcomer leaves before it claims anything: the member is under its share again
    write(h.topic, other(ReleasingPartition, announce, 0))  # type: ignore[arg-type]
    h.read()
    h.tick(0.001)
    h.tick(1.0)
    assert claims_of(h, released, since) == 0


def test_a_stopping_member_releases_its_member_claim_before_its_partitions() -> None:
    """TERM: the member claim's release is written at once, while the children still finish
    their batches, so the others count one member less before its partitions come free."""
    h = begin(Member(with_hb(4.0)))
    assert all(h.member.held[k].child for k in keys())
    since = len(h.commands)
    h.run(h.member.feed(inp.SignalReceived(h.now, signal.SIGTERM)))
    h.tick(0.01)
    releases = [c.message for c in h.commands[since:] if isinstance(c, cmd.Append)
                and isinstance(c.message, ReleasingPartition)]  # fmt: skip
    assert [(m.topic, m.partition) for m in releases] == [("__member.c1", 0)]



def test_a_rebalance_tells_the_child_revoke_and_a_stop_tells_it_stop() -> None:
    """The child's teardown gets the reason: an over-share release takes the claim away
    (``revoke``); TERM stops the member (``stop``)."""
    h = begin(Member(with_hb(4.0)))
    announce = member_key("g", OTHER[1])
    write(h.topic, other(ClaimingPartition, announce))  # type: ignore[arg-type]
    write(h.topic, other(Heartbeat, announce, 0))  # type: ignore[arg-type]
    h.read()
    since = len(h.commands)
    h.tick(0.8)
    told = [c.message for c in h.commands[since:] if isinstance(c, cmd.TellChild)]
    assert told == [ipc.Stop("revoke")]
    since = len(h.commands)
    h.run(h.member.feed(inp.SignalReceived(h.now, signal.SIGTERM)))
    told = [c.message for c in h.commands[since:] if isinstance(c, cmd.TellChild)]
    assert set(told) == {ipc.Stop("stop")}


def test_a_claim_won_from_a_stale_holder_is_a_failover_and_the_group_view_is_told() -> None:
    """Another member's claim goes stale (it was killed): the member wins it, and tells its
    observers that was a failover; it tells them too how many of the group's claims nobody
    holds."""
    topic, log_ms = fresh_topic()
    member = Member(with_hb(1.0))
    h = Harness(topic, member, log_ms)
    stale = keys()[1]
    write(h.topic, other(ClaimingPartition, stale))  # type: ignore[arg-type]
    write(h.topic, other(Heartbeat, stale, 0))  # type: ignore[arg-type]
    h.read()
    h.run(member.begin(h.now, 1_000.0, keys()))
    views = [c.what for c in h.commands if isinstance(c, cmd.Observe)
             and isinstance(c.what, obs.GroupView)]  # fmt: skip
    assert views[0] == obs.GroupView(2, 1, 1)  # the stale-to-be claim is still held then
    h.tick(2.5)  # past 2*HB of silence: stale
    failovers = [c.what for c in h.commands if isinstance(c, cmd.Observe)
                 and isinstance(c.what, obs.Failover)]  # fmt: skip
    assert failovers == [obs.Failover(stale, OTHER[1])]


def test_a_rival_claiming_what_the_member_released_is_no_loss() -> None:
    """The member's release and a rival's claim right after it are folded before the release's
    acknowledgement comes: the claim was given up, not lost (no claim_lost line, no ClaimLost
    for the metrics), and the release is confirmed when its acknowledgement comes."""
    h = begin(Member(with_hb(4.0)), n=1)
    key = keys(1)[0]
    h.run(h.member.feed(inp.SignalReceived(h.now, signal.SIGTERM)))
    exited = h.member.feed(inp.ChildExited(h.now, key, 0))
    (release,) = [c for c in exited if isinstance(c, cmd.Append)
                  and isinstance(c.message, ReleasingPartition)]  # fmt: skip
    done = h.topic.append(release.partition, release.key, release.value)  # landed, not acked
    write(h.topic, other(ClaimingPartition, key))  # type: ignore[arg-type]
    since = len(h.commands)
    h.read()
    lost = [c for c in h.commands[since:] if isinstance(c, cmd.Log) and c.event == "claim_lost"]
    assert lost == []
    assert not any(isinstance(c, cmd.Observe) and isinstance(c.what, obs.ClaimLost)
                   for c in h.commands[since:])  # fmt: skip
    h.run(h.member.feed(inp.AppendDone(h.now, release.op, done)))
    released = [c for c in h.commands if isinstance(c, cmd.Log) and c.event == "claim_released"
                and dict(c.fields).get("partition") == key.partition]  # fmt: skip
    assert released and dict(released[-1].fields)["confirmed"] is True
