"""An AMO defect a CI chaos run found (`tests/integration/test_amo_chaos.py`), written as the
tests that failed until the member was fixed: under load a claim's heartbeat verdicts came
late, the member TERMed its child as the lease was ending, the late verdict then extended the
lease, and the member started another child under the same token at the end of what the first
had been granted. The records the first had been granted and never started (974..1024) were
reported lost, though nothing crashed and the log showed no lease end: the audit saw nothing at
risk. Now the child stops at a record boundary and says where (`child.termstop`), and the
member hands what was reserved from there to the next child of the same tenure
(`core.children.carried`): nothing is lost unless the tenure ends first."""

from __future__ import annotations

import signal
from dataclasses import replace

import pytest

from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core.member import Member
from marshal_workers.ipc import messages as ipc
from marshal_workers.ipc.exits import EXIT_KAFKA, EXIT_SETUP
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.wire import ClaimingMessages, ClaimKey, ReleasingPartition
from tests.unit.core.test_lease_ending_stop import _stop_as_the_lease_ends
from tests.unit.core.test_member_core import Harness, fresh_topic, keys, settings, start


def _granted_to_150(until: int = 150) -> tuple[Harness, Member, ClaimKey]:
    """A lone AMO member holding one claim from 100; its child was granted 100..150 (or up to
    ``until``)."""
    topic, log_ms = fresh_topic(partitions=1)
    member = Member(replace(settings(mode=Mode.AMO, partitions=1), max_handler_failures=3))
    h = start(member, topic, log_ms, n=1)
    (key,) = keys(1)
    h.run(member.feed(inp.StartFound(h.now, key, 100)))
    h.tick(0.05)
    h.run(member.feed(inp.ChildSaid(h.now, key, ipc.GrantRequest(1, 100, until))))
    assert ipc.Grant(1, True, "") in _told(h)
    assert member.held[key].position == until
    return h, member, key


def _told(h: Harness) -> list[ipc.ToChild]:
    return [c.message for c in h.commands if isinstance(c, cmd.TellChild)]


def _lost(h: Harness) -> list[tuple[int, int, str]]:
    return [
        (c.fields["start"], c.fields["end"], c.fields["cause"])
        for c in h.commands
        if isinstance(c, cmd.Log) and c.event == "amo_records_lost"
    ]


def _released(h: Harness) -> list[int]:
    """The offsets of the data claim's releases (not the member's own)."""
    return [m.offset for m in h.appended(ReleasingPartition) if m.topic == "orders"]


def _spawned(h: Harness) -> list[ipc.ChildSpec]:
    return [c.spec for c in h.commands if isinstance(c, cmd.Spawn)]


def _stopped_and_the_lease_runs_again(h: Harness, member: Member) -> None:
    """The member TERMs the child as the lease ends; then the late heartbeats land."""
    h.run(_stop_as_the_lease_ends(h, member))
    (key,) = keys(1)
    assert member.held[key].lease - h.now > member.s.kill_grace
    h.commands = []


def _carry_child_started(stopping: bool) -> tuple[Harness, Member, ClaimKey]:
    """The child stopped at 120 of 100..150, the lease runs again; ``stopping``: the member was
    asked to stop first. A child was started for 120..150."""
    h, member, key = _granted_to_150()
    if stopping:
        h.run(member.feed(inp.SignalReceived(h.now, signal.SIGTERM)))
    _stopped_and_the_lease_runs_again(h, member)
    h.run(member.feed(inp.ChildExited(h.now, key, -signal.SIGTERM, None, 120, stopped_at=120)))
    h.tick(0.05)
    assert _lost(h) == []
    (spec,) = _spawned(h)
    assert (spec.start_offset, spec.granted_until) == (120, 150)
    if stopping:  # asked to stop at once
        assert ipc.Stop("stop") in _told(h)
    return h, member, key


def test_what_a_child_stopped_for_its_lease_never_started_goes_to_the_next_child() -> None:
    """The child stopped at 120 of the 100..150 granted to it: 120..150 is the next child's,
    granted without asking, and nothing is reported lost; it asks from 150 on."""
    h, member, key = _carry_child_started(stopping=False)
    assert member.held[key].position == 150
    (said,) = [c for c in h.commands if isinstance(c, cmd.Log) and c.event == "amo_records_carried"]
    assert (said.level, said.fields["start"], said.fields["end"]) == ("info", 120, 150)
    h.run(member.feed(inp.ChildSaid(h.now, key, ipc.GrantRequest(1, 150, 160))))
    assert ipc.Grant(1, True, "") in _told(h)


def test_a_child_that_ended_anywhere_else_loses_its_granted_records_as_before() -> None:
    """Without ``stopped_at`` (killed inside a handler call, crashed) the record in the call
    may have been handled: the rest of the grant is reported lost and the next child starts
    past it."""
    h, member, key = _granted_to_150()
    _stopped_and_the_lease_runs_again(h, member)
    h.run(member.feed(inp.ChildExited(h.now, key, -signal.SIGKILL, None, 120)))
    h.tick(0.05)
    assert _lost(h) == [(120, 150, "lease_expired")]
    (spec,) = _spawned(h)
    assert (spec.start_offset, spec.granted_until) == (150, None)


def _asked_then_stopped(
    start: int, end: int
) -> tuple[Harness, Member, ClaimKey, list[cmd.Command]]:
    """The child, granted 100..``start``, asked for ``start``..``end`` (returned in flight) and
    stopped at 120 as the lease ended; the lease runs again. No child starts yet: the carry
    waits for that verdict."""
    h, member, key = _granted_to_150(until=start)
    asked = member.feed(inp.ChildSaid(h.now, key, ipc.GrantRequest(2, start, end)))
    in_flight = [c for c in asked if isinstance(c, cmd.Append)]
    assert in_flight
    _stopped_and_the_lease_runs_again(h, member)
    h.run(member.feed(inp.ChildExited(h.now, key, -signal.SIGTERM, None, 120, stopped_at=120)))
    h.tick(0.05)
    assert _spawned(h) == [], "started with a reservation of the child before in flight"
    return h, member, key, in_flight


def test_the_next_child_waits_for_a_reservation_in_flight_and_takes_it_too() -> None:
    """The stopped child had asked for 150..170 (in flight at its end): the next child waits
    for the verdict; accepted, it is carried too (it was granted to nobody), not lost."""
    h, member, key, in_flight = _asked_then_stopped(150, 170)
    h.run(in_flight)  # it lands: reserved in the log under this tenure
    h.tick(0.05)
    assert _lost(h) == []
    (spec,) = _spawned(h)
    assert (spec.start_offset, spec.granted_until) == (120, 170)
    assert member.held[key].position == 170


@pytest.mark.parametrize("stop", [False, True])
def test_a_carry_no_child_took_is_reported_lost_when_the_claim_is_let_go(stop: bool) -> None:
    """The tenure ends before the next child starts: the verdict it waits for never comes and
    the lease runs out (no write lands any more). What was carried is lost then, and said so
    (the claim is let go with it). ``stop``: the member was asked to stop meanwhile; no child
    is started for the carry with less than a kill grace of the lease left."""
    h, member, key = _granted_to_150()
    asked = member.feed(inp.ChildSaid(h.now, key, ipc.GrantRequest(2, 150, 170)))
    assert any(isinstance(c, cmd.Append) for c in asked)  # in flight: the next child waits
    _stopped_and_the_lease_runs_again(h, member)
    h.run(member.feed(inp.ChildExited(h.now, key, -signal.SIGTERM, None, 120, stopped_at=120)))
    out = member.feed(inp.SignalReceived(h.now, signal.SIGTERM)) if stop else []
    for _ in range(400):  # 20 s: nothing written lands
        h.now += 0.05
        out.extend(member.feed(inp.Tick(h.now, 1_000.0 + h.now)))
        if key not in member.held:
            break
    assert key not in member.held, "the claim outlived its lease"
    assert not any(isinstance(c, cmd.Spawn) for c in out)
    h.commands = [c for c in out if isinstance(c, cmd.Log)]
    assert _lost(h) == [(120, 150, "lease_expired")]


def test_a_stop_while_a_carry_waits_hands_it_to_a_child_that_stops_after_it() -> None:
    """A deploy's TERM reaches the member while the carry waits for the stopped child's
    reservation in flight. Before, the claim was let go at once and the carry reported lost,
    though nothing had crashed and the release left nothing at risk in the log (the audit
    would find records nobody handled and no cause). Now the verdict is awaited, and a child
    is started for the carry and asked to stop at once: it handles the carried records,
    asks for nothing, and the release goes at their end."""
    h, member, key = _granted_to_150()
    asked = member.feed(inp.ChildSaid(h.now, key, ipc.GrantRequest(2, 150, 170)))
    in_flight = [c for c in asked if isinstance(c, cmd.Append)]
    _stopped_and_the_lease_runs_again(h, member)
    h.run(member.feed(inp.ChildExited(h.now, key, -signal.SIGTERM, None, 120, stopped_at=120)))
    h.run(member.feed(inp.SignalReceived(h.now, signal.SIGTERM)))  # a deploy: stop gracefully
    h.tick(0.05)
    assert _spawned(h) == [] and key in member.held, "let go with a verdict in flight"
    h.run(in_flight)  # it lands: reserved under this tenure, carried too
    h.tick(0.05)
    (spec,) = _spawned(h)
    assert (spec.start_offset, spec.granted_until) == (120, 170)
    assert ipc.Stop("stop") in _told(h)
    assert _released(h) == []  # not while its child runs
    h.run(member.feed(inp.ChildExited(h.now, key, 0, None, 170)))  # handled it all, stopped
    h.tick(0.05)
    assert _lost(h) == []
    assert _released(h) == [170]


def test_a_child_stopped_for_its_lease_while_asked_to_stop_hands_on_to_one_that_stops() -> None:
    """The member was asked to stop while its child ran; the child was TERMed as the lease was
    ending and stopped at 120 of the 100..150 granted to it, then the late heartbeats landed.
    Before, 120..150 was reported lost (the claim was stopping: no next child); now a child is
    started for it and asked to stop at once, and the release goes at 150."""
    h, member, key = _carry_child_started(stopping=True)
    h.run(member.feed(inp.ChildExited(h.now, key, 0, None, 150)))
    h.tick(0.05)
    assert _lost(h) == []
    assert _released(h) == [150]


def test_a_carry_child_that_could_not_be_started_hands_the_carry_on_again() -> None:
    """No process could be made for the child handed 120..150 (limits, memory), or its setup
    ended it: it began nothing, as the runtime or the child says (its start as position and
    stop); the next child, after the restart's back-off, is handed the same records. Before,
    the runtime said nothing of where, and 120..150 was lost and reported by nobody (a
    review); a child's failed setup reported it lost as a crash's (a second review)."""
    h, member, key = _carry_child_started(stopping=False)
    h.commands = []
    h.run(member.feed(inp.ChildExited(h.now, key, EXIT_SETUP, None, 120, 120)))
    for _ in range(40):
        h.tick(0.05)
    assert _lost(h) == []
    (spec,) = _spawned(h)
    assert (spec.start_offset, spec.granted_until) == (120, 150)


def test_a_carry_child_that_fails_while_stopping_loses_the_carry_once() -> None:
    """Asked to stop, the carry's child fails (here its consumer is lost, and it says where it
    stopped): no restart's back-off applies while stopping, so no other child is started for
    the carry (a review saw 20 started in 0.2 s); it is reported lost once, and released."""
    h, member, key = _carry_child_started(stopping=True)
    h.commands = []
    h.run(member.feed(inp.ChildExited(h.now, key, EXIT_KAFKA, None, 130, stopped_at=130)))
    for _ in range(10):
        h.tick(0.05)
    assert _spawned(h) == []
    assert _lost(h) == [(130, 150, "crash")]
    assert _released(h) == [150]


def test_no_carry_child_starts_with_less_than_a_kill_grace_of_the_stop_left() -> None:
    """Asked to stop with less than a kill grace before the stop's deadline: a child started
    then would be killed as it began; the carry is reported lost as the claim is let go, and
    its release withheld (it would say those records were handled), saying why: not its lease,
    which runs on, but the carry (a review read "lease expired" there)."""
    h, member, key = _granted_to_150()
    h.run(member.feed(inp.SignalReceived(h.now, signal.SIGTERM)))
    _stopped_and_the_lease_runs_again(h, member)
    held = member.held[key]
    held.stop_deadline = h.now + member.s.kill_grace / 2
    h.run(member.feed(inp.ChildExited(h.now, key, -signal.SIGTERM, None, 120, stopped_at=120)))
    h.tick(0.05)
    assert _spawned(h) == []
    assert [lost[:2] for lost in _lost(h)] == [(120, 150)]
    assert _released(h) == [] and key not in member.held
    (withheld,) = [
        c for c in h.commands if isinstance(c, cmd.Log) and c.event == "release_withheld"
    ]
    assert withheld.fields["reason"] == "carries records no child will take"


def _held_back(h: Harness, commands: list[cmd.Command], in_flight: list[cmd.Command]) -> None:
    """Keep ``commands``, their appends not written yet (added to ``in_flight``)."""
    in_flight.extend(c for c in commands if isinstance(c, cmd.Append))
    h.commands.extend(c for c in commands if not isinstance(c, cmd.Append))


def _tick_held(
    h: Harness, member: Member, in_flight: list[cmd.Command], *, log_runs: bool = True
) -> None:
    """A turn 0.05 s on with nothing written landing (its appends held in ``in_flight``);
    ``log_runs``: the log's time runs on too (else only the member's answers are late)."""
    h.now += 0.05
    h.log_ms[0] += 50 if log_runs else 0
    _held_back(h, member.feed(inp.Tick(h.now, 1_000.0 + h.now)), in_flight)


def _stopped_before_the_verdicts() -> tuple[Harness, Member, ClaimKey, list[cmd.Command]]:
    """The child of `_granted_to_150` asked for 150..170 and was TERMed as the lease was
    ending; it stopped at 120 and its exit is read with the lease's heartbeats and that
    reservation still in flight (returned, not landed). Nothing is reported lost and nothing
    is released or started yet: the verdicts decide."""
    h, member, key = _granted_to_150()
    in_flight: list[cmd.Command] = []
    _held_back(h, member.feed(inp.ChildSaid(h.now, key, ipc.GrantRequest(2, 150, 170))), in_flight)
    assert in_flight
    in_flight += _stop_as_the_lease_ends(h, member)
    assert member.held[key].lease - h.now <= member.s.kill_grace
    h.commands = []
    exited = inp.ChildExited(h.now, key, -signal.SIGTERM, None, 120, stopped_at=120)
    _held_back(h, member.feed(exited), in_flight)
    _tick_held(h, member, in_flight)
    assert _lost(h) == [] and _spawned(h) == []
    assert not [c for c in in_flight if isinstance(c.message, ReleasingPartition)]
    assert key in member.held
    return h, member, key, in_flight


def test_a_child_stopped_as_the_lease_ends_hands_on_when_the_verdicts_come_late() -> None:
    """marshal-sim seed 5200003 of `failures,read-latency,stall`, 8 faults at 0.3: the child's
    exit was read with less than a kill grace of the lease left, its heartbeat's verdict still
    to come. The claim was let go at once: 120..150 reported lost, the reservation that landed
    then too, and the release, accepted (the log's lease ran on), said they were handled; the
    audit saw records lost in no crash. Now the claim waits, past the end of the lease in its
    own view, for the heartbeat in flight: it lands in time, the lease runs again, and a child
    is handed 120..170 (the reservation landed while the lease was out in the member's view
    included: the log accepted it under this tenure). Nothing is lost, nothing released."""
    h, member, key, in_flight = _stopped_before_the_verdicts()
    lease = member.held[key].lease
    while h.now < lease + 0.2:  # out in the member's view, not yet in the log's; nothing lands
        _tick_held(h, member, in_flight, log_runs=False)
    assert key in member.held, "let go with a heartbeat of it in flight"
    assert _lost(h) == [] and _spawned(h) == []
    h.run(in_flight)  # the heartbeats and the reservation land: all accepted
    h.tick(0.05)
    assert _lost(h) == [] and _released(h) == []
    (spec,) = _spawned(h)
    assert (spec.start_offset, spec.granted_until) == (120, 170)
    assert member.held[key].position == 170


def test_a_child_stopped_as_the_lease_ends_loses_the_carry_if_no_verdict_comes() -> None:
    """The same, and nothing lands: once nothing of the claim's is in flight (its writes given
    up on), the lease is over for good. The claim is let go without a release (the log lets it
    go stale, a crash it shows at risk), the carry reported lost as the lease's, and no child
    started: waiting for the verdicts ends with them."""
    h, member, key, in_flight = _stopped_before_the_verdicts()
    for _ in range(400):  # 20 s
        _tick_held(h, member, in_flight)
        if key not in member.held:
            break
    assert key not in member.held, "the claim outlived its lease"
    assert _spawned(h) == []
    assert not [c for c in in_flight if isinstance(c.message, ReleasingPartition)]
    assert (120, 150, "lease_expired") in _lost(h)


def test_what_follows_a_range_reported_lost_in_a_lease_stops_carry_is_reported_at_once() -> None:
    """The child was granted 100..130 and stopped at 120 for its lease; two writes of it given
    up on landed after all: 130..140, read and reported lost, and 140..150, which moved the
    claim's position. The next child takes 120..130 (`carried` ends where the report begins:
    those records were dropped once); its ask from 130 is refused (below the position) and the
    child after it starts at 150, so 140..150 is handed to nobody. It
    was reported nowhere (a review of seed 5329015's fix): now it is, as the child's end is
    read, once, as a given-up write's."""
    h, member, key = _granted_to_150(until=130)
    held = member.held[key]
    held.lost.append((130, 140))  # (what the two landings leave)
    held.position = 150
    _stopped_and_the_lease_runs_again(h, member)
    h.run(member.feed(inp.ChildExited(h.now, key, -signal.SIGTERM, None, 120, stopped_at=120)))
    h.tick(0.05)
    assert _lost(h) == [(140, 150, "refused")]
    (spec,) = _spawned(h)
    assert (spec.start_offset, spec.granted_until) == (120, 130)
    assert held.position == 150


def test_a_landing_that_reaches_into_records_reported_lost_is_not_carried() -> None:
    """The child granted 100..130 asked for 130..140 (in flight) and stopped at 120 for its
    lease; the carry is 120..130 and waits for that verdict. Before it comes, 130..140 is
    reported lost (here set by hand: what a given-up write's landing leaves). Its landing then
    is not carried: handed to the next child, records already reported lost would be handled
    (a review). The next child takes 120..130 alone."""
    h, member, key, in_flight = _asked_then_stopped(130, 140)
    member.held[key].lost.append((130, 140))
    h.run(in_flight)
    h.tick(0.05)
    (spec,) = _spawned(h)
    assert (spec.start_offset, spec.granted_until) == (120, 130)


def _lease_out_in_the_members_view(
    h: Harness, member: Member, key: ClaimKey, in_flight: list[cmd.Command]
) -> list[cmd.Command]:
    """The member TERMs the child as the lease ends and the lease runs out in its view with
    nothing landing (the heartbeats and reservations held in ``in_flight``); the reservations
    held."""
    in_flight += _stop_as_the_lease_ends(h, member)
    h.commands = []
    held = member.held[key]
    while h.now < held.lease:
        _tick_held(h, member, in_flight, log_runs=False)
    return [c for c in in_flight if isinstance(c.message, ClaimingMessages)]


@pytest.mark.parametrize("ahead", [False, True])
def test_a_reservation_decided_as_the_lease_ends_in_the_members_view_is_left_to_the_carry(
    ahead: bool,
) -> None:
    """marshal-sim seeds 7807027 and 7823021 (a sweep on 4055ffa): the child asked for
    150..170; its member TERMed it as the lease was ending, the reservation landed and was
    decided with the lease out in the member's view while its heartbeat was still in flight,
    and the child stopped at 120. Before, the refused grant reported 150..170 lost at once, so
    the carry stopped at 150 and the next child started at 170 once the heartbeat's verdict ran
    the lease again: lost with no crash in the log. Now the refusal leaves those records to
    the child's end: the next child of the tenure takes 120..170, and nothing is lost.
    ``ahead``: the child had asked for 170..190 too, whose verdict is read after its end (a
    review: refused as behind a refused batch, it was reported lost); the next child takes
    120..190."""
    h, member, key = _granted_to_150()
    in_flight: list[cmd.Command] = []
    _held_back(h, member.feed(inp.ChildSaid(h.now, key, ipc.GrantRequest(2, 150, 170))), in_flight)
    if ahead:
        asked = member.feed(inp.ChildSaid(h.now, key, ipc.GrantRequest(3, 170, 190)))
        _held_back(h, asked, in_flight)
    reserve = _lease_out_in_the_members_view(h, member, key, in_flight)
    assert len(reserve) == (2 if ahead else 1)
    in_flight.remove(reserve[0])
    h.run(reserve[:1])  # the reservation lands and is decided: the child is refused it
    assert ipc.Grant(2, False, "lease expired") in _told(h)
    assert _lost(h) == [], "reported lost before the lease's verdict"
    h.run(member.feed(inp.ChildExited(h.now, key, -signal.SIGTERM, None, 120, stopped_at=120)))
    h.run(in_flight)  # the heartbeats (and the reservation ahead) land: the lease runs again
    h.tick(0.05)
    h.tick(0.05)
    assert _lost(h) == [] and _released(h) == []
    (spec,) = _spawned(h)
    assert (spec.start_offset, spec.granted_until) == (120, 190 if ahead else 170)


def test_reservations_decided_in_reverse_as_the_lease_ends_are_left_to_the_carry() -> None:
    """marshal-sim seed 8123009 (a sweep on 98d1340): as above with the batch ahead, but both
    reservations landed (150..170, then 170..190) and their verdicts were acted on in the
    other order, the lease out in the member's view and its heartbeat in flight. 170..190,
    refused first, did not begin at the claim's position (150..170 was undecided), so it was
    reported lost at once; the heartbeat's verdict ran the lease again and the tenure released
    past it: lost with no crash in the log. Now a refusal behind reservations of the same
    child still in flight is left to the child's end too: the next child takes 120..190."""
    h, member, key = _granted_to_150()
    in_flight: list[cmd.Command] = []
    for request in (ipc.GrantRequest(2, 150, 170), ipc.GrantRequest(3, 170, 190)):
        _held_back(h, member.feed(inp.ChildSaid(h.now, key, request)), in_flight)
    reserve = _lease_out_in_the_members_view(h, member, key, in_flight)
    assert [c.message.offset for c in reserve] == [170, 190]
    landed = {c.op: h.topic.append(c.partition, c.key, c.value) for c in reserve}
    h.read()  # the fold reads both; each verdict waits for its acknowledgement
    for c in reversed(reserve):  # acknowledged in the other order
        in_flight.remove(c)
        h.run(member.feed(inp.AppendDone(h.now, c.op, landed[c.op])))
    assert ipc.Grant(3, False, "lease expired") in _told(h)
    assert _lost(h) == [], "reported lost before the lease's verdict"
    h.run(member.feed(inp.ChildExited(h.now, key, -signal.SIGTERM, None, 120, stopped_at=120)))
    h.run(in_flight)  # the heartbeats land: the lease runs again
    h.tick(0.05)
    h.tick(0.05)
    assert _lost(h) == [] and _released(h) == []
    (spec,) = _spawned(h)
    assert (spec.start_offset, spec.granted_until) == (120, 190)
