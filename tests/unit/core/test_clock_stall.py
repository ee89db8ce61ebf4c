"""A member whose lease clock stood still while the log's time ran on (a VM paused without its
guest's clocks seeing it, or a suspend on a clock that does not count one) stops its children
and writes nothing that carries a claim's position on a lease judged on that clock.

The scripts hold the member's ``now`` while the broker's log time moves 3*HB: a rival wins the
claim, which is stale at the log's time. Before the member's core compared the log's time (and
the wall clock) with its lease clock, it judged its lease still running and wrote a heartbeat
with its position after the rival's winning claim: the record decision 19 says a member never
writes.
"""

from __future__ import annotations

import signal

from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core.member import Member
from marshal_workers.ipc import messages as ipc
from marshal_workers.protocol.members import member_key
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.wire import (
    ClaimingMessages,
    ClaimingPartition,
    ClaimKey,
    Heartbeat,
    ReleasingPartition,
    coordination_partition,
    encode,
    record_key,
)
from tests.unit.core.test_member_core import Harness, fresh_topic, keys, settings, start

HB = 1.0
WALL = 1_000.0  # the harness's wall clock at now = 0


def _holding(mode: Mode, n: int = 1) -> tuple[Harness, ClaimKey]:
    """A member holding ``n`` claims, their children running, heartbeating for a while; the
    last claim is the one the tests watch."""
    topic, log_ms = fresh_topic(partitions=2)
    h = start(Member(settings(partitions=2, mode=mode)), topic, log_ms, n=n)
    for key in keys(n):
        h.run(h.member.feed(inp.StartFound(h.now, key, 100)))
    for _ in range(6):
        h.tick(HB / 4)
    key = keys(n)[-1]
    assert h.member.held[key].child
    return h, key


def _home(key: ClaimKey) -> int:
    return coordination_partition(key.topic, key.partition, 2)


def _stall_and_rival_claims(h: Harness, key: ClaimKey) -> int:
    """The broker's time moves 3*HB more than the member's clock, which moves HB/2 (its next
    heartbeat is due); a rival claims the claim (stale at the log's time: it wins). Returns
    the rival's claim's offset."""
    h.now += HB / 2
    h.log_ms[0] += int((3 * HB + HB / 2) * 1000)
    rival = ClaimingPartition(0, "i9", "c9", key.group, key.topic, key.partition)
    done = h.topic.append(_home(key), record_key(rival), encode(rival))
    return done.offset


def _unread(h: Harness, event: inp.Input) -> list[cmd.Command]:
    """Feed ``event`` and carry out its appends (acknowledged), reading nothing: a turn of the
    runtime whose reader has not fetched the rival's claim yet."""
    out = h.member.feed(event)
    h.commands.extend(out)
    for c in out:
        if isinstance(c, cmd.Append):
            done = h.topic.append(c.partition, c.key, c.value)
            _unread(h, inp.AppendDone(h.now, c.op, done))
    return out


def _position_writes_after(h: Harness, since: int, key: ClaimKey) -> list[str]:
    """The heartbeats, releases and reservations of ``key`` the member wrote from command
    ``since`` on, until it claims the claim again (a claim won again is heartbeated)."""
    out = []
    for c in h.commands[since:]:
        if not isinstance(c, cmd.Append):
            continue
        m = c.message
        if (m.group_id, m.topic, m.partition) != (key.group, key.topic, key.partition):
            continue
        if isinstance(m, ClaimingPartition):
            break
        if isinstance(m, Heartbeat | ReleasingPartition | ClaimingMessages):
            out.append(type(m).__name__)
    return out


def _killed(h: Harness, since: int, key: ClaimKey) -> bool:
    revoked = any(
        isinstance(c, cmd.SetLease) and c.key == key and c.deadline == 0.0
        for c in h.commands[since:]
    )
    killed = any(
        isinstance(c, cmd.SignalChild) and c.key == key and c.signal is signal.SIGKILL
        for c in h.commands[since:]
    )
    return revoked and killed


def _ends_and_settles(h: Harness, key: ClaimKey, since: int) -> None:
    """The child's exit comes, the member reads the rival's claim, time goes on: nothing
    carrying the claim's position is written, ever."""
    _unread(h, inp.ChildExited(h.now, key, -signal.SIGKILL, None, 150))
    h.read()
    for _ in range(8):
        h.tick(HB / 2)
    assert _position_writes_after(h, since, key) == []


def test_the_wall_clock_jumping_past_the_lease_clock_stops_the_children_first() -> None:
    """A suspend the lease clock did not count: the wall clock moved 3*HB, the lease clock
    did not. The next tick kills the child and writes no heartbeat."""
    h, key = _holding(Mode.ALO)
    _stall_and_rival_claims(h, key)
    since = len(h.commands)
    # the tick comes before the member has read the rival's claim (a turn of the runtime)
    _unread(h, inp.Tick(h.now, WALL + h.now + 3 * HB))
    assert _position_writes_after(h, since, key) == []
    assert _killed(h, since, key)
    _ends_and_settles(h, key, since)


def test_the_logs_time_running_past_the_lease_clock_stops_the_children_first() -> None:
    """A VM pause the guest's clocks did not see at all (its wall clock held too): the log's
    time, read on the coordination partition of the member's announcement (its heartbeats
    there say when the broker's clock read what), moved 3*HB more than the lease clock. The
    child of a claim on another coordination partition, whose rival's claim the member has not
    read yet, is killed before anything more is written."""
    h, key = _holding(Mode.ALO, n=3)  # orders/2 is coordinated on partition 1, the rest on 0
    other = _home(member_key("g", "c1"))
    assert _home(key) != other
    _stall_and_rival_claims(h, key)
    h.log_ms[0] += 10
    note = Heartbeat(0, "i8", "c8", "other", "orders", 7, 1)  # another group's record there
    h.topic.append(other, record_key(note), encode(note))
    since = len(h.commands)
    records = h.topic.read(other, h.cursor[other])
    h.cursor[other] = records[-1].offset + 1
    _unread(h, inp.RecordsRead(h.now, records))
    _unread(h, inp.Tick(h.now, WALL + h.now))
    assert _position_writes_after(h, since, key) == []
    assert _killed(h, since, key)
    _ends_and_settles(h, key, since)


def test_an_amo_request_after_the_stall_is_refused_unwritten() -> None:
    """AMO: the child's request that crossed the stall is refused, nothing reserved."""
    h, key = _holding(Mode.AMO)
    _stall_and_rival_claims(h, key)
    since = len(h.commands)
    _unread(h, inp.Tick(h.now, WALL + h.now + 3 * HB))
    said = _unread(h, inp.ChildSaid(h.now, key, ipc.GrantRequest(1, 100, 150)))
    assert [c.message for c in said if isinstance(c, cmd.TellChild)] == [
        ipc.Grant(1, False, "claim not held")
    ]
    assert _position_writes_after(h, since, key) == []
    assert _killed(h, since, key)
    _ends_and_settles(h, key, since)


def test_a_small_drift_of_the_wall_clock_changes_nothing() -> None:
    """The wall clock moving a little faster than the lease clock (NTP slewing, a tick's
    jitter) is not a stall: below half the lease margin nothing happens."""
    h, key = _holding(Mode.ALO)
    since = len(h.commands)
    h.now += HB / 2
    h.log_ms[0] += int(HB / 2 * 1000)
    h.run(h.member.feed(inp.Tick(h.now, WALL + h.now + 0.02)))
    assert not _killed(h, since, key)
    assert _position_writes_after(h, since, key) == ["Heartbeat"]


def test_a_heartbeat_sent_before_the_stall_extends_no_lease() -> None:
    """A heartbeat written before the stall and accepted after it proves nothing: its send time
    is on the clock that stood still. The revoked lease is never set again."""
    h, key = _holding(Mode.ALO)
    h.now += HB / 2
    h.log_ms[0] += int(HB / 2 * 1000)
    sent = h.member.feed(inp.Tick(h.now, WALL + h.now))  # the heartbeat goes out ...
    beats = [c for c in sent if isinstance(c, cmd.Append) and isinstance(c.message, Heartbeat)]
    assert beats
    h.log_ms[0] += int(HB / 2 * 1000)  # ... and lands after a stall of HB/2 (accepted)
    since = len(h.commands)
    _unread(h, inp.Tick(h.now + 0.01, WALL + h.now + 0.01 + HB / 2))
    for c in beats:
        done = h.topic.append(c.partition, c.key, c.value)
        _unread(h, inp.AppendDone(h.now + 0.02, c.op, done))
    h.now += 0.02
    h.read()  # its verdict: accepted (the claim was not stale when it landed)
    assert not [c for c in h.commands[since:] if isinstance(c, cmd.Log)
                and c.event == "claim_lost" and c.fields["topic"] == key.topic]  # fmt: skip
    leases = [c.deadline for c in h.commands[since:] if isinstance(c, cmd.SetLease)
              and c.key == key]  # fmt: skip
    assert leases and all(d == 0.0 for d in leases)
    assert _killed(h, since, key)


def test_after_a_stall_the_member_claims_only_once_it_has_read_the_log_to_its_end() -> None:
    """The member asks where the log ends, and claims nothing until its fold is there."""
    h, key = _holding(Mode.ALO)
    _stall_and_rival_claims(h, key)
    since = len(h.commands)
    _unread(h, inp.Tick(h.now, WALL + h.now + 3 * HB))
    asked = [c for c in h.commands[since:] if isinstance(c, cmd.FindLogEnd)]
    assert len(asked) == 1
    _unread(h, inp.ChildExited(h.now, key, -signal.SIGKILL, None, 150))
    for _ in range(6):  # no answer yet: the member asks again, and claims nothing
        h.now += HB / 4
        _unread(h, inp.Tick(h.now, WALL + h.now + 3 * HB))
    assert len([c for c in h.commands[since:] if isinstance(c, cmd.FindLogEnd)]) >= 2
    assert not [c for c in h.commands[since:] if isinstance(c, cmd.Append)
                and isinstance(c.message, ClaimingPartition)]  # fmt: skip
    ends = {p: h.topic.end_offset(p) for p in range(2)}
    _unread(h, inp.LogEndFound(h.now, ends))
    h.tick(HB / 4)  # reads the log to those ends: claims again (the rival's claim goes stale)
    for _ in range(12):
        h.tick(HB / 4)
    assert [c for c in h.commands[since:] if isinstance(c, cmd.Append)
            and isinstance(c.message, ClaimingPartition)]  # fmt: skip
    assert _position_writes_after(h, since, key) == []
