"""An AMO member that starts at a compacted log's estimate reports what the estimate passed over.

A holder instance A was replaced by a new instance B of its client (restart recovery: B took
the claim over at position 120). A's last reservation, written inside its lease, landed after
the takeover: the whole log refuses it (A's child was granted nothing) and the claim's position
stays 120. A reader of the compacted log folds the claim as uncertain and takes the largest
offset it sees, 130: it cannot tell the refused reservation from a valid one without the risk of
granting twice, so it starts there, and 120-129 are handled by nobody. marshal-sim found it in
five seeds (309022, 416058, 503039, 780028, 904176; `tests/sim/test_estimated_position.py`):
nobody reported those records. The member that starts there now reports them
(`amo_records_lost`, cause `estimate`), and only them: the records of the instance its fold saw
replaced are the ones it leaves out.
"""

from __future__ import annotations

from marshal_workers.core import commands as cmd
from marshal_workers.core import observations as obs
from marshal_workers.core.member import Member
from marshal_workers.log.memlog import MemoryTopic
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.wire import (
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    Message,
)
from tests.unit.core.test_member_core import Harness, fresh_topic, keys, settings, write

OTHER = ("c9", "g", "orders", 0)  # client, group, topic, partition of the old holder


def _at(topic: MemoryTopic, log_ms: list[int], when: int, msg: Message) -> None:
    log_ms[0] = when
    write(topic, msg)


def _replaced_history(refused_end: int) -> tuple[MemoryTopic, list[int]]:
    """Instance a of c9 holds orders/0 and reserves to 120; instance b of c9 takes it over at
    120; a's reservation to ``refused_end`` lands after the takeover; b heartbeats once more and
    dies. The cleaner then removes the records older than the takeover but the newest of each
    key, leaving gaps in front of it."""
    topic, log_ms = fresh_topic(partitions=1)
    c, g, t, p = OTHER
    _at(topic, log_ms, 10_000, ClaimingPartition(0, "a", c, g, t, p))
    _at(topic, log_ms, 10_000, Heartbeat(0, "a", c, g, t, p, 100))
    _at(topic, log_ms, 10_100, ClaimingMessages(0, "a", c, g, t, p, 110))
    _at(topic, log_ms, 10_200, ClaimingMessages(0, "a", c, g, t, p, 120))
    _at(topic, log_ms, 10_300, Heartbeat(0, "a", c, g, t, p, 120))
    _at(topic, log_ms, 11_000, Heartbeat(0, "b", c, g, t, p, 120))  # b takes over
    _at(topic, log_ms, 11_050, ClaimingMessages(0, "a", c, g, t, p, refused_end))  # refused
    _at(topic, log_ms, 11_100, Heartbeat(0, "b", c, g, t, p, 120))
    assert topic.compact(clean_before_ms=10_250) > 0
    log_ms[0] = 14_000  # b is silent for more than 2*HB: the claim can be won
    return topic, log_ms


def _losses(h: Harness) -> list[obs.AmoLost]:
    return [c.what for c in h.commands
            if isinstance(c, cmd.Observe) and isinstance(c.what, obs.AmoLost)]  # fmt: skip


def _joins(topic: MemoryTopic, log_ms: list[int]) -> Harness:
    """A member of another client joins on the compacted log and wins orders/0."""
    member = Member(settings(partitions=1, mode=Mode.AMO))
    h = Harness(topic, member, log_ms)
    h.read()
    h.run(member.begin(h.now, 1_000.0, keys(1)))
    h.tick(0.01)
    assert keys(1)[0] in member.held
    return h


def test_a_start_past_a_replaced_instances_refused_reservation_reports_what_it_passes() -> None:
    """The start is the estimate (130, never less: taking less could grant twice), and the
    records between the position without the refused reservation (120) and it are reported
    lost, with their cause."""
    h = _joins(*_replaced_history(refused_end=130))
    key = keys(1)[0]
    assert h.member.held[key].position == 130
    assert _losses(h) == [obs.AmoLost(key, 120, 130, obs.LossCause.ESTIMATE)]


def test_a_start_at_a_position_the_survivors_all_support_reports_nothing() -> None:
    """A replaced instance's refused reservation at or below the position passes nothing."""
    h = _joins(*_replaced_history(refused_end=120))
    assert h.member.held[keys(1)[0]].position == 120
    assert _losses(h) == []
