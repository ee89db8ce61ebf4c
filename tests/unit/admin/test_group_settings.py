"""Settings a fleet must share, on the in-memory log with exact log times.

The rolling-change scenario: an old holder runs with HB = 2 s, a new member starts with
HB = 1 s. Folded with 1 s, the holder's claim looks stale 2.1 s after its heartbeat, while the
holder's lease (2*2 s) still runs: the new member must not claim it. It is refused at start,
with one line naming the setting and both values, and writes nothing.
"""

from __future__ import annotations

import pytest

from marshal_workers.admin.group_settings import change_settings, recorded
from marshal_workers.admin.session import AdminSession
from marshal_workers.common.errors import EXIT_USAGE, ConfigError
from marshal_workers.config.runconfig import RunConfig
from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core.member import Member
from marshal_workers.fleet.groupcheck import ensure_group_settings, own_settings
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.memlog import MemoryLog, MemoryTopic
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import RationalizerConfig
from marshal_workers.protocol.wire import ClaimKey, encode, record_key
from marshal_workers.supervisor.runtime import member_settings
from tests.support import GROUP, claim, hb


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def member(client: str, hb_s: float) -> RunConfig:
    return RunConfig("h:h", Mode.ALO, ("orders",), GROUP, client, heartbeat_interval=hb_s)


def reader_for(topic: MemoryTopic, config: RunConfig) -> tuple[MemoryLog, FoldedLog]:
    log = MemoryLog(topic)
    reader = FoldedLog(
        log,
        RationalizerConfig(
            config.heartbeat_interval_ms, topic.num_partitions, config.partitioner,
            config.admin_client_ids,
        ),
    )  # fmt: skip
    reader.catch_up(1.0)
    return log, reader


def old_holder() -> tuple[MemoryTopic, Clock]:
    """Member a (HB 2 s) records the group's settings, claims partition 0, heartbeats at 0."""
    clock = Clock()
    topic = MemoryTopic(1, clock)
    a = member("a", 2.0)
    log, reader = reader_for(topic, a)
    ensure_group_settings(log, reader.worlds, reader.catch_up, own_settings(a, 0), 1.0)
    for msg in (claim("a"), hb("a", 10)):
        topic.append(0, record_key(msg), encode(msg))
    return topic, clock


def test_a_member_with_another_heartbeat_interval_is_refused_and_writes_nothing() -> None:
    """At 2*HB_new + 100 ms the old claim looks stale to the new member's fold; it is refused
    before it could claim (one line: the setting, its value, the group's)."""
    topic, clock = old_holder()
    clock.now += 2100
    b = member("b", 1.0)
    log, reader = reader_for(topic, b)
    state = reader.worlds[0].claims[ClaimKey(GROUP, "orders", 0)]
    assert clock.now - (state.last_heartbeat or 0) > 2 * b.heartbeat_interval_ms  # the danger
    end = topic.end_offset(0)
    with pytest.raises(ConfigError) as refused:
        ensure_group_settings(log, reader.worlds, reader.catch_up, own_settings(b, 0), 1.0)
    line = str(refused.value)
    assert "\n" not in line
    assert "heartbeat_interval is 1s here but 2s in group g's settings" in line
    assert topic.end_offset(0) == end  # nothing written: no claim, no settings


def test_the_same_settings_are_accepted_and_not_written_again() -> None:
    """A member with the group's settings passes the check; the record is written once."""
    topic, _ = old_holder()
    c = member("c", 2.0)
    log, reader = reader_for(topic, c)
    end = topic.end_offset(0)
    ensure_group_settings(log, reader.worlds, reader.catch_up, own_settings(c, 0), 1.0)
    assert topic.end_offset(0) == end


def test_a_running_member_stops_on_changed_settings() -> None:
    """`marshal-admin group-settings --change` records new settings (after pausing and waiting
    for the old holder); the old member's core folds them, says so, stops gracefully and
    exits 2 (its unit restarts it, and it then runs with the group's settings or is refused)."""
    topic, clock = old_holder()
    a = member("a", 2.0)
    log = MemoryLog(topic)
    core = Member(member_settings(a, topic.num_partitions))
    core.feed(inp.RecordsRead(0.0, log.poll(0)))
    core.begin(0.0, 0.0, [ClaimKey(GROUP, "orders", 0)])
    clock.now += 5000  # a has released or gone stale by then: the change need not wait
    admin_log, admin_reader = reader_for(topic, member("ops", 1.0))
    session = AdminSession(admin_log, admin_reader, "marshal-admin")
    session.catch_up(1.0)
    new = own_settings(member("marshal-admin", 1.0), 0)
    line = change_settings(session, new, timeout_s=5.0, progress=lambda _: None)
    assert "changed from heartbeat_interval=2s" in line
    assert recorded(session, GROUP) == new
    out = core.feed(inp.RecordsRead(1.0, log.poll(0)))
    changed = [c for c in out if isinstance(c, cmd.Log) and c.event == "group_settings_changed"]
    assert changed and "heartbeat_interval is 2s here but 1s" in str(changed[0].fields["reason"])
    assert core.ctx.stopping
    for step in range(1, 120):  # (its writes are never acknowledged here: they expire)
        core.feed(inp.Tick(1.0 + step * 0.1, 0.0))
        if core.done:
            break
    assert core.exit_code == EXIT_USAGE
