"""The simulator's checker on hand-made histories: `fold_agreement` judges a compacted
reader's resume position by what children did (the cleaner's erased positions: seeds 70, 177, 178 of
freeze + eager-compaction), never by the whole log's position alone."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from marshal_workers.protocol.amolosses import AmoLoss
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import ClaimState, RationalizerConfig, World
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.sim.invariants import Checker

ALO, AMO = ClaimKey("g0", "t", 0), ClaimKey("g1", "t", 0)


def checker(**options: Any) -> Checker:
    return Checker({"g0": Mode.ALO, "g1": Mode.AMO}, heartbeat_interval=1.0, speed=100.0, **options)


def world(key: ClaimKey, committed: int, reserved: int | None = None) -> World:
    w = World(RationalizerConfig(1000), 0)
    w.claims[key] = ClaimState(True, "c2", "i3", 40, 0, committed, reserved)
    return w


def child(key: ClaimKey, cid: str) -> Any:
    return SimpleNamespace(key=key, cid=cid, spec=SimpleNamespace(instance_id=cid, fencing_token=1))


def handle(c: Checker, key: ClaimKey, cid: str, offsets: range, t: float) -> None:
    for offset in offsets:
        c.handled(child(key, cid), offset, t)


def test_alo_a_position_above_the_whole_logs_that_was_handled_is_no_skip() -> None:
    """Seed 70: a frozen holder's child handled 10..295, its refused release said 295; a
    compacted reader resumes at 295 while the whole log (the rival restarted at 267) says
    267. Everything below 295 was handled: nothing is skipped."""
    c = checker()
    c.started(ALO, 10)
    handle(c, ALO, "frozen", range(10, 295), 5.0)
    c.agree("reader", world(ALO, 295), world(ALO, 267), at=14.4)
    assert c.violations == []


def test_alo_a_position_above_what_was_handled_is_a_skip() -> None:
    """The same reader, had nobody handled 290..294: a new holder would skip them."""
    c = checker()
    c.started(ALO, 10)
    handle(c, ALO, "frozen", range(10, 290), 5.0)
    handle(c, ALO, "late", range(290, 295), 20.0)  # handled after the reader's moment
    c.agree("reader", world(ALO, 295), world(ALO, 267), at=14.4)
    assert [v["invariant"] for v in c.violations] == ["fold_agreement"]
    assert "handled up to 290" in c.violations[0]["detail"]


def test_amo_a_position_below_the_whole_logs_that_nobody_was_granted_is_no_double() -> None:
    """Seed 178: the frozen holder reserved 309..310 and was never granted it; the rival's
    first heartbeat committed 310; a compacted reader saw only the frozen holder's refused
    release (309). Resuming at 309 grants nothing twice."""
    c = checker()
    c.granted(child(AMO, "frozen"), 309, 11.3)
    c.agree("reader", world(AMO, 309), world(AMO, 310, 310), at=17.5)
    assert c.violations == []


def test_amo_a_position_below_a_granted_batch_is_a_double() -> None:
    """Had the frozen holder's child been granted 309..310, resuming at 309 grants it again."""
    c = checker()
    c.granted(child(AMO, "frozen"), 310, 11.3)
    c.agree("reader", world(AMO, 309), world(AMO, 310, 310), at=17.5)
    assert [v["invariant"] for v in c.violations] == ["fold_agreement"]
    assert "granted up to 310" in c.violations[0]["detail"]


def test_a_grant_after_the_readers_moment_does_not_count() -> None:
    """What the reader is judged by is what was done before its fold was taken."""
    c = checker()
    c.granted(child(AMO, "later"), 310, 18.0)
    c.agree("reader", world(AMO, 309), world(AMO, 310, 310), at=17.5)
    assert c.violations == []


def test_holders_and_tokens_still_agree_exactly() -> None:
    """A certain claim held by another instance than the whole log's is a violation."""
    c = checker()
    mine, theirs = world(ALO, 10), world(ALO, 10)
    theirs.claims[ALO].holder_instance = "i9"
    c.agree("reader", mine, theirs, at=1.0)
    assert [v["invariant"] for v in c.violations] == ["fold_agreement"]


def test_alo_a_rehandle_bound_counts_the_handlers_work_not_its_hosts_stall() -> None:
    """Seed 150030 of `poison,failures,stall` at a 0.2 fail rate: a holder handled offset 365
    at 13.60, its host stopped with its clocks from 13.85 to 16.30 (no record landed meanwhile:
    nothing showed the stop), its child handled on to 16.55, and the next holder resumed at
    365. 2.95 s of wall time, 0.5 s of the handler's work: within the bound of 2*HB + 0.5 s."""
    c = checker(stopped=stopped_between)
    handle_at(c, ALO, "stalled", [(365, 13.60), (366, 13.80), (367, 16.35), (400, 16.55)])
    handle_at(c, ALO, "rival", [(365, 17.0)])
    assert c.violations == []


def test_alo_a_rehandle_past_the_bound_in_the_handlers_work_is_still_a_violation() -> None:
    """The same handling with the host running throughout (or its stop elsewhere in time):
    2.95 s of the handler's work before it stopped, past 2*HB + 0.5 s."""
    for stopped in (lambda i, s, e: 0.0, lambda i, s, e: stopped_between(i, s + 10, e + 10)):
        c = checker(stopped=stopped)
        handle_at(c, ALO, "stalled", [(365, 13.60), (366, 13.80), (367, 16.35), (400, 16.55)])
        handle_at(c, ALO, "rival", [(365, 17.0)])
        assert [v["invariant"] for v in c.violations] == ["alo_rehandle_bound"]


def stopped_between(instance: str, start: float, end: float) -> float:
    """The host of "stalled" stopped 13.85..16.30; every other host ran."""
    if instance != "stalled":
        return 0.0
    return max(0.0, min(end, 16.30) - max(start, 13.85))


def handle_at(c: Checker, key: ClaimKey, cid: str, marks: list[tuple[int, float]]) -> None:
    for offset, t in marks:
        c.handled(child(key, cid), offset, t)


def test_amo_a_write_in_flight_at_the_end_holds_its_records_and_no_others() -> None:
    """A reservation a live member still has in flight when the run ends (its verdict grants
    or reports it): its records are in hand. A record outside it, handled by nobody and
    reported by nobody, is still reported as such."""
    for in_flight, unreported in (((6, 7), False), ((7, 7), True)):
        c = checker()
        c.started(AMO, 0)
        for offset in range(6):
            c.handled(child(AMO, "c"), offset, 1.0)
        c.deciding(AMO, *in_flight)
        c.finish({0: world(AMO, 7)}, [], {}, {})
        assert ("amo_loss_reported" in [v["invariant"] for v in c.violations]) is unreported


def test_amo_a_loss_at_a_raised_handlers_end_must_name_the_handler() -> None:
    """`amo-poison`: a child ended with exit 4 (its handler raised under `stop`); the loss its
    member reports with that end names the handler, or the report is a violation (a review
    found `crash` there: the metric sent operators to look for a crash)."""
    c = checker()
    c.lost_reported(AMO, 130, 200, cause="handler_failed", ended=4)
    c.lost_reported(AMO, 230, 260, cause="handler_failed", ended=10)  # the handler deadline
    c.lost_reported(AMO, 300, 320, cause="crash", ended=-9)
    c.lost_reported(AMO, 320, 330, cause="lease_expired", ended=5)
    c.lost_reported(AMO, 330, 340, cause="refused", ended=4)  # (not the end's own loss)
    assert c.violations == []
    c.lost_reported(AMO, 400, 410, cause="crash", ended=4)
    c.lost_reported(AMO, 500, 510, cause="handler_failed", ended=-9)
    details = [v["detail"] for v in c.violations]
    assert [v["invariant"] for v in c.violations] == ["amo_loss_reported"] * 2
    assert "400..410 reported lost to crash by a child that ended with exit 4" in details[0]
    assert "500..510 reported lost to handler_failed" in details[1]


def test_amo_a_failed_record_counts_no_failure_for_parking_but_is_never_tried_again() -> None:
    """In AMO a failing record is lost, not tried again: nothing counts its failure in the log
    (the checker once said `poison_bounded` of every AMO failure), and a second attempt, or a
    handling after the failure, is a double."""
    c = checker()
    c.failed(child(AMO, "a"), 7, 1.0)
    c.finish(reference={}, readers=[], noted={}, faults={})
    assert c.violations == []
    c.failed(child(AMO, "b"), 7, 2.0)
    c.handled(child(AMO, "b"), 7, 3.0)
    assert [v["invariant"] for v in c.violations] == ["amo_no_double_grant"] * 2


def stopped_child(cid: str, token: int, stopped_at: int | None, asked_end: int) -> Any:
    """An AMO child of node ``n1`` that ended at ``stopped_at`` (None: not at a boundary)
    having asked up to ``asked_end``."""
    return SimpleNamespace(
        key=AMO, cid=f"n1/{cid}", spec=SimpleNamespace(
            instance_id="i1", fencing_token=token, granted_until=None, batch_size=100,
            amo_window=400,
        ),
        position=stopped_at if stopped_at is not None else 120, asked_end=asked_end,
        stopped_at=stopped_at, refused=None, ready_at=0.0, feed_lost_at=None,
    )  # fmt: skip


def lease_stop_run(*, next_token: int | None, shown: str | None = "taken_over",
                   given_up: bool = False, never_ready: bool = False) -> list[str]:  # fmt: skip
    """A child of tenure 7 handled 0..120 and stopped at 120 for its lease (TERM) at t=5
    having asked up to 150; ``next_token``: a child started after it (ready at t=6) under that
    token; ``shown``: the cause of the loss the log shows over 118..150 (the holder's last
    reservations), if any; 120..150 is handled by nobody. ``never_ready``: that child, handed
    120..150, was stopped for the lease too, at t=5.9, before it was ready."""
    c = checker()
    c.started(AMO, 0)
    first = stopped_child("first", 7, 120, 150)
    handle(c, AMO, first.cid, range(120), 1.0)
    c.died(first, -15, 5.0)
    if next_token is not None and never_ready:
        later = stopped_child("next", next_token, 120, 150)
        later.ready_at = 6.0
        c.died(later, -15, 5.9)
    elif next_token is not None:
        later = stopped_child("next", next_token, None, 150)
        later.position, later.ready_at = 150, 6.0
        c.in_progress(later)
    if given_up:
        c.lost_reported(AMO, 120, 150, ("i1", 7), cause="refused", given_up=True)
    else:
        c.lost_reported(AMO, 120, 150, cause="lease_expired")
    log = [] if shown is None else [AmoLoss(AMO, "c1", "i1", 7, 118, 150, shown, 1, 5000, None)]
    c.finish({0: world(AMO, 150, 150)}, [], {}, {}, log)
    return [v["invariant"] for v in c.violations]


def test_amo_a_stop_for_the_lease_is_a_crash_only_where_its_tenure_ended_in_one() -> None:
    """A CI chaos run: the member TERMed its child as its lease was ending, the late verdict
    extended the lease, and the next child under the same token started past what the first
    had been granted (974..1024 lost, no crash). The checker counts such a stop as a crash
    only where its tenure started no child after it and the log shows a crash's loss over
    what it left (the claim taken over, gone stale, refused or replaced: what the audit and
    an AMO chaos test accept), or the records went to a write given up on (a fault);
    otherwise the records left are lost in no crash: a tenure that went on hands them to its
    next child, and a release over them says they were handled (marshal-sim seed 5200003)."""
    assert lease_stop_run(next_token=7) == ["amo_loss_only_on_crash"]
    assert lease_stop_run(next_token=None) == []
    assert lease_stop_run(next_token=8) == []  # another tenure: the first one ended
    assert lease_stop_run(next_token=None, shown=None) == ["amo_loss_only_on_crash"]
    assert lease_stop_run(next_token=None, shown="lease_expired") == []
    assert lease_stop_run(next_token=None, shown="released") == ["amo_loss_only_on_crash"]
    assert lease_stop_run(next_token=7, given_up=True) == []


def test_amo_a_child_stopped_before_it_was_ready_does_not_carry_its_tenure_on() -> None:
    """marshal-sim seed 7920281 of `failures,read-latency,restart,pause,partitions,stall`, 8
    faults at 0.3: a child stopped for its lease at 315 of 315..320, the child started for
    that carry was TERMed for the lease as well before it was ready, and the claim went stale
    (the log shows 314..320 lost as its holder's tenure was taken over). The checker took the
    second child's time of readiness, which it never reached, for a later child of the tenure
    (the tenure went on), excused neither stop, and reported 315..320 lost in no crash. A
    child counts as the tenure going on only if it was ready before it ended."""
    assert lease_stop_run(next_token=7, never_ready=True) == []
    assert lease_stop_run(next_token=7, never_ready=True, shown=None) == ["amo_loss_only_on_crash"]
