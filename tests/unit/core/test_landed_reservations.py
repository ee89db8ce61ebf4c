"""AMO: a reservation whose write the member gave up on (told it failed, or no verdict in time)
but which landed is adopted, as `Claiming.adopt_landed` adopts a claim: granted while its child
waits for it, and else its records are reported lost. No AMO loss goes unreported.

Found by a review (marshal-sim seed 50022 of ``poison,failures`` at a fail rate of 0.2, four
members in two groups, key/3): the log accepted a child's two reservations (103..104 and
104..105) while every acknowledgement said failure; the first was answered
``Grant(1, False, "not reserved")`` with the second's refusal, the child stopped gracefully,
the release carried the log's position, and offset 103 was never handled, with no
``amo_records_lost`` and nothing in the metrics.
"""

from __future__ import annotations

import math
import signal

import pytest

from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core import observations as obs
from marshal_workers.core.member import Member
from marshal_workers.core.pending import WRITE_TRIES
from marshal_workers.ipc import messages as ipc
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.wire import ClaimKey, ReleasingPartition
from tests.unit.core.test_member_core import Harness, fresh_topic, keys, settings, start


def _holding() -> tuple[Harness, ClaimKey]:
    topic, log_ms = fresh_topic(partitions=1)
    h = start(Member(settings(mode=Mode.AMO, partitions=1)), topic, log_ms, n=1)
    key = keys(1)[0]
    h.run(h.member.feed(inp.StartFound(h.now, key, 100)))
    h.tick(0.05)
    assert h.member.held[key].child
    return h, key


def _ask(h: Harness, key: ClaimKey, request: ipc.GrantRequest) -> cmd.Append:
    out = h.member.feed(inp.ChildSaid(h.now, key, request))
    h.commands.extend(out)
    (append,) = [c for c in out if isinstance(c, cmd.Append)]
    return append


def _lands(h: Harness, c: cmd.Append) -> None:
    h.topic.append(c.partition, c.key, c.value)


def _fails(h: Harness, c: cmd.Append, error: str = "timed out") -> list[cmd.Append]:
    """The write's acknowledgement says it failed; returns what the member writes again."""
    out = h.member.feed(inp.AppendFailed(h.now, c.op, error))
    h.commands.extend(out)
    return [a for a in out if isinstance(a, cmd.Append)]


def _reload(h: Harness, key: ClaimKey, position: int) -> None:
    """SIGHUP: the child stops at ``position`` and a fresh one is started at once."""
    h.run(h.member.feed(inp.SignalReceived(h.now, signal.SIGHUP)))
    h.run(h.member.feed(inp.ChildSaid(h.now, key, ipc.Stopped(position))))
    h.run(h.member.feed(inp.ChildExited(h.now, key, 0, None, position)))
    assert any(isinstance(c, cmd.Spawn) for c in h.commands)


def _grants(h: Harness) -> list[tuple[int, bool]]:
    return [(c.message.request_id, c.message.granted) for c in h.commands
            if isinstance(c, cmd.TellChild) and isinstance(c.message, ipc.Grant)]  # fmt: skip


def _losses(h: Harness) -> list[tuple[int, int]]:
    return sorted((c.what.start, c.what.end) for c in h.commands
                  if isinstance(c, cmd.Observe) and isinstance(c.what, obs.AmoLost))  # fmt: skip


def _lost_lines(h: Harness) -> list[tuple[int, int]]:
    return sorted((c.fields["start"], c.fields["end"]) for c in h.commands  # type: ignore[misc]
                  if isinstance(c, cmd.Log) and c.event == "amo_records_lost")  # fmt: skip


def test_the_seeds_sequence_reports_what_it_lost() -> None:
    """Both writes time out but land; the second is written again and fails each time: both
    requests are refused. The fold then shows both reservations: their records are reported
    lost (logged and observed for the metric), before the child's graceful stop and the
    release at the log's position."""
    h, key = _holding()
    first = _ask(h, key, ipc.GrantRequest(1, 100, 104))
    second = _ask(h, key, ipc.GrantRequest(2, 104, 105))
    _lands(h, first)
    _lands(h, second)
    assert _fails(h, first) == []  # answered with the second's verdict
    _every_write_again_fails(h, _fails(h, second))  # these do not land
    assert _grants(h) == [(1, False), (2, False)]
    h.read()  # the fold reaches both records
    assert _losses(h) == [(100, 104), (104, 105)] == _lost_lines(h)
    h.run(h.member.request_stop(h.now, fast=False))  # TERM: the child stops gracefully
    h.run(h.member.feed(inp.ChildSaid(h.now, key, ipc.Stopped(100))))
    h.run(h.member.feed(inp.ChildExited(h.now, key, 0, None, 100)))
    h.tick(0.05)
    released = [m.offset for m in h.appended(ReleasingPartition) if m.topic == "orders"]
    assert released == [105]
    assert _losses(h) == [(100, 104), (104, 105)]  # each once


def test_a_reservation_read_before_its_failure_is_granted() -> None:
    """The record is folded before the acknowledgement says the write timed out (the reader
    got there first): it is decided on that verdict, and granted."""
    h, key = _holding()
    first = _ask(h, key, ipc.GrantRequest(1, 100, 150))
    second = _ask(h, key, ipc.GrantRequest(2, 150, 200))
    _lands(h, first)
    _lands(h, second)
    h.read()  # both verdicts wait for their acknowledgements
    assert _fails(h, first) == []
    assert _fails(h, second) == []
    assert sorted(_grants(h)) == [(1, True), (2, True)]
    assert _losses(h) == []
    assert h.member.held[key].position == 200


def test_a_reservation_answered_with_a_later_one_is_granted_when_it_turns_up() -> None:
    """The first write is given up on while the second is in flight (its request waits for
    the second's verdict); the fold then shows the first landed: it is granted at once."""
    h, key = _holding()
    first = _ask(h, key, ipc.GrantRequest(1, 100, 150))
    second = _ask(h, key, ipc.GrantRequest(2, 150, 200))
    assert _fails(h, first) == []  # covered by the second
    _lands(h, first)
    h.read()
    assert _grants(h) == [(1, True)]
    done = h.topic.append(second.partition, second.key, second.value)
    h.run(h.member.feed(inp.AppendDone(h.now, second.op, done)))
    assert _grants(h) == [(1, True), (2, True)]
    assert _losses(h) == []


def test_a_reservation_in_flight_when_the_child_ends_is_reported_before_the_release() -> None:
    """The release waits for the verdict of a reservation in flight: it landed, the child had
    stopped, so its records are reported lost while the claim is still held."""
    h, key = _holding()
    first = _ask(h, key, ipc.GrantRequest(1, 100, 150))
    h.run(h.member.request_stop(h.now, fast=False))
    h.run(h.member.feed(inp.ChildExited(h.now, key, 0, None, 100)))  # it ends meanwhile
    h.tick(0.05)
    assert [m for m in h.appended(ReleasingPartition) if m.topic == "orders"] == []
    done = h.topic.append(first.partition, first.key, first.value)
    h.run(h.member.feed(inp.AppendDone(h.now, first.op, done)))
    h.tick(0.05)
    assert _losses(h) == [(100, 150)]
    released = [m.offset for m in h.appended(ReleasingPartition) if m.topic == "orders"]
    assert released == [150]


def test_refused_reservations_decided_out_of_order_are_each_reported() -> None:
    """marshal-sim (seed 19 of the default mix, once `amo_loss_reported` checked it): the child
    ended with two reservations in flight; both landed, and the later one's acknowledgement
    came first. Its refusal moved the position past both, and the earlier one's records were
    then taken as granted: 360..362 lost, reported by nobody. Each refused reservation reports
    what its record reserved, whatever the order."""
    h, key = _holding()
    first = _ask(h, key, ipc.GrantRequest(1, 100, 150))
    second = _ask(h, key, ipc.GrantRequest(2, 150, 200))
    h.run(h.member.request_stop(h.now, fast=False))
    h.run(h.member.feed(inp.ChildExited(h.now, key, -15, None, 100)))  # killed meanwhile
    landed = [h.topic.append(c.partition, c.key, c.value) for c in (first, second)]
    h.read()  # both verdicts wait for their acknowledgements
    for c, done in reversed(list(zip((first, second), landed, strict=True))):
        h.run(h.member.feed(inp.AppendDone(h.now, c.op, done)))
    assert _losses(h) == [(100, 150), (150, 200)]


def _every_write_again_fails(h: Harness, again: list[cmd.Append]) -> None:
    """Each write again of a reservation (``again``: the first of them) is told it failed, and
    none lands, until the member gives the reservation up."""
    for _ in range(WRITE_TRIES - 1):
        (write,) = again
        again = _fails(h, write, "append failed")
    assert again == []  # given up


def _unread_for(h: Harness, seconds: float) -> None:
    """Time goes on by ``seconds`` in turns of 50 ms, the member's reads of the log lagging."""
    for _ in range(round(seconds / 0.05)):
        h.now += 0.05
        h.log_ms[0] += 50
        _feed_unread(h, h.member.feed(inp.Tick(h.now, 1000.0 + h.now)))


def _feed_unread(h: Harness, out: list[cmd.Command]) -> None:
    """Carry out appends, acknowledged, without reading the log: the member's reads lag."""
    h.commands.extend(out)
    for c in out:
        if isinstance(c, cmd.Append):
            done = h.topic.append(c.partition, c.key, c.value)
            _feed_unread(h, h.member.feed(inp.AppendDone(h.now, c.op, done)))


def test_a_landing_left_to_a_request_whose_child_was_killed_is_still_reported() -> None:
    """A review of the landing left to a write in flight: the first child's reservations
    100..101 and 101..110 land while every acknowledgement says failed (refused, the child
    exits); the next child asks 100..101 a second later (other bytes) and is killed with it in
    flight. The fold then shows the first 100..101 (left to the request in flight: the same
    end), then 101..110 (reported, the position moves to 110), then the request, refused as
    behind 110. Offset 100 was reserved, never handled and reported by nobody: a landing left
    to a write is decided as any once that write's verdict accounts for nothing."""
    h, key = _holding()
    first = _ask(h, key, ipc.GrantRequest(1, 100, 101))
    second = _ask(h, key, ipc.GrantRequest(2, 101, 110))
    _lands(h, first)
    _lands(h, second)
    assert _fails(h, first) == []
    _every_write_again_fails(h, _fails(h, second))
    _feed_unread(h, h.member.feed(inp.ChildExited(h.now, key, 7, None, 100)))
    _unread_for(h, 1.5)
    request = _ask(h, key, ipc.GrantRequest(1, 100, 101))
    assert request.value != first.value  # stamped a second later
    done = h.topic.append(request.partition, request.key, request.value)
    _feed_unread(h, h.member.feed(inp.ChildExited(h.now, key, -9, None, 100)))
    h.read()
    h.run(h.member.feed(inp.AppendDone(h.now, request.op, done)))
    reported = _losses(h)
    assert any(a <= 100 < b for a, b in reported), reported
    assert any(a <= 109 < b for a, b in reported), reported


def test_a_given_up_write_that_lands_after_the_next_childs_run_reserved_nothing() -> None:
    """The first child's reservation of 100..101 fails every write and is given up; the next
    child asks for the same run a second later (other bytes) and is granted it. Then the first
    child's write turns up after all: it lands where the log stands at its end already and
    reserves nothing. It was reported lost as the given-up write's (reported from its start:
    a run the next child was granted; seed 180054 of `failures,read-latency` at 0.3)."""
    h, key = _holding()
    first = _ask(h, key, ipc.GrantRequest(1, 100, 101))
    _every_write_again_fails(h, _fails(h, first, "append failed"))
    h.run(h.member.feed(inp.ChildExited(h.now, key, 7, None, 100)))
    h.tick(1.5)
    second = _ask(h, key, ipc.GrantRequest(1, 100, 101))
    assert second.value != first.value
    h.run([second])
    assert (1, True) in _grants(h)
    _lands(h, first)  # the producer delivered the first write after all
    h.tick(0.05)
    assert _losses(h) == []


def test_what_a_landing_left_to_a_request_reserved_below_its_start_is_reported() -> None:
    """A second review: only the first child's 101..110 lands, at the log's position 100, so it
    reserves 100..110; every acknowledgement says failed and the child exits. The next child
    asks 100..101 and 101..110; the landing is left to 101..110 (the same end). 100..101 is
    refused behind 110, 101..110 reported from 101, and the landing dropped as accounted for
    by it: 100 was reserved and reported by nobody."""
    h, key = _holding()
    first = _ask(h, key, ipc.GrantRequest(1, 100, 101))
    second = _ask(h, key, ipc.GrantRequest(2, 101, 110))
    _lands(h, second)
    assert _fails(h, first, "append failed") == []  # answered with the second's verdict
    _every_write_again_fails(h, _fails(h, second))
    _feed_unread(h, h.member.feed(inp.ChildExited(h.now, key, 7, None, 100)))
    _unread_for(h, 1.5)
    low = _ask(h, key, ipc.GrantRequest(1, 100, 101))
    high = _ask(h, key, ipc.GrantRequest(2, 101, 110))
    low_done = h.topic.append(low.partition, low.key, low.value)
    high_done = h.topic.append(high.partition, high.key, high.value)
    h.read()
    h.run(h.member.feed(inp.AppendDone(h.now, low.op, low_done)))
    h.run(h.member.feed(inp.AppendDone(h.now, high.op, high_done)))
    h.tick(0.05)
    reported = _losses(h)
    assert any(a <= 100 < b for a, b in reported), reported
    assert sum(b - a for a, b in reported) == 10, reported  # each offset once


@pytest.mark.parametrize("later_s", [0.0, 1.0], ids=["same-bytes", "a-second-later"])
def test_a_write_again_whose_first_try_reserved_a_covered_request_reports_all_of_it(
    later_s: float,
) -> None:
    """marshal-sim seed 784008 of `failures,read-latency,kill,stall` at 0.3: the child's
    100..103 fails both writes and is answered with its next request's verdict (103..104). That
    one's first write times out but lands where the log stands at 100, so it reserves 100..104;
    it is written again (the same bytes in the seed; other bytes a second later), and the
    child is killed meanwhile. The write again lands where the log stands at 104 already and is
    refused (its child has ended): it was reported from 103, its own start, and 100..103 was
    reserved, never handled and reported by nobody (the position moved to 104 with the report,
    so the release's backstop saw nothing either)."""
    h, key = _holding()
    first = _ask(h, key, ipc.GrantRequest(1, 100, 103))
    (first_again,) = _fails(h, first, "append failed")
    second = _ask(h, key, ipc.GrantRequest(2, 103, 104))
    assert _fails(h, first_again, "append failed") == []  # answered with the second's verdict
    _lands(h, second)  # the log stands at 100: its record reserves 100..104
    _unread_for(h, later_s)
    (second_again,) = _fails(h, second)  # timed out: written again
    assert (second_again.value == second.value) is (later_s == 0.0)
    _feed_unread(h, h.member.feed(inp.ChildExited(h.now, key, -15, None, 100)))  # killed
    done = h.topic.append(second_again.partition, second_again.key, second_again.value)
    h.read()  # the first try's record (100..104), then the write again's (nothing)
    h.run(h.member.feed(inp.AppendDone(h.now, second_again.op, done)))
    h.tick(0.05)
    reported = _losses(h)
    assert any(a <= 100 < b for a, b in reported), reported
    assert sum(b - a for a, b in reported) == 4, reported  # 100..104, each offset once
    assert _lost_lines(h) == reported


def test_a_write_again_whose_first_try_landed_grants_the_covered_request_and_reports_nothing() -> (
    None
):
    """The same writes with the child alive: the write again's verdict grants both requests
    (the first try's record reserved 100..104 under the held token), and nothing is reported
    lost: the earlier try's start reports only what a refusal leaves granted to nobody."""
    h, key = _holding()
    first = _ask(h, key, ipc.GrantRequest(1, 100, 103))
    (first_again,) = _fails(h, first, "append failed")
    second = _ask(h, key, ipc.GrantRequest(2, 103, 104))
    assert _fails(h, first_again, "append failed") == []
    _lands(h, second)
    (second_again,) = _fails(h, second)
    done = h.topic.append(second_again.partition, second_again.key, second_again.value)
    h.read()
    h.run(h.member.feed(inp.AppendDone(h.now, second_again.op, done)))
    h.tick(0.05)
    assert sorted(_grants(h)) == [(1, True), (2, True)]
    assert _losses(h) == []
    assert h.member.held[key].position == 104


def test_a_covered_write_again_whose_first_try_landed_reports_that_landing() -> None:
    """marshal-sim seed 963009 of `failures,read-latency,kill,stall` at 0.3: the child's
    100..105 times out but lands where the log stands at 100; it is written again a second
    later (other bytes), the child asks 105..106, and the write again fails too: given up,
    answered with 105..106's verdict. The child is killed; the fold then shows the first try's
    record, which matched no given-up write (those bytes were the write again's) and no write
    in flight: 100..105 was reserved, never handled and reported by nobody."""
    h, key = _holding()
    while not (  # just after a heartbeat, the wall clock's next second near
        math.floor(h.now + 0.35) > math.floor(h.now)
        and h.member.held[key].next_heartbeat > h.now + 0.4
    ):
        h.tick(0.05)
    first = _ask(h, key, ipc.GrantRequest(1, 100, 105))
    _lands(h, first)  # the log stands at 100: its record reserves 100..105
    _unread_for(h, 0.35)
    (first_again,) = _fails(h, first)  # timed out: written again, in the next second
    assert first_again.value != first.value
    second = _ask(h, key, ipc.GrantRequest(2, 105, 106))
    assert _fails(h, first_again, "append failed") == []  # answered with the second's verdict
    _feed_unread(h, h.member.feed(inp.ChildExited(h.now, key, -15, None, 100)))  # killed
    done = h.topic.append(second.partition, second.key, second.value)
    h.read()  # the first try's record (100..105), then the second's (105..106)
    h.run(h.member.feed(inp.AppendDone(h.now, second.op, done)))
    h.tick(0.05)
    reported = _losses(h)
    assert any(a <= 100 < b for a, b in reported), reported
    assert sum(b - a for a, b in reported) == 6, reported  # 100..106, each offset once
    assert _lost_lines(h) == reported


def test_a_write_given_up_after_its_child_was_replaced_is_reported_if_it_landed() -> None:
    """marshal-sim seed 963174 of `failures,read-latency,kill,stall` at 0.3: a reservation
    written again was in flight when its child ended and a fresh child took the claim at once
    (here a reload, SIGHUP); the write again was then told it failed, but had landed. Given up
    for a child that was no longer the claim's, it was kept nowhere: its landing matched
    nothing, and what it reserved was handled by nobody and reported by nobody. It is kept as
    given up: its landing is reported lost, and the claim's position moves past it."""
    h, key = _holding()
    first = _ask(h, key, ipc.GrantRequest(1, 100, 104))
    h.run([first])
    second = _ask(h, key, ipc.GrantRequest(2, 104, 108))
    (again,) = _fails(h, second, "broker down")  # written again: its child still waits
    _reload(h, key, 104)  # the fresh child takes the claim at once
    _lands(h, again)
    assert _fails(h, again) == []  # its child is gone: given up
    h.read()  # the fold reaches the landing: 104..108 reserved, granted to nobody
    assert (104, 108) in _losses(h) and (104, 108) in _lost_lines(h)
    assert h.member.held[key].position == 108


def test_a_landing_with_the_bytes_of_a_replaced_and_the_current_child_is_the_current_ones() -> None:
    """A review: child A's request 100..104 is in flight when a reload replaces it at once; the
    fresh child B asks 100..104 in the same wall second (the very same bytes) and 104..108
    ahead. Both 100..104 writes are told they failed (A's kept as given up, B's covered by its
    next), one record with those bytes lands. Taken for A's, 100..104 was reported lost, and
    then granted to B with 104..108: handled and reported lost. The current child's matches
    first: B is granted 100..104 and nothing is reported."""
    h, key = _holding()
    first = _ask(h, key, ipc.GrantRequest(1, 100, 104))  # child A's, in flight
    _reload(h, key, 100)  # child B takes the claim at once
    h.commands = []
    again = _ask(h, key, ipc.GrantRequest(1, 100, 104))  # child B's, the same second
    assert again.value == first.value
    ahead = _ask(h, key, ipc.GrantRequest(2, 104, 108))
    assert _fails(h, first) == []  # A's: given up
    assert _fails(h, again) == []  # B's: covered by 104..108
    _lands(h, first)  # one record with those bytes
    h.read()
    h.run([ahead])
    assert (1, True) in _grants(h) and (2, True) in _grants(h)
    assert _losses(h) == [] == _lost_lines(h)
