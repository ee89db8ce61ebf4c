"""One seeded run of a simulated fleet: its members, its faults, its checks.

A run builds ``groups`` groups on one coordination log (``members`` spread over them), starts
them within the first second, injects the enabled faults at random times in the middle of the
run, then lets the fleet settle and checks the invariants (`sim.invariants`). Everything is
drawn from one `random.Random(seed)`, so a seed replays exactly.
"""

from __future__ import annotations

import functools
import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from marshal_workers.common.errors import EXIT_USAGE
from marshal_workers.core.settings import MemberSettings
from marshal_workers.ipc import messages as ipc
from marshal_workers.protocol import rationalizer
from marshal_workers.protocol.amolosses import AmoLoss
from marshal_workers.protocol.metadata import GroupSettings, settings_records
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.placement import Placement, placed, reads, spread
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, resume_offset
from marshal_workers.protocol.slicing import Ordering, Slicing
from marshal_workers.protocol.wire import (
    ClaimKey,
    Partitioner,
)
from marshal_workers.sim import convergence, forgery, wholelog
from marshal_workers.sim.children import DataPartition, SimChild
from marshal_workers.sim.faults import ADMIN, Faults
from marshal_workers.sim.invariants import Checker
from marshal_workers.sim.node import SimNode
from marshal_workers.sim.params import (
    FAULTS,
    MAX_HANDLER_FAILURES,
    POISON_PARK_AFTER,
    SimParams,
)
from marshal_workers.sim.slices import SimCut, SliceChecker
from marshal_workers.sim.vlog import VirtualLog

SPEC = Partitioner.SPEC
SETTLE_CAP = 4  # a run ends by SETTLE_CAP * duration even if faults keep it from settling


@dataclass
class RunResult:
    """What a run found and measured."""

    seed: int
    violations: list[dict[str, Any]]
    cold_start_s: float | None
    recoveries_s: list[float]
    records: int
    handled: int
    trace: list[str] = field(default_factory=list)
    liveness_checked: bool = True  # the run ended with a fault-free settle (always, bar a cap)
    checked: frozenset[str] = frozenset()  # the invariants the run evaluated on its data
    # coordination records a member read and folded per second of virtual time, the mean over
    # the run's members (each over the time it ran), and the most any member read
    member_reads_per_s: float = 0.0
    member_reads_per_s_max: float = 0.0


class Fleet:
    """The simulated world of one run."""

    def __init__(self, p: SimParams) -> None:
        self.p = p
        self.rng = random.Random(p.seed)
        self.log = VirtualLog(p.coordination_partitions, self.rng)
        self.t = 0.0
        self.modes = {f"g{g}": (Mode.ALO if g % 2 == 0 else Mode.AMO) for g in range(p.groups)}
        # where a claim with no position starts: g0 earliest, g1 latest, g2 latest, g3 earliest..
        self.resets = {
            f"g{g}": "latest" if (g // 2 + g) % 2 else "earliest" for g in range(p.groups)
        }
        self.partition_count = {g: p.partitions for g in self.modes}
        # placed groups: each in a window of `span` from its home (`protocol.placement`)
        n = p.coordination_partitions
        self.placements: dict[str, Placement] = (
            {g: placed(g, n, min(p.span, n)) for g in self.modes} if p.placement == "placed" else {}
        )
        self.data: dict[ClaimKey, DataPartition] = {}
        self.cut = SimCut(Slicing(Ordering(p.ordering), p.workers_per_partition))
        self.checker = Checker(
            dict(self.modes),
            p.heartbeat_interval,
            p.speed,
            park_after=POISON_PARK_AFTER,
            owed=self.cut.owed,
            stopped=self._stopped,
        )
        # sliced: the checks per data offset, across the slices of a partition
        self.slices = SliceChecker(self.cut, dict(self.modes), self.checker.violation)
        self.nodes: list[SimNode] = []
        self.events: list[tuple[float, str, Callable[[], None]]] = []
        # members' folds at fault boundaries: (label, virtual time, world)
        self.snapshots: list[tuple[str, float, World]] = []
        self.fault_windows: list[tuple[float, float]] = []  # (start, end) of each fault
        self.instances = 0
        self.handler_timeout = 2 * p.heartbeat_interval
        self.poisoned: set[ClaimKey] = set()
        # failures counted in the log: by (writer instance, record value), how many distinct
        # failures were written with those very bytes (a count written again after a write
        # that failed is not one more failure)
        self.failures_written: dict[tuple[str, bytes], int] = {}
        self.log_losses: list[AmoLoss] = []  # every AMO loss the whole log shows (at the end)
        self.settled_losses: list[AmoLoss] = []  # and 2*HB after it (`wholelog`)
        self.faults = Faults(self)
        # members record and check their group's settings (`mixed-modes`: members of the other
        # mode are refused); without it, as before settings had a mode, so that the seeds the
        # docs and tests name keep their runs
        self.checks_settings = "mixed-modes" in p.faults
        # the whole log folded as it lands, for AMO starts under the eager cleaner
        self._whole: list[World] | None = None
        self._whole_folded = [0] * p.coordination_partitions

    # ---- building ----------------------------------------------------------------------------

    def keys(self, group: str) -> list[ClaimKey]:
        """The claims on the data partitions of ``group`` now (sliced: each partition's
        slices)."""
        return self.cut.claim_keys(group, f"t{group}", self.partition_count[group])

    def data_of(self, key: ClaimKey) -> DataPartition:
        """The data partition a claim is on (one for all the slices of a partition)."""
        key = self.cut.data_key(key)
        found = self.data.get(key)
        if found is None:
            found = self.data[key] = DataPartition(self.p.backlog, self.p.rate, self.t)
        return found

    def layout(self, group: str) -> Placement:
        """Where ``group``'s claims are coordinated."""
        found = self.placements.get(group)
        return found if found is not None else spread(self.p.coordination_partitions, SPEC)

    def land_group_settings(self) -> None:
        """Each placed group's settings on its home and window at the start, as its first
        member writes them (spread groups: none, as before: their records are the same)."""
        hb_ms = int(self.p.heartbeat_interval * 1000)
        for group, placement in sorted(self.placements.items()):
            record = GroupSettings(int(self.t), "creator-i", "creator", group, hb_ms, SPEC,
                                   frozenset({ADMIN}), self.cut.slicing, placement,
                                   self.modes[group] if self.checks_settings else None)  # fmt: skip
            for part in sorted(reads(group, placement)):
                for key, value in settings_records(record):
                    self.log.land(part, key, value, self.t)

    def settings(self, group: str, client_id: str, mode: Mode | None = None) -> MemberSettings:
        """A member's settings: of its group's mode, or of ``mode`` (`mixed-modes`: a member
        started with the other one)."""
        p = self.p
        self.instances += 1
        mode = self.modes[group] if mode is None else mode
        hb_ms = int(p.heartbeat_interval * 1000)
        child = ipc.ChildSpec(
            handler="sim",
            mode=mode,
            bootstrap_servers="sim",
            group_id=group,
            client_id=client_id,
            instance_id=f"i{self.instances}",
            topic="",
            partition=0,
            start_offset=None,
            fencing_token=0,
            auto_offset_reset=self.resets[group],
            batch_size=50,
            amo_window=200,  # reservations of one or two batches (sized by rate), small
            handler_timeout_s=self.handler_timeout,
        )
        return MemberSettings(
            group=group,
            client_id=client_id,
            instance_id=f"i{self.instances}",
            topics=(f"t{group}",),
            mode=mode,
            coordination_partitions=p.coordination_partitions,
            partitioner=Partitioner.SPEC,
            rationalizer=RationalizerConfig(
                hb_ms,
                num_partitions=p.coordination_partitions,
                admin_client_ids=frozenset({ADMIN}),
            ),
            child=child,
            stop_timeout=2 * p.heartbeat_interval,
            max_handler_failures=MAX_HANDLER_FAILURES,
            restart_backoff=0.1,
            handler_timeout=self.handler_timeout,
            poison_park_after=POISON_PARK_AFTER,
            placement=self.placements.get(group),
            # checked at its start and watched, as the runtime's (`SimNode.preflight`), in runs
            # with `mixed-modes` only: the records it writes would re-roll every other run
            shared=None
            if not self.checks_settings
            else GroupSettings(
                int(self.t),
                f"i{self.instances}",
                client_id,
                group,
                hb_ms,
                SPEC,
                frozenset({ADMIN}),
                self.cut.slicing,
                self.placements.get(group),
                mode,
            ),
        )

    def add_node(self, group: str, client_id: str, at: float, mode: Mode | None = None) -> SimNode:
        node = SimNode(
            name=f"{group}:{client_id}:i{self.instances + 1}",
            settings=self.settings(group, client_id, mode),
            log=self.log,
            data=self.data_of,
            partitions=lambda: self.keys(group),
            rng=self.rng,
            on_handled=self._handled if self.cut.sliced else self.checker.handled,
            on_failed=self.checker.failed,
            on_died=self.checker.died,
            on_violation=lambda name, d: self.checker.violation(name, d, self.t),
            on_start=self._child_started,
            on_granted=self.checker.granted,
            on_checked=self.checker.mark,
            on_failure_written=self._failure_written,
            on_lost=self.checker.lost_reported,
            speed=self.p.speed,
            wall_skew=self.rng.uniform(-5, 5),
            read_lag_s=self._read_lag(),
        )
        self.nodes.append(node)
        self.at(at, f"start {node.name}", lambda: node.start(self.t))
        return node

    def _child_started(self, key: ClaimKey, offset: int) -> None:
        """A child of ``key`` started at ``offset``: where the claim's records are owed from
        (its first start), and, in AMO, where the whole log would have resumed it."""
        self.checker.started(key, offset)
        if self.checker.eager_compaction and self.modes.get(key.group) is Mode.AMO:
            self.checker.holder_started(key, offset, self._whole_log_resume(key))

    def _whole_log_resume(self, key: ClaimKey) -> int | None:
        """Where a reader of the whole, uncompacted log up to its end now resumes ``key`` in
        AMO (folded on as records land: positions only grow, so this is at or above what it
        was when the member's fold was read)."""
        if self._whole is None:
            config = wholelog.reference_config(self)
            self._whole = [World(config, q) for q in range(self.log.num_partitions)]
        for q, world in enumerate(self._whole):
            shadow = self.log.shadow[q]
            for record in shadow[self._whole_folded[q] :]:
                rationalizer.fold(world, record)
            self._whole_folded[q] = len(shadow)
            state = world.claims.get(key)
            if state is not None:
                return resume_offset(state, Mode.AMO)
        return None

    def _judge_liveness(self, settled: bool, recovering: convergence.Recovering) -> bool:
        """``liveness`` at the run's end: converged at a check in the window after the bound
        (``settled``), or now; or, under lasting write failures, no problem lasting past the
        bound on recovering one. Whether it was judged (the run reached the bound)."""
        p = self.p
        last_fault = max((w[1] for w in self.fault_windows), default=0.0)
        checked = self.t >= last_fault + p.settle
        if checked:
            self.checker.mark("liveness")
        # under lasting write failures a lease may be lost at any check: then no problem may
        # last past the bound on recovering one (`convergence.Recovering`)
        recovered = "failures" in p.faults and recovering.within(convergence.recovery_bound_s(self))
        if checked and not (settled or self.converged() or recovered):
            longest = recovering.describe()
            self.checker.violation(
                "liveness",
                f"not every partition held, handled and fairly shared {self.t - last_fault:.1f}s "
                f"after the last fault (bound {p.settle:.1f}s){longest}",
                self.t,
            )
        return checked

    def _stopped(self, instance: str, start: float, end: float) -> float:
        """The seconds of ``start``..``end`` the host of member ``instance`` was stalled with
        every clock held (`SimNode.stopped_between`)."""
        for node in self.nodes:
            if node.settings.instance_id == instance:
                return node.stopped_between(start, end)
        return 0.0

    def _failure_written(self, instance: str, value: bytes) -> None:
        """A member wrote a failure's count for the first time (`poison_bounded`)."""
        key = (instance, value)
        self.failures_written[key] = self.failures_written.get(key, 0) + 1

    def _handled(self, child: SimChild, offset: int, t: float) -> None:
        """A sliced run: a child handled ``offset``, per claim and per data offset."""
        self.checker.handled(child, offset, t)
        self.slices.handled(child.cid, child.key, offset, t)

    def _read_lag(self) -> float:
        """`read-latency`: how far a member's view of the log may lag (up to 0.3*HB, drawn per
        member, then a random share of it per read); 0 without the fault."""
        if "read-latency" not in self.p.faults:
            return 0.0
        return self.rng.uniform(0.05, 0.3) * self.p.heartbeat_interval

    def at(self, t: float, what: str, action: Callable[[], None]) -> None:
        self.events.append((t, what, action))
        self.events.sort(key=lambda e: e[0])

    # ---- faults ----------------------------------------------------------------------------

    def schedule_faults(self) -> None:
        p = self.p
        faults = [f for f in p.faults if f in FAULTS]
        if "clock" in faults:
            for part in self.log.parts:
                part.clock_offset_s = self.rng.uniform(-0.4, 0.4) * p.heartbeat_interval
        if "latency" in faults:
            slow = self.rng.randrange(p.coordination_partitions)
            self.log.parts[slow].latency_s = (
                0.1 * p.heartbeat_interval,
                0.4 * p.heartbeat_interval,
            )
        if "failures" in faults:
            for part in self.log.parts:
                part.fail_rate = p.fail_rate
        lasting = ("clock", "latency", "failures", "shared-ids", "read-latency")
        timed = [f for f in faults if f not in lasting]
        if not timed:
            return
        for _ in range(p.fault_count):
            fault = self.rng.choice(timed)
            t = self.rng.uniform(0.3, 0.6) * p.duration
            self.at(t, fault, self._at_boundary(fault, self.faults.action(fault)))

    def _at_boundary(self, fault: str, action: Callable[[], None]) -> Callable[[], None]:
        """``action``, after a snapshot of every live member's fold (`fold_agreement` compares
        each with a reader of the whole log up to the same offsets; a member killed by the
        fault is compared by its last fold)."""

        def act() -> None:
            for node in self.nodes:
                if node.alive and node.started:
                    label = f"{node.name} at {fault} t={self.t:.2f}"
                    # taken before this step's children run: judged by what was done before it
                    at = self.t - self.p.dt / 2
                    worlds = node.member.worlds.values()
                    self.snapshots.extend((label, at, w.copy()) for w in worlds)
            action()

        return act

    def window(self, seconds: float) -> None:
        """A fault's window, from now: the liveness bound counts from the last one's end."""
        self.fault_windows.append((self.t, self.t + seconds))

    # ---- running ---------------------------------------------------------------------------

    def converged(self) -> bool:
        """Whether the fleet is converged now (`sim.convergence`)."""
        return convergence.converged(self)

    def _hung_handlers(self, t: float) -> None:
        """No handler call outlives its deadline (plus a scheduling second) under a member."""
        self.checker.mark("handler_deadline")
        for node in self.nodes:
            if node.stalled(t):
                continue  # its children are stopped with it (their own clock held)
            for child in node.children.values():
                since = child.hung_since
                if child.alive and since is not None and t - since > self.handler_timeout + 1.0:
                    self.checker.violation(
                        "handler_deadline",
                        f"{child.cid} hung in its handler for {t - since:.1f}s (deadline "
                        f"{self.handler_timeout:.1f}s)",
                        t,
                    )

    def advance(self, step: int) -> float:
        """Step ``step`` of the run: due events, the brokers, the members, the children."""
        dt = self.p.dt
        self.t = t = round(step * dt, 6)
        while self.events and self.events[0][0] <= t:
            _, _, action = self.events.pop(0)
            action()
        for node in self.nodes:
            node.land_appends(t)
        for node in self.nodes:
            node.step(t, dt)
        for node in self.nodes:
            node.step_children(t, dt)
        return t

    def add_members(self) -> None:
        """The run's members, spread over its groups, starting within the first second."""
        p = self.p
        self.land_group_settings()
        names = [f"c{i}" for i in range(p.members)]
        for i in range(p.members):
            group = f"g{i % p.groups}"
            client = names[i // p.groups] if "shared-ids" in p.faults else names[i]
            self.add_node(group, client, self.rng.uniform(0, 1.0))

    def run(self) -> RunResult:
        p = self.p
        self.add_members()
        self.schedule_faults()
        cold: float | None = None
        recoveries: list[float] = []
        open_fault: float | None = None
        # every run ends with a fault-free settle long enough to check liveness: it runs past
        # ``duration`` until the last fault has ended ``settle`` (+ a second) ago (a fault may
        # end late: a freeze, a pause), within a cap
        cap = SETTLE_CAP * p.duration
        window = convergence.check_window(self)
        step = 0
        settled = False  # converged at a check in the window after the bound
        recovering = convergence.Recovering()  # each problem's run of checks
        while True:
            t = self.advance(step)
            step += 1
            last_end = max((w[1] for w in self.fault_windows), default=0.0)
            done = t >= p.duration and t >= last_end + p.settle + window and not self.events
            if done or t >= cap:
                break
            if step % 5 == 0:
                self._hung_handlers(t)
                found = convergence.problems(self)
                ok = not found
                # the bound counts from the last fault's end: every fault has begun (none is
                # still to come, which would move it) and the last one ended `settle` ago
                bound_reached = not self.events and t >= last_end + p.settle
                if ok and bound_reached:
                    settled = True
                lost = convergence.releases_lost(self)
                recovering.checked(found, t, in_window=bound_reached, releases_lost=lost)
                if ok and cold is None and t > 1.0:
                    cold = t - 1.0
                started = [w[0] for w in self.fault_windows if w[0] <= t]
                if started and (open_fault is None or started[-1] > open_fault) and not ok:
                    open_fault = started[-1]
                if ok and open_fault is not None:
                    recoveries.append(t - open_fault)
                    open_fault = None
        checked = self._judge_liveness(settled, recovering)
        self._judge_instances()
        reference, noted = wholelog.fold_whole_log(self)
        readers: list[tuple[str, float, World]] = []
        for node in self.nodes:
            for child in node.children.values():
                # the run ends while it works: its batches are not lost; or it ended in the
                # run's last step and its member has not read its exit yet (that turn says
                # what it lost: seed 22 of `failures,read-latency` at 0.3, a child TERMed as
                # its lease ended, in the very turn its last batch was granted)
                if child.alive or (node.alive and node.started):
                    self.checker.in_progress(child)
            if node.alive and node.started:
                node.catch_up(self.t)
                readers.extend((node.name, self.t, w) for w in node.member.worlds.values())
                for key, start, end in node.reserving():
                    self.checker.deciding(key, start, end)
        # what may lose a poison count: a kill, freeze or stop, or every write of it failing
        faults = {n.settings.instance_id: n.faults + n.counts_lost_to_the_log() for n in self.nodes}
        self.checker.finish(reference, readers, noted, faults, self.log_losses, self.settled_losses)
        self.slices.finish()
        trace = sorted(line for n in self.nodes for line in n.trace)[-30:]
        rates = [r for n in self.nodes if (r := n.reads_per_s(self.t)) is not None]
        return RunResult(
            p.seed,
            self.checker.violations,
            cold,
            recoveries,
            sum(len(s) for s in self.log.shadow),
            self.checker.handled_total,
            trace if self.checker.violations else [],
            checked,
            frozenset(self.checker.ran),
            sum(rates) / len(rates) if rates else 0.0,
            max(rates, default=0.0),
        )

    def _judge_instances(self) -> None:
        """`one_instance`, at the run's end (a settle past every fault):

        - no live instance of a client id that announced itself in its group, lost the
          announcement to another live instance and runs on: a replaced instance is dormant
          (`Operator.replaced`), frozen ones included, as they ran again;
        - no client id whose only live instances are dormant, or that has none left because
          one stopped for being replaced: a dormant instance claims again once its replacer
          has fallen silent, so one record (a forged takeover), two instances each dormant
          for the other (a review found both stopping so) or a replacer stopped since must not
          leave the client id down for good.

        A duplicate that never announced itself (it found the claim uncertain and heard the
        other) warns and runs on (`Member._replaced_by`)."""
        live: dict[tuple[str, str], list[SimNode]] = {}
        replaced: dict[tuple[str, str], list[SimNode]] = {}
        for n in self.nodes:
            who = (n.settings.group, n.settings.client_id)
            if n.alive and n.started:
                live.setdefault(who, []).append(n)
            if n.member.operator.replacer is not None and (n.alive or n.exit_code == EXIT_USAGE):
                replaced.setdefault(who, []).append(n)
        self.checker.mark("one_instance")
        for (group, client), nodes in sorted(live.items()):
            # replaced: it announced itself, and another instance holds the announcement now
            ran_on = [
                n.name
                for n in nodes
                if n.announced
                and n.member.member not in n.member.held
                and not n.member.operator.dormant
            ]
            if len(nodes) > 1 and ran_on:
                detail = f"{group}/{client}: {len(nodes)} live instances, {', '.join(ran_on)}"
                self.checker.violation("one_instance", f"{detail} replaced and running on", self.t)
        for (group, client), nodes in sorted(replaced.items()):
            if any(not n.member.operator.dormant for n in live.get((group, client), [])):
                continue
            down = ", ".join(
                f"{n.name} {'dormant' if n.alive else 'stopped'} for {n.member.operator.replacer}"
                for n in nodes
            )
            why = f"{group}/{client}: no instance runs ({down})"
            self.checker.violation("one_instance", why, self.t)


def run_seed(params: SimParams) -> RunResult:
    """Run one seed. An exception anywhere in it (a member's core, the reader of the whole log)
    is a crash: the violation ``no_crash``, naming where it was raised."""
    use_shared_decode()
    fleet = Fleet(params)
    try:
        result = fleet.run()
    except Exception as exc:  # any exception of a run is what the check reports
        where = traceback.extract_tb(exc.__traceback__)[-1]
        detail = f"{type(exc).__name__}: {str(exc)[:160]} ({where.filename}:{where.lineno})"
        crash = {"invariant": "no_crash", "detail": detail, "t": fleet.t}
        return RunResult(params.seed, [crash], None, [], 0, 0, liveness_checked=False)
    live = [n for n in fleet.nodes if n.alive and n.started]
    kept = forgery.own_group_state(
        (n.name, n.settings.group, n.member.worlds.values()) for n in live
    )
    result.violations.extend(
        {"invariant": "own_group_state", "detail": line, "t": fleet.t} for line in kept[:5]
    )
    result.checked = result.checked | {"no_crash", "own_group_state"}
    return result


def use_shared_decode() -> None:
    """Let every simulated member share one decoding of each record.

    In a fleet each process decodes each record once; here hundreds of members fold the same
    bytes in one process, so the rationalizer's ``decode`` is memoized for the simulator (the
    messages are immutable). The fold's rules are untouched; its cost per member is measured
    separately (bench/sim_scale.py) with the plain decode."""
    plain = getattr(rationalizer, "decode")  # noqa: B009 (replaced below: typed access fails)
    if not hasattr(plain, "cache_info"):
        setattr(rationalizer, "decode", functools.lru_cache(maxsize=1 << 16)(plain))  # noqa: B010
