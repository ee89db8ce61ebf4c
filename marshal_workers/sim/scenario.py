"""One seeded run of a simulated fleet: its members, its faults, its checks.

A run builds ``groups`` groups on one coordination log (``members`` spread over them), starts
them within the first second, injects the enabled faults at random times in the middle of the
run, then lets the fleet settle and checks the invariants (`sim.invariants`). Everything is
drawn from one `random.Random(seed)`, so a seed replays exactly.
"""

from __future__ import annotations

import functools
import math
import random
import signal
import traceback
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from marshal_workers.core.settings import MemberSettings
from marshal_workers.ipc import messages as ipc
from marshal_workers.protocol import rationalizer
from marshal_workers.protocol.leases import default_margin, min_compaction_lag_ms
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.recordfailures import (
    Action,
    PoisonCleared,
    PoisonNoted,
    PoisonResolved,
    encode_poison,
    poison_record_key,
)
from marshal_workers.protocol.slicing import Ordering, Slicing
from marshal_workers.protocol.wire import (
    ClaimKey,
    Partitioner,
    ReleaseGroup,
    coordination_partition,
    encode,
    record_key,
)
from marshal_workers.sim import forgery
from marshal_workers.sim.children import DataPartition, SimChild
from marshal_workers.sim.invariants import Checker
from marshal_workers.sim.node import SimNode
from marshal_workers.sim.slices import SimCut, SliceChecker
from marshal_workers.sim.vlog import VirtualLog

FAULTS = (
    "kill",
    "freeze",
    "restart",
    "twins",
    "compaction",
    "eager-compaction",
    "latency",
    "clock",
    "failures",
    "pause",
    "partitions",
    "shared-ids",
    "poison",
    "read-latency",
    "clock-jumps",
    "forgery",
)
DEFAULT_FAULTS = (
    "kill",
    "freeze",
    "restart",
    "twins",
    "compaction",
    "latency",
    "clock",
    "pause",
    "poison",
)
POISON_PARK_AFTER = 4  # failures of one record before its claim is parked (the fleet's setting)
MAX_HANDLER_FAILURES = 3
ADMIN = "marshal-admin"


@dataclass(frozen=True, slots=True)
class SimParams:
    """What one run simulates."""

    seed: int = 0
    members: int = 6
    groups: int = 2
    partitions: int = 8  # per group
    duration: float = 30.0  # virtual seconds
    heartbeat_interval: float = 1.0
    coordination_partitions: int = 4
    faults: tuple[str, ...] = DEFAULT_FAULTS
    fault_count: int = 3
    dt: float = 0.05
    speed: float = 200.0  # records a child handles per second
    rate: float = 20.0  # records produced per partition per second
    backlog: int = 100
    # What a claim covers (`protocol.slicing`), and slices per data partition
    ordering: str = "partition"
    workers_per_partition: int = 1
    fail_rate: float = 0.02  # `failures`: the share of appends that fail (half land anyway)
    operator_skips: float = 0.0  # `poison`: the share of operators' decisions that skip

    @property
    def settle(self) -> float:
        """The liveness bound: after the last fault ends, everything is held and fair by then."""
        return 10 * self.heartbeat_interval + 3.0


SETTLE_CAP = 4  # a run ends by SETTLE_CAP * duration even if faults keep it from settling
# liveness: from the bound on, the fleet must be converged at one check (every 0.25 s) within
# this window; under a lasting fault (2% of writes failing) a child restarting at the one
# instant a run ends is no wedge, and a wedge or a loop converges at none of them
CHECK_WINDOW_S = 2.0


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
        self.data: dict[ClaimKey, DataPartition] = {}
        self.cut = SimCut(Slicing(Ordering(p.ordering), p.workers_per_partition))
        self.checker = Checker(
            dict(self.modes),
            p.heartbeat_interval,
            p.speed,
            park_after=POISON_PARK_AFTER,
            owed=self.cut.owed,
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

    def settings(self, group: str, client_id: str) -> MemberSettings:
        p = self.p
        self.instances += 1
        hb_ms = int(p.heartbeat_interval * 1000)
        child = ipc.ChildSpec(
            handler="sim",
            mode=self.modes[group],
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
            mode=self.modes[group],
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
        )

    def add_node(self, group: str, client_id: str, at: float) -> SimNode:
        node = SimNode(
            name=f"{group}:{client_id}:i{self.instances + 1}",
            settings=self.settings(group, client_id),
            log=self.log,
            data=self.data_of,
            partitions=lambda: self.keys(group),
            rng=self.rng,
            on_handled=self._handled if self.cut.sliced else self.checker.handled,
            on_failed=self.checker.failed,
            on_died=self.checker.died,
            on_violation=lambda name, d: self.checker.violation(name, d, self.t),
            on_start=self.checker.started,
            on_granted=self.checker.granted,
            on_checked=self.checker.mark,
            speed=self.p.speed,
            wall_skew=self.rng.uniform(-5, 5),
            read_lag_s=self._read_lag(),
        )
        self.nodes.append(node)
        self.at(at, f"start {node.name}", lambda: node.start(self.t))
        return node

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
            self.at(t, fault, self._at_boundary(fault, self._fault_action(fault)))

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

    def _victim(self) -> SimNode | None:
        live = [n for n in self.nodes if n.alive and n.started]
        return self.rng.choice(live) if live else None

    def _fault_action(self, fault: str) -> Callable[[], None]:
        return {
            "kill": self._fault_kill,
            "freeze": self._fault_freeze,
            "restart": self._fault_restart,
            "twins": self._fault_twins,
            "compaction": self._fault_compaction,
            "eager-compaction": self._fault_eager_compaction,
            "pause": self._fault_pause,
            "partitions": self._fault_partitions,
            "poison": self._fault_poison,
            "clock-jumps": self._fault_clock_jump,
            "forgery": self._fault_forgery,
        }[fault]

    def _fault_forgery(self) -> None:
        """A hostile writer appends malformed, extreme and flooding records (`sim.forgery`):
        nothing of the fleet's may change, and no reader may fail."""
        forgery.forge(self.log, self.t, list(self.modes), ADMIN, self.p.seed)
        self._window(0.0)

    def _fault_clock_jump(self) -> None:
        """One broker's clock jumps: back by up to HB (its stamps go back; the fold clamps log
        time, so claims there look fresh for longer: liveness waits), or forward by up to the
        lease margin, the most the safety argument covers (a holder's lease ends a margin
        before 2*HB of log time after its heartbeat's send; a bigger forward jump lets a rival
        win while the holder's child may still run: a named residual risk, not simulated)."""
        hb = self.p.heartbeat_interval
        part = self.rng.choice(self.log.parts)
        seconds = self.rng.uniform(-hb, default_margin(hb))
        part.jump_clock(seconds, self.t)
        self._window(max(0.0, -seconds) + 2 * hb)

    def _fault_poison(self) -> None:
        """A record that always fails, or whose handler call hangs, a little ahead of an ALO
        partition's end: the fleet must count its failures in the log and park it."""
        alo = [g for g, mode in self.modes.items() if mode is Mode.ALO]
        if not alo:
            return
        key = self.rng.choice(self.keys(self.rng.choice(alo)))
        data = self.data_of(key)
        offset = data.high_watermark(self.t) + self.rng.randint(0, 20)
        data.poison[offset] = self.rng.choice(("fail", "hang"))
        owner = self.cut.owner(self.cut.data_key(key), offset)  # (sliced: its slice)
        self.poisoned.add(owner)
        self._window(0.0)
        # half the time an operator retries it a few HB later (failing by then, or not: then
        # the log refuses the retry); drawn apart, so the fleet's own draws stay as they were
        retries = random.Random(f"{self.p.seed}/retry/{offset}")
        if retries.random() < 0.5:
            later = self.t + retries.uniform(3, 8) * self.p.heartbeat_interval
            action = Action.SKIP if retries.random() < self.p.operator_skips else Action.RETRY
            decide = functools.partial(self._decide_record, owner, offset, action)
            self.at(later, action.value, decide)

    def _decide_record(self, key: ClaimKey, offset: int, action: Action) -> None:
        """An operator's retry of the record (its failure count starts again, and the fleet
        must try it again promptly: `retry_heeded`, the run lasts long enough to see) or skip
        (the holder moves past it). Written whatever the folds say, as any writer may: a
        decision on a record that is not failing (not reached, or displaced by another poison
        record of the claim) is refused by the log, and must change nothing, after the cleaner
        too (`poison_bounded`)."""
        msg = PoisonResolved(int(self.t), "admin-i", ADMIN, key.group, key.topic,
                             key.partition, offset, action)  # fmt: skip
        home = coordination_partition(key.topic, key.partition, self.log.num_partitions)
        self.log.land(home, poison_record_key(msg), encode_poison(msg), self.t)
        self._window(self.checker.retry_bound_s)

    def _fault_kill(self) -> None:
        node = self._victim()
        if node is not None:
            node.kill(self.t)
            self._window(0.0)
            back = self.t + self.rng.uniform(0.2, 3 * self.p.heartbeat_interval)
            self.add_node(node.settings.group, node.settings.client_id, back)
            self._window(back - self.t)

    def _fault_freeze(self) -> None:
        node = self._victim()
        if node is not None:
            seconds = self.rng.uniform(0.5, 4) * self.p.heartbeat_interval
            node.freeze(self.t, seconds)
            self._window(seconds)

    def _fault_restart(self) -> None:
        node = self._victim()
        if node is not None:
            node.signal(signal.SIGTERM, self.t)
            back = self.t + self.rng.uniform(1, 3) * self.p.heartbeat_interval
            self.at(back, "restart kill", lambda: node.kill(self.t))
            self.add_node(node.settings.group, node.settings.client_id, back + 0.01)
            self._window(back - self.t)

    def _fault_twins(self) -> None:
        node = self._victim()
        if node is not None:  # a second live instance of one client id (two hosts)
            twin = self.add_node(node.settings.group, node.settings.client_id, self.t)
            paused = self.rng.random() < 0.5  # the old host paused as the twin starts
            seconds = self.rng.uniform(0.5, 2) * self.p.heartbeat_interval if paused else 0.0
            node.freeze(self.t, seconds)
            if self.rng.random() < 0.5:  # an operator stops the duplicate soon after
                stop_at = self.t + self.rng.uniform(0.2, 1.0) * self.p.heartbeat_interval
                self.at(stop_at, "stop twin", lambda: twin.signal(signal.SIGTERM, self.t))
            self._window(2 * self.p.heartbeat_interval + seconds)

    def _fault_compaction(self) -> None:
        # the least compaction lag a member accepts (4*HB, `min_compaction_lag_ms`) up to 6*HB:
        # the cleaner of a topic a member would refuse is not what a fleet runs on
        lag_ms = min_compaction_lag_ms(self.p.heartbeat_interval) * self.rng.uniform(1.0, 1.5)
        self._compact(int(self.t * 1000 - lag_ms))

    def _fault_eager_compaction(self) -> None:
        """The cleaner with a lag below the safe window (0 to 2*HB): a topic altered after the
        fleet started, which a member checks only at its start. Outside the guarantees on AMO
        loss (a member whose fold the cleaner made uncertain cannot confirm its own
        reservations: "reservation not confirmed" is a fault's refusal); every other invariant
        still holds, `fold_agreement`'s positions included: a compacted reader's estimate (a
        frozen holder's refused release can be its key's newest record within seconds here)
        may differ from the whole log's, never so that a new holder skips or grants twice."""
        self.checker.eager_compaction = True
        self._compact(int((self.t - self.rng.uniform(0, 2) * self.p.heartbeat_interval) * 1000))

    def _compact(self, clean_before: int) -> None:
        self.log.compact(clean_before)
        node = self._victim()
        if node is not None:  # a member restarts and one joins, both reading compacted
            node.kill(self.t)
            self.add_node(node.settings.group, node.settings.client_id, self.t + 0.1)
            self.add_node(node.settings.group, f"new{self.instances}", self.t + 0.1)
        self._window(0.2)

    def _fault_pause(self) -> None:
        group = self.rng.choice(list(self.modes))
        seconds = self.rng.uniform(1, 4) * self.p.heartbeat_interval
        until = int(self.t + seconds) + 1
        msg = ReleaseGroup(int(self.t), "admin-i", ADMIN, group, "", 0, until)
        for part in range(self.log.num_partitions):
            self.log.land(part, record_key(msg), encode(msg), self.t)
        self._window(until - self.t + 1.0)

    def _fault_partitions(self) -> None:
        group = self.rng.choice(list(self.modes))
        self.partition_count[group] += self.rng.randint(1, 4)
        self._window(10.0 + self.p.heartbeat_interval)  # discovery runs every 10 s

    def _window(self, seconds: float) -> None:
        self.fault_windows.append((self.t, self.t + seconds))

    # ---- running ---------------------------------------------------------------------------

    def converged(self) -> bool:
        """Every partition of every group handled by a live child and moving (a record handled
        in the last 2 s; records keep being produced); every member announced; shares fair."""
        t = self.t
        for group in self.modes:
            live = [
                n
                for n in self.nodes
                if n.alive and n.started and not n.frozen(t) and n.settings.group == group
            ]
            if not live:
                return False
            covered = {
                key
                for n in live
                for key, child in n.children.items()
                if child.alive and t >= child.ready_at and child.lease() > t
            }
            if not set(self.keys(group)) - self.poisoned <= covered:
                return False  # (a poisoned partition is parked: held, with no child)
            last = self.checker.last_handled
            moving = [k for k in self.keys(group) if k not in self.poisoned]
            if any(t - last.get(k, -1e9) > 2.0 for k in moving):
                return False  # held but not moving: a wedged partition (records keep coming)
            announced = {n.member.member for n in live if n.member.member in n.member.held}
            if any(n.member.member not in announced for n in live):
                return False  # a member not announced (twins share one announcement)
            members = {n.settings.client_id for n in live}  # twins share one client id
            share = math.ceil(len(self.keys(group)) / len(members))
            if any(len(n.held_data()) > share for n in live):
                return False
        return True

    def _hung_handlers(self, t: float) -> None:
        """No handler call outlives its deadline (plus a scheduling second) under a member."""
        self.checker.mark("handler_deadline")
        for node in self.nodes:
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
        step = 0
        settled = False  # converged at a check in the window after the bound
        while True:
            t = self.advance(step)
            step += 1
            last_end = max((w[1] for w in self.fault_windows), default=0.0)
            done = t >= p.duration and t >= last_end + p.settle + CHECK_WINDOW_S and not self.events
            if done or t >= cap:
                break
            if step % 5 == 0:
                self._hung_handlers(t)
                ok = self.converged()
                if ok and t >= last_end + p.settle:
                    settled = True
                if ok and cold is None and t > 1.0:
                    cold = t - 1.0
                started = [w[0] for w in self.fault_windows if w[0] <= t]
                if started and (open_fault is None or started[-1] > open_fault) and not ok:
                    open_fault = started[-1]
                if ok and open_fault is not None:
                    recoveries.append(t - open_fault)
                    open_fault = None
        last_fault = max((w[1] for w in self.fault_windows), default=0.0)
        checked = self.t >= last_fault + p.settle
        if checked:
            self.checker.mark("liveness")
        if checked and not (settled or self.converged()):
            self.checker.violation(
                "liveness",
                f"not every partition held, handled and fairly shared {self.t - last_fault:.1f}s "
                f"after the last fault (bound {p.settle:.1f}s)",
                self.t,
            )
        reference, noted = self._fold_whole_log()
        readers: list[tuple[str, float, World]] = []
        for node in self.nodes:
            for child in node.children.values():
                if child.alive:  # the run ends while it works: its batches are not lost
                    self.checker.in_progress(child)
            if node.alive and node.started:
                node.catch_up(self.t)
                readers.extend((node.name, self.t, w) for w in node.member.worlds.values())
        # what may lose a poison count: a kill, freeze or stop, or every write of it failing
        faults = {n.settings.instance_id: n.faults + n.counts_lost_to_the_log() for n in self.nodes}
        self.checker.finish(reference, readers, noted, faults)
        self.slices.finish()
        trace = sorted(line for n in self.nodes for line in n.trace)[-30:]
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
        )

    def _fold_whole_log(
        self,
    ) -> tuple[dict[int, World], dict[tuple[ClaimKey, int, int], dict[str, int]]]:
        """The whole, uncompacted log folded (the reference), each member's snapshot judged
        against it at the snapshot's offset on the way, and the poison failures it counted
        per record, epoch (the operator's retries of the record before it) and writer instance.

        A failure is counted once however often the log counted it: a member writes the same
        RecordFailed again when told its write failed (`RecordParking.gave_up`), and a write
        that timed out may have landed too, so the fold counts that one attempt twice (the
        record is parked no later). `poison_bounded` bounds attempts, so two landings of the
        same bytes from one instance are one failure: counting both would let a duplicate
        hide a lost count from the per-member check, and flag a record tried only
        ``park_after`` times (seeds 143, 146 of the all-faults mix)."""
        reference = {q: World(self._rcfg(), q) for q in range(self.log.num_partitions)}
        noted: dict[tuple[ClaimKey, int, int], dict[str, int]] = defaultdict(dict)
        counted: set[tuple[str, bytes | None, int]] = set()  # (writer, record value, epoch)
        epochs: dict[tuple[ClaimKey, int], int] = defaultdict(int)  # operator retries so far
        retried: dict[tuple[ClaimKey, int], int] = {}  # log time of a retry not yet tried
        end_ms = 0
        for q, records in enumerate(self.log.shadow):
            mine = [(w.next_offset, label, at, w) for label, at, w in self.snapshots]
            due = sorted((s for s in mine if s[3].partition == q), key=lambda s: s[0])
            for record in records:
                while due and due[0][0] <= record.offset:  # the reference at the snapshot's offset
                    _, label, at, world = due.pop(0)
                    self.checker.agree(label, world, reference[q], at)
                event = fold(reference[q], record)
                end_ms = max(end_ms, record.timestamp_ms)
                if isinstance(event, PoisonCleared):  # an operator's decision: counted afresh
                    epochs[(event.key, event.message.offset)] += 1
                    decided = event.message
                    if isinstance(decided, PoisonResolved) and decided.action is Action.SKIP:
                        self.checker.skipped.add((event.key, decided.offset))
                    if isinstance(decided, PoisonResolved) and decided.action is Action.RETRY:
                        retried[(event.key, event.message.offset)] = record.timestamp_ms
                elif isinstance(event, PoisonNoted):
                    cleared = retried.pop((event.key, event.message.offset), None)
                    if cleared is not None:
                        self.checker.retry_tried(event.key, cleared, record.timestamp_ms)
                    epoch = epochs[(event.key, event.message.offset)]
                    failure = (event.message.instance_id, record.value, epoch)
                    if failure in counted:
                        continue  # the same failure written again: one attempt
                    counted.add(failure)
                    by = noted[(event.key, event.message.offset, epoch)]
                    by[event.message.instance_id] = by.get(event.message.instance_id, 0) + 1
            for _, label, at, world in due:  # read to the end
                self.checker.agree(label, world, reference[q], at)
        for (key, _), cleared in retried.items():  # never tried again (by the end)
            self.checker.retry_tried(key, cleared, None, end_ms)
        return reference, noted

    def _rcfg(self) -> RationalizerConfig:
        return RationalizerConfig(
            int(self.p.heartbeat_interval * 1000),
            num_partitions=self.p.coordination_partitions,
            admin_client_ids=frozenset({ADMIN}),
        )


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
