"""Two writes of one claim can be byte for byte the same (a message carries whole wall seconds):
a heartbeat told it failed that landed, and the next heartbeat, of the same position in the same
second, told it failed that never landed. The landed record proves a lease from the first one's
send only; a reviewer found the second taking the first's verdict and its own, later, send
time: a lease longer than the log proves (by HB/2, past the margin). A write matched to a
landed record of the same bytes is credited with the earliest send among them.
"""

from __future__ import annotations

from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core.member import Member
from marshal_workers.core.pending import Kind, Pending
from marshal_workers.protocol.wire import Heartbeat
from tests.unit.core.test_member_core import Harness, fresh_topic, keys, settings, start


def _step(h: Harness, topic_append: object, key: object, dt: float, fail: bool, land: bool
          ) -> float | None:  # fmt: skip
    """One tick; a heartbeat of ``key`` in it is told failed (after landing, with ``land``).
    Returns when that heartbeat was sent."""
    h.now += dt
    h.log_ms[0] += int(dt * 1000)
    out = h.member.feed(inp.Tick(h.now, 1000.0 + h.now))
    h.commands.extend(out)
    sent = None
    for c in out:
        beat = isinstance(c, cmd.Append) and isinstance(c.message, Heartbeat)
        if beat and fail and (c.message.topic, c.message.partition) == (key.topic, key.partition):
            sent = h.now
            if land:
                topic_append(c.partition, c.key, c.value)
            h.commands.extend(h.member.feed(inp.AppendFailed(h.now, c.op, "timed out")))
            h.read()
        elif isinstance(c, cmd.Append):
            h.run([c])
    return sent


def test_a_failed_write_matched_to_an_earlier_identical_record_proves_only_its_send() -> None:
    """h1 (landed, told failed) and h2 (never landed, told failed), the same bytes: the lease
    stays the one h1's send proves."""
    topic, log_ms = fresh_topic(partitions=1)
    h = start(Member(settings(partitions=1)), topic, log_ms, n=1)
    key = keys(1)[0]
    h.run(h.member.feed(inp.StartFound(h.now, key, 100)))
    h.tick(0.05)
    assert any(isinstance(c, cmd.Spawn) for c in h.commands)
    first = None
    while first is None:  # a heartbeat sent early in a wall second, so the next shares it
        early_in_second = (1000 + h.now + 0.01) % 1 < 0.3
        first = _step(h, topic.append, key, 0.01, early_in_second, True)
    proven = h.member.ctx.held[key].lease
    second = None
    while second is None:
        second = _step(h, topic.append, key, 0.01, True, False)
    assert int(1000 + first) == int(1000 + second)  # the same bytes
    assert h.member.ctx.held[key].lease <= proven + 1e-9


def test_an_earlier_write_of_the_same_bytes_still_in_flight_bounds_the_lease_too() -> None:
    """h1 landed and was folded before its acknowledgement came (still in flight); h2, the
    same bytes, is told it failed: the lease stays the one h1's send proves (a second review:
    only writes no longer pending were looked at)."""
    topic, log_ms = fresh_topic(partitions=1)
    h = start(Member(settings(partitions=1)), topic, log_ms, n=1)
    key = keys(1)[0]
    h.run(h.member.feed(inp.StartFound(h.now, key, 100)))
    h.tick(0.05)
    first = second = None
    while second is None:
        h.now += 0.01
        h.log_ms[0] += 10
        out = h.member.feed(inp.Tick(h.now, 1000.0 + h.now))
        for c in out:
            beat = isinstance(c, cmd.Append) and isinstance(c.message, Heartbeat)
            beat = beat and c.message.topic == key.topic  # the data claim's, not the member's
            if beat and first is None and (1000 + h.now) % 1 < 0.3:
                first = h.now
                topic.append(c.partition, c.key, c.value)  # landed, its acknowledgement to come
                h.read()  # folded before the acknowledgement
            elif beat and first is not None:
                second = h.now
                h.commands.extend(h.member.feed(inp.AppendFailed(h.now, c.op, "queue full")))
            elif isinstance(c, cmd.Append):
                h.run([c])
    assert first is not None and int(1000 + first) == int(1000 + second)
    assert h.member.ctx.held[key].lease <= h.member.ctx.lease_from(first) + 1e-9


class TestSentBytesExpire:
    """`Pending` remembers the earliest send of bytes no longer pending for ``older_than``
    after that send (an index by expiry, not a rebuild per tick): what `expired` forgets is
    exactly what was sent before the horizon, an earlier send of the same bytes counts, and
    bytes sent again after they were forgotten are remembered from the new send."""

    @staticmethod
    def _taken(pending: Pending, message: Heartbeat, sent_at: float) -> None:
        op = pending.add(Kind.HEARTBEAT, keys(1)[0], sent_at)
        op.message = message
        pending.take(op.op)

    @staticmethod
    def _sent_at(pending: Pending, message: Heartbeat) -> float | None:
        op = pending.add(Kind.HEARTBEAT, keys(1)[0], 1e9)
        op.message = message
        pending._earliest_of_its_bytes(op)  # credits op with the earliest remembered send
        del pending.ops[op.op]  # (not taken: taking would remember this probe's send)
        return None if op.sent_at == 1e9 else op.sent_at

    def test_forgets_by_the_earliest_send_and_remembers_a_send_after_forgetting(self) -> None:
        a, b = (Heartbeat(1000, "i", "c", "g", "t", p, 5) for p in (0, 1))
        pending = Pending()
        self._taken(pending, a, 10.0)
        self._taken(pending, b, 12.0)
        self._taken(pending, a, 8.0)  # an earlier send of a's bytes, learnt later
        pending.expired(now=17.9, older_than=10.0)  # horizon 7.9: both kept
        assert (self._sent_at(pending, a), self._sent_at(pending, b)) == (8.0, 12.0)
        pending.expired(now=18.5, older_than=10.0)  # horizon 8.5: a (sent at 8) goes
        assert (self._sent_at(pending, a), self._sent_at(pending, b)) == (None, 12.0)
        self._taken(pending, a, 20.0)  # sent again: remembered from 20, not forgotten at 10
        pending.expired(now=25.0, older_than=10.0)  # horizon 15: b goes, a stays
        assert (self._sent_at(pending, a), self._sent_at(pending, b)) == (20.0, None)
        pending.expired(now=30.5, older_than=10.0)
        assert self._sent_at(pending, a) is None
