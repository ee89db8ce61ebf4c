"""A member whose own lease on a claim has run out writes no record that carries the claim's
position (found by marshal-sim: seeds 29 and 63 of ``--faults freeze,eager-compaction
--fault-count 10`` granted AMO records twice).

Past its lease a member cannot know whether a rival has won the claim: the rival may have
won it 2*HB after its last valid heartbeat, and its fold may not show it yet (a frozen
member's consumer is behind, or its fold went uncertain over a gap the cleaner left). A
heartbeat or release it writes then is refused by the log, but it goes under the key of the
claim's position records, after the rival's: once the cleaner has removed the rival's
heartbeats and reservations, it is the key's newest record, and a reader of the compacted
log takes its (older) position for the claim's. In seed 29 c5, frozen 11.0-14.0 s, woke
with its lease gone and released tg1/0 at 307 while c3 had won it at 13.0 s and reserved to
366; the cleaner then kept that release alone, and c1, whose fold had crossed the gap, won
tg1/0 at 309 and was granted 309.. again.
"""

from __future__ import annotations

from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core.member import Member
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.wire import (
    ClaimingPartition,
    ClaimKey,
    Heartbeat,
    ReleasingPartition,
)
from tests.unit.core.test_member_core import Harness, fresh_topic, keys, settings, start

HB = 1.0


def _holding(mode: Mode) -> tuple[Harness, ClaimKey]:
    topic, log_ms = fresh_topic(partitions=1)
    h = start(Member(settings(partitions=1, mode=mode)), topic, log_ms, n=1)
    key = keys(1)[0]
    h.run(h.member.feed(inp.StartFound(h.now, key, 100)))
    h.tick(0.05)
    assert h.member.held[key].child
    return h, key


def _position_writes(h: Harness, since: int, key: ClaimKey) -> list[str]:
    """The heartbeats and releases of ``key`` written from ``since`` until the member claims
    it again (a claim won again is heartbeated as any other)."""
    written = []
    for c in h.commands[since:]:
        if not isinstance(c, cmd.Append) or ClaimKey(*_key_of(c)) != key:
            continue
        if isinstance(c.message, ClaimingPartition):
            break
        if isinstance(c.message, Heartbeat | ReleasingPartition):
            written.append(type(c.message).__name__)
    return written


def _key_of(c: cmd.Append) -> tuple[str, str, int]:
    m = c.message
    return (m.group_id, m.topic, m.partition)  # type: ignore[union-attr]


def _freeze_past_the_lease(h: Harness, key: ClaimKey) -> None:
    """SIGSTOP: no tick, no read; the log's clock runs on. The member wakes after its lease."""
    lease = h.member.held[key].lease
    gap = lease - h.now + 0.5
    h.now += gap
    h.log_ms[0] += int(gap * 1000)


def test_a_member_woken_past_its_lease_writes_no_release_for_the_claim() -> None:
    """AMO: the child's watchdog ended it at the lease; the member wakes and sees it gone."""
    for mode in (Mode.AMO, Mode.ALO):
        h, key = _holding(mode)
        _freeze_past_the_lease(h, key)
        since = len(h.commands)
        h.run(h.member.feed(inp.ChildExited(h.now, key, -9, None, 130)))
        assert key not in h.member.held  # forgotten, to be claimed again once it is stale
        for _ in range(5):
            h.tick(HB / 2)
        assert _position_writes(h, since, key) == [], mode


def test_a_member_woken_past_its_lease_writes_no_heartbeat_before_it_sees_the_child_gone() -> None:
    """The timer may come before the child's exit is seen (the real runtime reaps children on
    its own turn): no heartbeat, and no release once the exit comes."""
    h, key = _holding(Mode.AMO)
    _freeze_past_the_lease(h, key)
    since = len(h.commands)
    h.tick(0.0)
    h.run(h.member.feed(inp.ChildExited(h.now, key, -9, None, 130)))
    for _ in range(5):
        h.tick(HB / 2)
    assert _position_writes(h, since, key) == []


def test_a_claim_with_no_child_whose_lease_ran_out_is_dropped_without_a_release() -> None:
    """A claim whose child failed and waits for its restart when the member freezes past the
    lease: on waking, no heartbeat, no release; the claim is forgotten and goes to whoever
    claims it once it is stale."""
    h, key = _holding(Mode.AMO)
    h.run(h.member.feed(inp.ChildExited(h.now, key, 1, None, 100)))  # restarts after a back-off
    assert key in h.member.held and not h.member.held[key].child
    _freeze_past_the_lease(h, key)
    since = len(h.commands)
    h.tick(0.0)
    assert key not in h.member.held
    for _ in range(5):
        h.tick(HB / 2)
    assert _position_writes(h, since, key) == []
