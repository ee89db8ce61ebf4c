"""The floor under a compacted claim's estimate: where an uncertain claim's position would stand
without the records of an instance the reader saw replaced (`rationalizer._estimate_floor`).

The estimate itself never moves (taking less could grant twice); the floor only tells the member
that starts at the estimate which records it passes over that nobody was granted
(`tests/unit/core/test_estimated_start.py`), so it must stay narrow: a floor where the whole
log's position is the estimate would report handled records lost."""

from __future__ import annotations

from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import ClaimState, World, fold, resume_offset
from marshal_workers.protocol.wire import ClaimKey, Message
from tests.support import GROUP, HB, TOPIC, Log, claim, hb, record, reserve

KEY = ClaimKey(GROUP, TOPIC, 0)
A, B = "c-a", "c-b"  # two instances of client c


def _folds(history: list[tuple[int, Message]]) -> tuple[ClaimState, ClaimState]:
    """The claim folded by a reader of the whole log (its claim first) and by one that meets
    ``history`` after a gap (the cleaner removed what came before)."""
    whole = Log()
    whole.at(0, claim("c", inst=A))
    compacted = World(whole.config, 0)
    for t, msg in history:
        whole.at(t, msg)
        fold(compacted, record(msg, whole.world.next_offset + 10, t))
    return whole.world.claims[KEY], compacted.claims[KEY]


def _position(state: ClaimState) -> int | None:
    return resume_offset(state, Mode.AMO)


def test_a_replaced_instances_reservation_landing_after_the_takeover_is_above_the_floor() -> None:
    """a reserves to 120, b takes over at 120, a's reservation to 130 lands after: the whole
    log stays at 120 (no floor); the compacted estimate is 130, its floor 120."""
    history = [(100, hb("c", 100, inst=A)), (200, reserve("c", 120, inst=A)),
               (300, hb("c", 120, inst=B)), (350, reserve("c", 130, inst=A))]  # fmt: skip
    whole, compacted = _folds(history)
    assert (_position(whole), whole.estimate_floor) == (120, None)
    assert (_position(compacted), compacted.estimate_floor) == (130, 120)


def test_the_holders_own_reservation_past_the_refused_end_lifts_the_floor() -> None:
    """Once the new instance reserves past the refused end, the estimate passes nothing."""
    history = [(100, hb("c", 100, inst=A)), (300, hb("c", 100, inst=B)),
               (350, reserve("c", 130, inst=A)), (400, reserve("c", 140, inst=B))]  # fmt: skip
    _, compacted = _folds(history)
    assert (_position(compacted), compacted.estimate_floor) == (140, None)


def test_an_instance_that_writes_on_past_2hb_after_it_seemed_replaced_was_not() -> None:
    """b's heartbeat then a's: a may be the refused one (a zombie of an earlier tenure) and b
    the holder; b's reservation is under the floor only while b could be a zombie, within
    2*HB; b heard from later proves the inference wrong, and the floor goes."""
    history = [(100, hb("c", 120, inst=B)), (200, hb("c", 120, inst=A)),
               (300, reserve("c", 130, inst=B))]  # fmt: skip
    _, compacted = _folds(history)
    assert compacted.estimate_floor == 120
    later = 200 + 2 * HB + 1
    world = World(Log().config, 0)
    for offset, (t, msg) in enumerate([*history, (later, hb("c", 130, inst=B))]):
        fold(world, record(msg, offset + 10, t))
    assert (_position(world.claims[KEY]), world.claims[KEY].estimate_floor) == (130, None)


def test_a_claim_by_the_replaced_instance_lets_its_records_count_again() -> None:
    """A replaced instance may hold the claim again (a release or a lapse the whole log saw):
    after a claim of its own its reservations count."""
    history = [(100, hb("c", 100, inst=A)), (200, hb("c", 100, inst=B)),
               (300, claim("c", inst=A)), (400, reserve("c", 130, inst=A))]  # fmt: skip
    _, compacted = _folds(history)
    assert (_position(compacted), compacted.estimate_floor) == (130, None)


def test_the_floor_survives_a_win_and_goes_with_the_first_heartbeat_at_the_estimate() -> None:
    """The claim won after 2*HB of silence is certain again and keeps its floor for the winner
    (which reports what it passes over); the winner's first heartbeat at the estimate ends it."""
    history = [(100, hb("c", 100, inst=A)), (300, hb("c", 100, inst=B)),
               (350, reserve("c", 130, inst=A))]  # fmt: skip
    world = World(Log().config, 0)
    won = 350 + 2 * HB + 1
    later = [(won, claim("d")), (won + 10, hb("d", 130))]
    states = []
    for offset, (t, msg) in enumerate([*history, *later]):
        fold(world, record(msg, offset + 10, t))
        states.append((world.claims[KEY].certain, world.claims[KEY].estimate_floor))
    assert states[-2:] == [(True, 100), (True, None)]


def test_two_heartbeats_of_the_new_instance_below_a_reservation_show_it_refused() -> None:
    """The takeover erased (the cleaner's cut between it and a's refused reservation, seed
    870072): b's heartbeats after it carry 329, below the reservation's end; a holder whose
    fold had accepted it would carry 333 from its second heartbeat on. Floor 329."""
    history = [(100, reserve("c", 333, inst=A)), (200, hb("c", 329, inst=B)),
               (700, hb("c", 329, inst=B))]  # fmt: skip
    world = World(Log().config, 0)
    floors = []
    for offset, (t, msg) in enumerate(history):
        fold(world, record(msg, offset + 10, t))
        floors.append(world.claims[KEY].estimate_floor)
    assert floors == [None, None, 329]
    assert _position(world.claims[KEY]) == 333


def test_a_takeover_carrying_an_older_read_then_the_position_is_no_refusal() -> None:
    """A takeover heartbeat carries what its writer read before (below a reservation accepted
    meanwhile); the next heartbeat carries the position at the takeover: no floor."""
    history = [(100, reserve("c", 333, inst=A)), (200, hb("c", 321, inst=B)),
               (700, hb("c", 333, inst=B))]  # fmt: skip
    world = World(Log().config, 0)
    for offset, (t, msg) in enumerate(history):
        fold(world, record(msg, offset + 10, t))
    assert world.claims[KEY].estimate_floor is None


def test_a_reservation_landing_past_every_lease_is_above_the_floor() -> None:
    """a froze past its lease; its last reservation, written inside it, landed more than 2*HB
    after its last heartbeat, with nothing between that refreshes a lease (marshal-sim seed
    3631003): the whole log refuses it (stale) and stays at 120; the compacted estimate is
    130, its floor 120."""
    late = 100 + 2 * HB + 50
    history = [(100, hb("c", 100, inst=A)), (200, reserve("c", 120, inst=A)),
               (late, hb("c", 120, inst=A)), (late, reserve("c", 130, inst=A))]  # fmt: skip
    whole, compacted = _folds(history)
    assert (_position(whole), whole.estimate_floor) == (120, None)
    assert (_position(compacted), compacted.estimate_floor) == (130, 120)


def test_a_heartbeat_past_every_lease_refreshes_nothing() -> None:
    """a's heartbeat past the lapse is refused too, so its reservation after it still is: the
    floor stays where the whole log's position is."""
    late = 100 + 2 * HB + 50
    history = [(100, hb("c", 100, inst=A)), (late, hb("c", 120, inst=A)),
               (late + 10, reserve("c", 130, inst=A))]  # fmt: skip
    whole, compacted = _folds(history)
    assert (_position(whole), whole.estimate_floor) == (100, None)
    assert (_position(compacted), compacted.estimate_floor) == (130, 100)


def test_a_claim_after_the_lapse_lets_the_records_count_again() -> None:
    """a claims again after its lease lapsed (the whole log grants it: stale): its reservation
    after that is accepted, and there is no floor."""
    late = 100 + 2 * HB + 50
    history = [(100, hb("c", 100, inst=A)), (late, claim("c", inst=A)),
               (late + 10, reserve("c", 130, inst=A))]  # fmt: skip
    whole, compacted = _folds(history)
    assert (_position(whole), whole.estimate_floor) == (130, None)
    assert (_position(compacted), compacted.estimate_floor) == (130, None)


def test_a_gap_between_may_hide_a_heartbeat() -> None:
    """A gap between the heartbeat and the late reservation: the cleaner may have erased a
    heartbeat or claim in it, so nothing is inferred."""
    late = 100 + 2 * HB + 50
    world = World(Log().config, 0)
    fold(world, record(hb("c", 100, inst=A), 10, 100))
    fold(world, record(reserve("c", 130, inst=A), 12, late))  # (offset 11 erased)
    assert (_position(world.claims[KEY]), world.claims[KEY].estimate_floor) == (130, None)


def test_heartbeats_past_every_lease_show_no_reservation_refused() -> None:
    """b's two heartbeats below a's reservation come more than 2*HB after the claim's newest
    heartbeat: the whole log refuses them (stale) and keeps a's reservation, so they show
    nothing about it, and there is no floor (a review of `_lapsed`)."""
    history = [(1000, hb("c", 100, inst=A)), (1500, reserve("c", 130, inst=A)),
               (3600, hb("c", 100, inst=B)), (3700, hb("c", 100, inst=B))]  # fmt: skip
    whole, compacted = _folds(history)
    assert _position(whole) == 130
    assert (_position(compacted), compacted.estimate_floor) == (130, None)
