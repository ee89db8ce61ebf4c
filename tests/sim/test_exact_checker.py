"""The checker reports what is a violation and nothing else (a review found most of its raw
violations were false positives), and the replay line it prints runs the same fleet.

Each false positive is a scripted run the checker must accept, and failed before its fix; each
true violation the review's repros found stays a run the checker must reject."""

from __future__ import annotations

import dataclasses
import json
import shlex
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from marshal_workers.core.children import Children
from marshal_workers.core.heldclaim import HeldClaim
from marshal_workers.core.keeping import Keeping
from marshal_workers.core.member import Member
from marshal_workers.ipc import messages as ipc
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import ClaimState, RationalizerConfig, World
from marshal_workers.protocol.recordfailures import (
    Action,
    Outcome,
    PoisonMessage,
    PoisonResolved,
    RecordFailed,
    encode_poison,
    poison_record_key,
)
from marshal_workers.protocol.wire import (
    ClaimingPartition,
    ClaimKey,
    Heartbeat,
    Message,
    coordination_partition,
    encode,
    record_key,
)
from marshal_workers.sim import convergence as convergence_module
from marshal_workers.sim import wholelog
from marshal_workers.sim.children import SimChild
from marshal_workers.sim.cli import main, summarize
from marshal_workers.sim.convergence import CHECK_WINDOW_S, FAILURES_RECOVERY_HB
from marshal_workers.sim.faults import ADMIN
from marshal_workers.sim.invariants import Checker, tenure
from marshal_workers.sim.node import SimNode
from marshal_workers.sim.params import SimParams
from marshal_workers.sim.scenario import Fleet, RunResult, run_seed
from tests.sim.conftest import beats_every_turn, first_violation, lets_go_at_the_lease_end

SPARSE_KEYS = SimParams(faults=(), ordering="key", workers_per_partition=8)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_key_slice_that_gets_a_record_every_few_seconds_is_idle_not_stuck(seed: int) -> None:
    """Key/8: slices that no key hashes to take only keyless records (one in 56, one every
    2.8 s at 20 records/s), and liveness wanted one handled within 2 s: a fault-free fleet
    was reported not converged (seeds 1 and 2). Liveness is judged on records available and
    not handled."""
    assert run_seed(SimParams(**{**vars_of(SPARSE_KEYS), "seed": seed})).violations == []


def test_a_slice_with_records_available_and_not_handled_is_still_stuck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same fleet with one slice's children wedged from 5 s on (they hold their claim and
    handle nothing, though records of theirs are produced): liveness is violated."""
    handle = SimChild._handle_alo

    def wedged(self: SimChild, t: float) -> None:
        if self.key.topic.endswith("key.1of8") and t > 5.0:
            return
        handle(self, t)

    monkeypatch.setattr(SimChild, "_handle_alo", wedged)
    result = run_seed(SimParams(**{**vars_of(SPARSE_KEYS), "seed": 1, "groups": 1}))
    assert [v["invariant"] for v in result.violations] == ["liveness"]


def test_the_replay_line_runs_the_same_fleet() -> None:
    """A violation's replay line kept only --seed and the cut, so a replay ran another fleet
    (members, groups, faults, fail rate dropped). It names every parameter of the run."""
    params = SimParams(
        seed=7,
        members=4,
        groups=1,
        partitions=5,
        duration=12.0,
        faults=("poison", "failures"),
        fault_count=4,
        ordering="key",
        workers_per_partition=3,
        fail_rate=0.2,
        operator_skips=0.25,
    )
    found = RunResult(7, [{"invariant": "liveness", "detail": "", "t": None}], None, [], 0, 0)
    line = summarize([found], params, 0.0)["violations"][0]["replay"]
    args = shlex.split(line)
    assert args[0] == "marshal-sim"
    out = CliRunner().invoke(main, [*args[1:], "--json"])
    summary = json.loads(out.output.splitlines()[-1])
    got = summary["params"]
    want = {
        "members": 4,
        "groups": 1,
        "partitions": 5,
        "duration_s": 12.0,
        "heartbeat_interval_s": 1.0,
        "faults": ["poison", "failures"],
        "fault_count": 4,
        "fail_rate": 0.2,
        "operator_skips": 0.25,
        "ordering": "key",
        "workers_per_partition": 3,
    }
    assert {k: got.get(k) for k in want} == want
    assert summary["records_handled"] == run_seed(params).handled


def test_a_hosts_stall_is_not_its_handlers_work() -> None:
    """Seed 150030 of `poison,failures,stall` at a 0.2 fail rate (one group of 4): every host
    stopped at once with its clocks held, nothing landed for 2.8 s, and a holder's child
    handled 0.25 s before its host stopped and 0.25 s after. `alo_rehandle_bound` counted the
    stop as the handler's work (2.95 s, past 2*HB + 0.5 s)."""
    params = SimParams(
        seed=150030,
        members=4,
        groups=1,
        faults=("poison", "failures", "stall"),
        fail_rate=0.2,
        fault_count=6,
    )
    assert run_seed(params).violations == []


LAGGING_FAILURES = SimParams(faults=("failures", "read-latency"), fail_rate=0.3, fault_count=8)


def test_a_childs_end_its_member_has_not_read_when_the_run_ends_is_in_hand() -> None:
    """Seed 22 of `failures,read-latency` at 0.3: in the run's last step a child was granted
    its last batch and TERMed as its lease ended; its member reads the exit, and reports the
    batch lost, in its next turn, which the end cut off. The checker reported the record as
    lost and said by nobody."""
    assert run_seed(SimParams(**{**vars_of(LAGGING_FAILURES), "seed": 22})).violations == []


def test_a_reservation_in_flight_when_the_run_ends_is_in_hand() -> None:
    """Seed 153021 of `failures,read-latency,kill,stall` at 0.3: a child TERMed as its lease
    ended while its last request's write was written again; the write's verdict (the asker
    has ended: reported lost) came after the end. The checker reported the record as lost
    and said by nobody."""
    params = SimParams(
        seed=153021,
        faults=("failures", "read-latency", "kill", "stall"),
        fail_rate=0.3,
        fault_count=8,
    )
    assert run_seed(params).violations == []


EVERY_FAULT = (  # `make sim`'s every fault
    *("kill", "freeze", "stall", "restart", "twins", "compaction", "eager-compaction"),
    *("latency", "clock", "failures", "pause", "partitions", "shared-ids", "poison", "forgery"),
)


def test_a_holder_started_from_a_compacted_estimate_under_the_eager_cleaner() -> None:
    """Seed 157023 of the unordered/4 every-fault mix: a replaced holder's reservation, refused
    by the whole log, was kept by a cleaner below the safe window, and a member that joined
    after it took its end for the claim's position and started above the whole log's: the
    record between was reserved by nobody the whole log accepted, and no reader of the
    compacted log can tell (AMO loss under that cleaner is outside the guarantees). The
    checker reported it as lost and said by nobody."""
    params = SimParams(
        seed=157023,
        faults=EVERY_FAULT,
        fault_count=6,
        ordering="unordered",
        workers_per_partition=4,
    )
    assert run_seed(params).violations == []


def test_a_start_above_the_whole_logs_position_is_exempt_only_under_the_eager_cleaner() -> None:
    """Without the eager cleaner, a holder that starts above the whole log's position passes
    over records nobody reports: still `amo_loss_reported`."""
    key = ClaimKey("g1", "tg1", 0)
    for eager, unreported in ((False, True), (True, False)):
        checker = Checker({"g1": Mode.AMO}, heartbeat_interval=1.0, speed=200.0)
        checker.eager_compaction = eager
        checker.started(key, 0)
        checker.holder_started(key, 5, whole_log_at=4)
        for offset in (0, 1, 2, 3, 5):
            checker.handled(amo_child(key), offset, 1.0)
        world = World(RationalizerConfig(1000), 0)
        world.claims[key] = ClaimState(True, "c2", "i3", 40, 0, 6, None)
        checker.finish({0: world}, [], {}, {})
        found = [v["invariant"] for v in checker.violations]
        assert ("amo_loss_reported" in found) is unreported, found


def amo_child(key: ClaimKey) -> SimChild:
    return SimpleNamespace(  # type: ignore[return-value]
        key=key, cid="c", spec=SimpleNamespace(instance_id="i1", fencing_token=1)
    )


def test_churn_under_30_percent_of_writes_failing_is_not_a_wedge() -> None:
    """Seed 84 of `failures,read-latency,stall` at 0.3: after the bound some claim was always
    recovering a lease lost to failing writes (each within about 2 s), so the fleet was
    converged at none of the window's checks, and `liveness` was reported. Under lasting
    failures it judges how long each problem lasts (`convergence.Recovering`)."""
    params = SimParams(
        seed=84, faults=("failures", "read-latency", "stall"), fail_rate=0.3, fault_count=8
    )
    assert run_seed(params).violations == []


# the mix of seed 1608056 (docs/simulator.md); seed 1880255: a release of
# `tg1+unordered.0of4/7` that did not land (1880131 was, until an AMO child whose feed is lost
# hands on its asked runs first: that re-rolled the seed; 1880255 found in 1880100-1880279)
LOST_RELEASE_MIX = SimParams(
    seed=1880413,
    faults=("feed-loss", "failures", "read-latency", "stall"),
    fail_rate=0.3,
    fault_count=8,
    ordering="unordered",
    workers_per_partition=4,
)


def test_a_spell_of_exactly_the_bound_is_within_it_wherever_the_clock_stands() -> None:
    """Seed 1820006 of `feed-loss,failures,read-latency,stall` at 0.3 (unordered/4): a slice
    not fine from the check at 29.45 s to the one at 32.45 s, 12 checks of 0.25 s, was reported
    as a wedge: in floats 32.45 - 29.45 is 3.0000000000000036, past the 3*HB bound (a review;
    13.0 - 10.0 is exactly 3.0 and passed). Kept as a clean run: a release of that slice was
    lost in the spell too, so the lost-release allowance now passes it even without the
    rounding; `test_a_spell_is_judged_by_its_checks` pins the rounding."""
    assert run_seed(dataclasses.replace(LOST_RELEASE_MIX, seed=1820006)).violations == []


@pytest.mark.parametrize(("checks", "within"), [(12, True), (13, False)])
@pytest.mark.parametrize("start", [29.45, 10.0, 17.15])
def test_a_spell_is_judged_by_its_checks(start: float, checks: int, within: bool) -> None:
    """`Recovering` with a 3 s bound: a problem seen at the check at ``start`` and ``checks``
    0.25 s checks after it (the run's clock, a sum of 0.05 s steps) lasted ``checks`` / 4 s."""
    recovering = convergence_module.Recovering()
    t = start
    for _ in range(checks + 1):
        recovering.checked({"tg0/1": "not moving"}, t, in_window=True)
        for _ in range(5):
            t += 0.05
    assert recovering.within(3.0) is within


@pytest.mark.parametrize("recorded", [True, False])
def test_a_claim_waiting_out_its_lost_release_is_not_a_wedge(
    monkeypatch: pytest.MonkeyPatch, recorded: bool
) -> None:
    """Seed 1880131 at a 0.3 fail rate (now 1880413: changes re-rolled the seeds, 1880255,
    then 1880332 with the hand-over of what a child stopped for its lease had not started, then
    1880413, the first of 1880333-1880413 met the same way, since a heartbeat that went on a
    short lease is not written again on every turn; there a slice is not moving for 3.2 s
    unless its lost release is counted): a slice's child ended as its lease ran out (its
    heartbeats failing), a heartbeat sent just before landed, and the member's release did not.
    The member does not write a release again (docs/design.md), so the claim stayed valid in
    the log 2*HB after that heartbeat, then was claimed (one claim write failing): not fine for
    3.2 s against the 3*HB bound, which counts a lost lease's stale margin only. A claim whose
    release did not land in its spell may last longer by the lease it had left when the release
    was sent (`SimNode.releases_lost`); recorded as none left, the wedge is reported. Since a
    claim whose child stopped as its lease was ending waits for the lease's verdicts, none of
    1880414-1880713 meets the path: the row lets such a claim go at once, as then
    (`lets_go_at_the_lease_end`)."""
    lets_go_at_the_lease_end(monkeypatch)
    if not recorded:
        append = SimNode._append

        def none_left(self: SimNode, c: Any, t: float) -> None:
            append(self, c, t)
            for key, (sent, _) in self.releases_lost.items():
                self.releases_lost[key] = (sent, 0.0)

        monkeypatch.setattr(SimNode, "_append", none_left)
    found = [v for v in run_seed(LOST_RELEASE_MIX).violations if v["invariant"] == "liveness"]
    if recorded:
        assert found == []
    else:
        assert found and "longest: tg1+unordered.1of4/7 " in str(found[0]["detail"]), found


@pytest.mark.parametrize("counted", [True, False])
def test_a_lost_release_allows_the_lease_its_last_heartbeats_prove(
    monkeypatch: pytest.MonkeyPatch, counted: bool
) -> None:
    """Seed 1608132 of the same mix: a slice's child was stopped as its lease was ending (its
    heartbeats failing); while it stopped, the member wrote three heartbeats (a reservation in
    flight, less than HB of lease left: each turn's heartbeat goes at once), which landed, and
    then its release, which did not. The member forgot the claim before their verdicts came, so
    the lease it had left when the release was sent was 0.1 s, while the log held the claim 2*HB
    after the last of them: not fine for 3.2 s, reported as 0.1 s past the bound though nothing
    was wedged. The allowance is the lease the log may grant when the release is sent: the
    member's, or that of its last heartbeat sent that lands, whichever is later
    (`LostReleases.beats`); counted from the member's alone, the spell is reported. Those
    heartbeats on every turn were a defect of the member, fixed since (2026-12-03): the row
    replays the seed with the member's heartbeats as they were (`beats_every_turn`: since, none
    of 1608133-1608432 is reported with the allowance counted from the member's lease alone);
    one heartbeat that lands after its member forgot the claim still asks this of the checker.
    The claim whose child stopped as its lease was ending is let go at once, as it was then
    (`lets_go_at_the_lease_end`): it now waits for the lease's verdicts."""
    monkeypatch.setattr(Keeping, "waits_for_reservation", beats_every_turn)
    lets_go_at_the_lease_end(monkeypatch)
    if not counted:
        append = SimNode._append

        def unproven(self: SimNode, c: Any, t: float) -> None:
            self.lost_releases.beats.clear()
            append(self, c, t)

        monkeypatch.setattr(SimNode, "_append", unproven)
    found = [
        v
        for v in run_seed(dataclasses.replace(LOST_RELEASE_MIX, seed=1608132)).violations
        if v["invariant"] == "liveness"
    ]
    if counted:
        assert found == []
    else:
        assert found and "longest: tg1+unordered.3of4/6 " in str(found[0]["detail"]), found


@pytest.mark.parametrize(
    ("lasted", "lost", "within"),
    [
        (4.5, (10.0, 1.6), True),  # a release lost as the spell began, 1.6 s of lease left
        (4.5, (9.6, 1.6), True),  # sent just before the check that first saw the child gone
        (4.5, (12.0, 1.6), True),  # sent during the spell (a release that waited)
        (4.75, (10.0, 1.6), False),  # the lease it had left and no more
        (4.5, (10.0, 0.0), False),  # none left (sent as the lease ended): the common bound
        (4.5, (8.0, 1.6), False),  # a release lost before the spell is not its cause
        (4.5, None, False),  # no release lost: the common bound
    ],
)
def test_a_lost_release_allows_its_claim_the_lease_it_had_left(
    lasted: float, lost: tuple[float, float] | None, within: bool
) -> None:
    """`Recovering` with a 3 s bound, for a claim not fine from 10 s: one whose release did not
    land in its spell waits for it to go stale, the lease it had left longer than a lease lost
    to failing writes; judged at the spell's last check, in the window."""
    recovering = convergence_module.Recovering()
    releases = {} if lost is None else {"tg0/1": lost}
    t = 10.0
    while t <= 10.0 + lasted + 1e-9:
        recovering.checked({"tg0/1": "not moving"}, t, in_window=True, releases_lost=releases)
        t += 0.25
    assert recovering.within(3.0) is within
    allowed = lost is not None and lost[0] >= 9.5 and lost[1] > 0
    assert ("more allowed" in recovering.describe()) is allowed


def test_a_wedge_under_lasting_write_failures_is_still_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The children of one ALO partition hold their claim and handle nothing from 5 s on,
    under 20% of writes failing: one problem lasts, past the bound on recovering one."""
    handle = SimChild._handle_alo

    def wedged(self: SimChild, t: float) -> None:
        if self.key == ClaimKey("g0", "tg0", 0) and t > 5.0:
            return
        handle(self, t)

    monkeypatch.setattr(SimChild, "_handle_alo", wedged)
    result = run_seed(SimParams(seed=1, faults=("failures",), fail_rate=0.2))
    found = [v for v in result.violations if v["invariant"] == "liveness"]
    assert found and "longest: tg0/0 " in str(found[0]["detail"]), found


def test_a_child_crashing_in_a_loop_under_lasting_write_failures_is_still_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A review: every grant request of one AMO claim is refused 1.5 s after it is asked, so
    its child exits and restarts for ever and the claim never moves. Judged by what was wrong
    (held by no live child, then not moving, then again), no problem outlasted the bound, and
    2% of writes failing hid the wedge; judged by the claim, it is not fine for good."""
    refusals: list[tuple[float, Keeping, ClaimKey, int, int]] = []
    ask, keep = Children.grant_request, Keeping.keep

    def refused_late(self: Children, held: HeldClaim, req: ipc.GrantRequest, now: float) -> None:
        if held.key != ClaimKey("g1", "tg1", 0):
            ask(self, held, req, now)
            return
        refusals.append((now + 1.5, self.keeping, held.key, held.child_no, req.request_id))

    def keeping(self: Keeping, held: HeldClaim, now: float) -> None:
        for due in [r for r in refusals if r[1] is self and r[2] == held.key and r[0] <= now]:
            refusals.remove(due)
            if due[3] == held.child_no:
                self.tell(held.key, ipc.Grant(due[4], False, "refused late"))
        keep(self, held, now)

    monkeypatch.setattr(Children, "grant_request", refused_late)
    monkeypatch.setattr(Keeping, "keep", keeping)
    result = run_seed(SimParams(seed=1, faults=("failures",)))
    found = [v for v in result.violations if v["invariant"] == "liveness"]
    assert found and "longest: tg1/0 " in str(found[0]["detail"]), result.violations


def test_children_handling_on_after_a_stall_the_wall_clock_counted_break_the_rehandle_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A review: the rehandle bound excused every stall, so with the member never acting on a
    lease clock that stood still, its children handled on after a suspend the wall clock
    counted and nothing reported it. Only a stall with every clock held is excused (nothing
    shows it until a record of the log does)."""
    monkeypatch.setattr(Member, "_check_clock", lambda self, lost, now, seen_by: None)
    params = SimParams(faults=("stall",), fault_count=4)
    assert first_violation(params, "alo_rehandle_bound", 10) is not None


def test_a_fault_still_to_come_keeps_the_bound_from_counting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The liveness bound counts from the last fault's end. A check after `settle` from the
    last fault begun so far, with one still to come, counted as after the bound: a fleet
    converged then and wedged by the late fault was never reported."""
    wedge = {"on": False}
    handle = SimChild._handle_alo

    def wedged(self: SimChild, t: float) -> None:
        if self.key == ClaimKey("g0", "tg0", 0) and wedge["on"]:
            return
        handle(self, t)

    monkeypatch.setattr(SimChild, "_handle_alo", wedged)
    fleet = Fleet(SimParams(seed=1, faults=()))

    def late_fault() -> None:
        wedge["on"] = True
        fleet.window(0.1)

    fleet.schedule_faults = lambda: fleet.at(20.0, "wedge", late_fault)  # type: ignore[method-assign]
    found = [v["invariant"] for v in fleet.run().violations]
    assert found == ["liveness"]


def vars_of(params: SimParams) -> dict[str, object]:
    return {name: getattr(params, name) for name in params.__dataclass_fields__}


def test_two_failures_written_with_the_same_bytes_are_two() -> None:
    """Seed 749 of the all-faults mix (6 faults): after an operator's retry a member counted
    two failures of a record from a fold that had not seen the first, in the same second:
    two RecordFailed with the same bytes. The checker took the second for the first written
    again and reported the member's failure as never counted. A count written again after a
    failed write is still one failure."""
    fleet = Fleet(SimParams(faults=(), groups=2))
    key = ClaimKey("g0", "tg0", 2)
    home = coordination_partition(key.topic, key.partition, fleet.log.num_partitions)

    def land(message: Message | PoisonMessage, t: float) -> None:
        if isinstance(message, RecordFailed | PoisonResolved):
            fleet.log.land(home, poison_record_key(message), encode_poison(message), t)
        else:
            fleet.log.land(home, record_key(message), encode(message), t)

    fields = ("i7", "c1", key.group, key.topic, key.partition)

    def failed(sec: int, count: int) -> RecordFailed:
        return RecordFailed(sec, *fields, 342, count, Outcome.RETRY, "PoisonError: on purpose")

    first, second = failed(10, 1), failed(11, 2)
    retry = PoisonResolved(15, "admin-i", ADMIN, key.group, key.topic, key.partition, 342,
                           Action.RETRY)  # fmt: skip
    history: list[tuple[float, Message | PoisonMessage]] = [
        (10.0, ClaimingPartition(10, *fields)),
        *((t + 0.05, Heartbeat(t, *fields, 342)) for t in range(10, 17)),
        (14.9, first),
        (15.1, first),  # the same failure, written again after a timeout
        (15.4, retry),
        (15.6, second),
        (16.2, second),  # another failure, with the same bytes
    ]
    for t, message in sorted(history, key=lambda h: h[0]):
        land(message, t)
    fleet.failures_written = {("i7", encode_poison(first)): 1, ("i7", encode_poison(second)): 2}
    fleet.checker.failed_by = {("i7", key): 3}
    _, noted = wholelog.fold_whole_log(fleet)
    fleet.checker._poison(noted, {"i7": 0})
    assert fleet.checker.violations == []
    assert sorted(sum(by.values()) for by in noted.values()) == [1, 2]


class FailuresAtTheBound(Fleet):
    """Every coordination write fails (none lands) from 2 s before the liveness bound to 1.5 s
    after it: leases end at the bound, as when heartbeats fail in a row at a 0.2 fail rate
    near a run's end (a review's false positive)."""

    def advance(self, step: int) -> float:
        t = round(step * self.p.dt, 6)
        bound = self.p.settle  # no timed fault: the bound is the settle
        failing = bound - 2.0 <= t < bound + 1.5
        for part in self.log.parts:
            part.fail_rate = 1.0 if failing else 0.0
        for node in self.nodes:
            for write in node.in_flight:
                if write.fails:
                    write.lands_anyway = False
        return super().advance(step)


def test_a_lease_lost_to_failing_writes_at_the_bound_is_recovered_within_the_stated_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under lasting write failures a lease can end at the bound itself; the fleet recovers
    within FAILURES_RECOVERY_HB (the window after the bound is that much longer), and the
    same run judged within CHECK_WINDOW_S alone is reported."""
    params = SimParams(seed=3, faults=("failures",), fail_rate=0.0, duration=10.0)
    fleet = FailuresAtTheBound(params)
    assert fleet.run().violations == []
    assert fleet.t >= params.settle + CHECK_WINDOW_S + FAILURES_RECOVERY_HB
    monkeypatch.setattr(convergence_module, "FAILURES_RECOVERY_HB", 0.0)
    found = FailuresAtTheBound(params).run().violations
    assert [v["invariant"] for v in found] == ["liveness"]


def test_nothing_on_a_stalled_host_freezes_restarts_or_doubles_its_member() -> None:
    """A SIGSTOP, an operator's TERM or a second instance come from the member's own host:
    while that host is paused nothing there acts. The sweep's `freeze,compaction,stall` mix
    froze members of paused hosts (12 of 200 seeds from 90000: a freeze outlasting the pause
    left children running on the held clock, unsupervised), which no host can do."""
    fleet = Fleet(SimParams(faults=(), members=2, groups=1))
    fleet.add_members()
    for step in range(int(1.5 / fleet.p.dt)):
        fleet.advance(step)
    stalled, other = fleet.nodes
    stalled.stall(fleet.t, 5.0, wall_held=True)
    picked = {fleet.faults.victim(on_host=True) for _ in range(50)}
    assert picked == {other}
    assert stalled in {fleet.faults.victim() for _ in range(50)}  # a kill -9 of the VM can come


def test_a_stall_never_begins_while_its_member_is_stopped() -> None:
    """A host paused while its member is stopped (SIGSTOP) and resumed before the member runs
    again leaves the children working on the held lease clock with nobody to end them: a named
    residual risk (design.md), which the sweep found in 3 of 600 seeds when allowed (90114,
    90032, 90018). The stall picks members that run."""
    fleet = Fleet(SimParams(faults=(), members=2, groups=1))
    fleet.add_members()
    for step in range(int(1.5 / fleet.p.dt)):
        fleet.advance(step)
    frozen, other = fleet.nodes
    frozen.freeze(fleet.t, 5.0)
    assert {fleet.faults.victim(running=True) for _ in range(50)} == {other}


def test_one_fault_loses_the_count_in_flight_of_each_claim() -> None:
    """Seed 1 of the key-sliced every-fault fleet: two slices' children timed out on their
    poison records, and their member was frozen before it wrote either count; woken past its
    lease it counted neither. One fault, two counts lost, one per claim: the checker allowed
    one per member. A fault loses at most the count in flight of each claim."""
    checker = Checker({"g0": Mode.ALO}, heartbeat_interval=1.0, speed=100.0)
    one, two = ClaimKey("g0", "t+key.0of3", 1), ClaimKey("g0", "t+key.1of3", 4)
    checker.failed_by = {("i3", one): 5, ("i3", two): 5}
    counted = {(one, 317, 0): {"i3": 4}, (two, 331, 0): {"i3": 4}}
    checker._poison(counted, {"i3": 1})
    assert checker.violations == []
    checker.failed_by = {("i3", one): 6, ("i3", two): 4}  # two lost on one claim: not a fault's
    checker._poison(counted, {"i3": 1})
    assert [v["invariant"] for v in checker.violations] == ["poison_bounded"]


def test_a_member_just_resumed_is_not_stopped_before_its_first_turn() -> None:
    """A member SIGSTOPped after its host resumed and before it ran once leaves its children
    working on the held clock (the same residual; seed 91036 of `freeze,compaction,stall`): an
    on-host fault waits for the member's first turn after the resume."""
    fleet = Fleet(SimParams(faults=(), members=2, groups=1))
    fleet.add_members()
    step = 0
    for step in range(int(1.5 / fleet.p.dt)):
        fleet.advance(step)
    woken, other = fleet.nodes
    woken.stall(fleet.t, 1.0, wall_held=True)
    resumed = woken.stalled_until
    fleet.t = resumed  # the host runs again; its member has not had its turn yet
    assert {fleet.faults.victim(on_host=True) for _ in range(50)} == {other}
    while fleet.t <= resumed:
        step += 1
        fleet.advance(step)  # its first turn after the resume
    assert woken in {fleet.faults.victim(on_host=True) for _ in range(50)}


def test_a_child_stopped_before_it_was_ready_is_no_later_child_of_its_tenure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found searching failing-write mixes (seed 7920281 of `failures,read-latency,restart,
    pause,partitions,stall`, 8 faults at 0.3): a child stopped for its lease at 315 of its
    reserved 315..320, the child started for that carry was TERMed for the lease before it was
    ready, and the claim went stale: its member reported 315..320 lost, the log shows 314..320
    lost as the tenure was taken over. The checker counted the second child as the tenure going
    on (it took its readiness time, never reached, as a start) and reported 315..320 lost in no
    crash. Now a child counts so only if it was ready before it ended (`Checker.died`); the
    checker as it was, which recorded every child, re-finds it."""
    params = SimParams(
        faults=("failures", "read-latency", "restart", "pause", "partitions", "stall"),
        fail_rate=0.3, fault_count=8, seed=7920281,
    )  # fmt: skip
    assert run_seed(params).violations == []
    died = Checker.died

    def every_child(self: Checker, child: SimChild, code: int, t: float) -> None:
        died(self, child, code, t)
        if self.modes[child.key.group] is Mode.AMO and child.ready_at > t:
            self.tenure_children[child.key].append((tenure(child), child.ready_at))

    monkeypatch.setattr(Checker, "died", every_child)
    found = run_seed(params).violations
    assert [v["invariant"] for v in found] == ["amo_loss_only_on_crash"]
