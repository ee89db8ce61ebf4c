"""A claim that starts where a lookup says (the log has no position for it: auto_offset_reset's
watermark) starts its child only once a heartbeat carrying that position is in the log.

Found by a review (marshal-sim seeds 45013; 55017 unordered/4; 60009 key/6): an AMO member
adopted the looked-up position 100 and started its child at once; its heartbeat and its
release at 100 both failed, so the log still had no position, and the next holder looked
``latest`` up again and started at 141: 100-140 were never handled. In ALO the same sequence
after some handling skips records. So a later lookup must never jump past what an earlier
tenure was granted or handled: the first position is made durable before a child handles.
"""

from __future__ import annotations

from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core.member import Member
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.wire import Heartbeat
from tests.unit.core.test_member_core import Harness, fresh_topic, keys, settings, start

HB = 1.0


def _spawns(h: Harness, since: int = 0) -> list[cmd.Spawn]:
    return [c for c in h.commands[since:] if isinstance(c, cmd.Spawn)]


def _won_with_a_lookup(mode: Mode) -> Harness:
    topic, log_ms = fresh_topic(partitions=1)
    h = start(Member(settings(partitions=1, mode=mode)), topic, log_ms, n=1)
    assert [c.key for c in h.commands if isinstance(c, cmd.LookupStart)] == keys(1)
    return h


def _tick_failing_heartbeats(h: Harness) -> list[int]:
    """A tick whose heartbeats' writes fail (the record does not land)."""
    h.now += 0.05
    h.log_ms[0] += 50
    out = h.member.feed(inp.Tick(h.now, 1_000.0 + h.now))
    h.commands.extend(out)
    failed = []
    for c in out:
        if isinstance(c, cmd.Append) and isinstance(c.message, Heartbeat):
            failed.append(c.message.offset)
            h.commands.extend(h.member.feed(inp.AppendFailed(h.now, c.op, "broker down")))
        elif isinstance(c, cmd.Append):
            h.run([c])
    return failed


def test_the_child_waits_for_the_heartbeat_that_makes_its_start_durable() -> None:
    """The looked-up start goes to the log first; the child starts once the log has it."""
    for mode in (Mode.AMO, Mode.ALO):
        h = _won_with_a_lookup(mode)
        key = keys(1)[0]
        h.run(h.member.feed(inp.StartFound(h.now, key, 100)))
        assert _tick_failing_heartbeats(h) == [100]  # the heartbeat with the start fails ...
        for _ in range(3):
            _tick_failing_heartbeats(h)
        assert _spawns(h) == [], mode  # ... so no child, however long
        h.tick(HB / 2)  # the next heartbeat lands: the start is in the log
        assert [(c.spec.start_offset, c.key) for c in _spawns(h)] == [(100, key)], mode


def test_the_next_holder_starts_where_the_first_looked_up() -> None:
    """Once durable, the start is what every later holder resumes from, not a new lookup."""
    h = _won_with_a_lookup(Mode.AMO)
    key = keys(1)[0]
    h.run(h.member.feed(inp.StartFound(h.now, key, 100)))
    h.tick(0.05)
    assert [c.spec.start_offset for c in _spawns(h)] == [100]
    state = h.member.ctx.state_of(key)
    assert state is not None and state.committed == 100
