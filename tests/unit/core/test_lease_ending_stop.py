"""A member defect found by marshal-sim's ``liveness`` (seed 180173 of ``failures,read-latency``
at a fail rate of 0.3), written as the test that failed until the member was fixed: a claim's
heartbeats were slow to land, the member sent its child SIGTERM as the lease was ending, the
late heartbeat then landed and the lease ran again, and the child's exit by that signal was
counted as a crash. Three such stops released the partition for a minute (`keep_away_s`), and
with the other members at their share it stayed idle for 15.8 s. A child the member stopped
because its lease was ending did not fail: it is started again while the lease runs."""

from __future__ import annotations

import signal
from dataclasses import replace

from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core.member import Member
from marshal_workers.ipc import messages as ipc
from marshal_workers.protocol.wire import ClaimKey
from tests.unit.core.test_member_core import Harness, fresh_topic, keys, settings, start


def _stop_as_the_lease_ends(h: Harness, member: Member) -> list[cmd.Command]:
    """Tick with no write acknowledged until the member TERMs the child; the writes held."""
    (key,) = keys(1)
    held: list[cmd.Command] = []
    for _ in range(200):
        h.now += 0.05
        h.log_ms[0] += 50
        out = member.feed(inp.Tick(h.now, 1_000.0 + h.now))
        held.extend(c for c in out if isinstance(c, cmd.Append))
        h.commands.extend(c for c in out if not isinstance(c, cmd.Append))
        if any(isinstance(c, cmd.SignalChild) and c.signal is signal.SIGTERM for c in out):
            return held
        assert member.held[key].child
    raise AssertionError("no SIGTERM as the lease ended")


def _holding() -> tuple[Harness, Member, ClaimKey]:
    """A lone member holding one claim from 100 with its child running (3 failures release)."""
    topic, log_ms = fresh_topic(partitions=1)
    member = Member(replace(settings(partitions=1), max_handler_failures=3))
    h = start(member, topic, log_ms, n=1)
    (key,) = keys(1)
    h.run(member.feed(inp.StartFound(h.now, key, 100)))
    h.tick(0.05)
    return h, member, key


def test_a_child_stopped_as_its_lease_ended_is_no_failure_when_the_lease_runs_again() -> None:
    """Three times: the heartbeats land only after the member TERMed the child for its lease;
    the child's exit by that signal counts no failure, and a child runs again under the lease
    the late heartbeat proved; the claim is never released."""
    h, member, key = _holding()
    assert member.held[key].child
    for _ in range(3):
        held = _stop_as_the_lease_ends(h, member)
        h.run(held)  # the late heartbeats land: the lease runs again
        assert member.held[key].lease - h.now > member.s.kill_grace
        h.commands = []
        h.run(member.feed(inp.ChildExited(h.now, key, -signal.SIGTERM)))
        h.tick(0.05)
        assert key in member.held, "released after a stop the member made"
        assert member.held[key].failures == 0
        assert member.held[key].child, "no child under the lease that runs again"
        assert any(isinstance(c, cmd.Spawn) for c in h.commands)


def test_a_child_stopped_for_its_lease_with_a_failure_count_in_flight_waits_for_it() -> None:
    """A review: the child reported a handler failure (its count is being written) and the
    lease-ending TERM ended it before it exited with the failure's code; the lease runs again.
    The next child waits for the count's verdict (`RecordParking.allows`), as after any
    restart, instead of starting at once on the same record."""
    h, member, key = _holding()
    h.run(_stop_as_the_lease_ends(h, member))  # the late heartbeats land
    failed = member.feed(inp.ChildSaid(h.now, key, ipc.HandlerFailed(120, "ValueError", "")))
    (count,) = [c for c in failed if isinstance(c, cmd.Append)]
    out = member.feed(inp.ChildExited(h.now, key, -signal.SIGTERM))
    assert not any(isinstance(c, cmd.Spawn) for c in out), "started with its count in flight"
    h.run([c for c in out if not isinstance(c, cmd.Spawn)])
    h.run([count])  # the count lands: the next child may start
    h.commands = []
    h.tick(0.05)
    assert any(isinstance(c, cmd.Spawn) for c in h.commands)


def test_every_signal_to_a_child_is_logged_with_its_reason() -> None:
    """A review of a CPU-bound fleet: after a SIGSTOP of the supervisor, its children were
    TERMed and KILLed for their leases with no supervisor line saying why (only the children's
    own exits). Each signal is a warning naming the claim, the signal and the reason."""
    h, member, key = _holding()
    out = member.feed(inp.Tick(h.now, 1_000.0 + h.now))
    h.now += member.held[key].lease - h.now  # the lease ends: TERM and KILL are due at once
    out = member.feed(inp.Tick(h.now, 1_000.0 + h.now))
    signals = [c for c in out if isinstance(c, cmd.SignalChild)]
    logged = [c for c in out if isinstance(c, cmd.Log) and c.event == "child_signalled"]
    assert [s.signal for s in signals] == [signal.SIGTERM, signal.SIGKILL]
    assert [(c.level, c.fields["signal"], c.fields["reason"]) for c in logged] == [
        ("warning", "SIGTERM", "lease ending"),
        ("warning", "SIGKILL", "lease ending"),
    ]
    assert all(c.fields["partition"] == key.partition for c in logged)
