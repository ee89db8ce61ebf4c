"""The timed faults of a simulated run (`scenario.Fleet.schedule_faults` draws them): each acts
on the fleet at its time, picks its victim, and opens a window the liveness bound counts from.

A fault is what a real fleet meets: a kill -9, a SIGSTOP, a host stopped with its clocks, an
operator's TERM, a second instance of one client id, the log cleaner (within and below the
safe lag), a group paused, partitions added, a poison record decided by an operator, a
broker's clock jump, a hostile writer, a host's reader of a partition (or a child's consumer)
that fails. `docs/simulator.md` lists them.
"""

from __future__ import annotations

import functools
import random
import signal
from collections.abc import Callable

from marshal_workers.protocol.leases import default_margin, min_compaction_lag_ms
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.recordfailures import (
    Action,
    PoisonResolved,
    encode_poison,
    poison_record_key,
)
from marshal_workers.protocol.wire import (
    ClaimKey,
    Heartbeat,
    ReleaseGroup,
    encode,
    record_key,
)
from marshal_workers.sim import forgery
from marshal_workers.sim.children import SimChild
from marshal_workers.sim.fleetview import FleetView
from marshal_workers.sim.node import SimNode

ADMIN = "marshal-admin"  # the operator's client id (an admin in every member's settings)


def _fed(child: SimChild) -> bool:
    """Whether a lost feed ends ``child`` (alive, not in a hung handler call, its feed not
    lost already: an AMO child hands on what it asked for before it ends)."""
    return child.alive and child.hung_since is None and child.feed_lost_at is None


def has_fed_child(node: SimNode) -> bool:
    """Whether ``node`` has a child that a lost feed ends."""
    return any(_fed(c) for c in node.children.values())


class Faults:
    """The faults of one run, acting on ``fleet``."""

    def __init__(self, fleet: FleetView) -> None:
        self.fleet = fleet

    def victim(
        self, *, on_host: bool = False, running: bool = False, holding: bool = False
    ) -> SimNode | None:
        """A live member, at random. ``on_host``: the fault comes from the member's own host
        (a SIGSTOP, an operator's TERM, a second instance started beside it), so not one whose
        host is stalled: nothing on a paused host acts until it resumes. ``running``: not one
        stopped (frozen or stalled): a host paused while its member is stopped, resumed before
        the member runs again, leaves its children working on the held lease clock with nobody
        to end them (no clock of theirs shows the pause): a named residual risk, not simulated
        (allowed, the sweep found it in 3 of 600 seeds from 90000 of three mixes that freeze:
        90114, 90032, 90018). The same holds for a member stopped after its host resumed and
        before its first turn since (seed 91036 of `freeze,compaction,stall`): an on-host fault
        waits for that turn. ``holding``: one with a child that a lost feed ends
        (`has_fed_child`)."""
        fleet = self.fleet
        live = [n for n in fleet.nodes if n.alive and n.started]
        if on_host:
            live = [n for n in live if not n.stalled(fleet.t) and not n.woke_unseen(fleet.t)]
        if running:
            live = [n for n in live if not n.frozen(fleet.t)]
        if holding:
            live = [n for n in live if has_fed_child(n)]
        return fleet.rng.choice(live) if live else None

    def action(self, fault: str) -> Callable[[], None]:
        return {
            "kill": self.kill,
            "freeze": self.freeze,
            "restart": self.restart,
            "twins": self.twins,
            "compaction": self.compaction,
            "eager-compaction": self.eager_compaction,
            "pause": self.pause,
            "partitions": self.partitions,
            "poison": self.poison,
            "amo-poison": self.amo_poison,
            "clock-jumps": self.clock_jump,
            "forgery": self.forgery,
            "stall": self.stall,
            "feed-loss": self.feed_loss,
            "mixed-modes": self.mixed_modes,
            "forged-takeover": self.forged_takeover,
            "tree-stop": self.tree_stop,
        }[fault]

    def tree_stop(self) -> None:
        """A member's whole process tree is stopped (SIGSTOP to its service's processes: an
        operator, a debugger, a stop of its job) for up to 6*HB with every clock running, then
        continued. Its member sees its lease clock moved on at its first turn, as after a
        freeze. A child stopped in a handler call is continued past its lease, and must not
        complete that call: its SIGCONT handler ends it first (`SimChild.continued`)."""
        fleet = self.fleet
        node = self.victim(running=True)
        if node is not None:
            seconds = fleet.rng.uniform(0.5, 6) * fleet.p.heartbeat_interval
            stopped_at = fleet.t
            node.stop_tree(stopped_at, seconds)
            fleet.at(
                stopped_at + seconds, "continue", lambda: node.continue_tree(fleet.t, stopped_at)
            )
            fleet.window(seconds)

    def mixed_modes(self) -> None:
        """An operator starts a member of a group with the other ``--mode`` (a unit file
        copied from another group's). The group's settings hold its mode, so the member is
        refused at its start (`SimNode.preflight`: exit 2) and writes no claim. Had it run, an
        AMO member would leave the runs it reserved to the ALO owner after it, which resumes
        past them (a review's skip), and an ALO member the records it handled and had not yet
        heartbeated to the AMO owner after it (handed out twice); a member killed as it holds
        them is what `kill` does."""
        fleet = self.fleet
        group = fleet.rng.choice(sorted(fleet.modes))
        other = Mode.ALO if fleet.modes[group] is Mode.AMO else Mode.AMO
        odd = sum(1 for n in fleet.nodes if n.settings.mode is not fleet.modes[n.settings.group])
        fleet.add_node(group, f"odd{odd}", fleet.t, mode=other)
        fleet.window(fleet.p.heartbeat_interval)

    def forged_takeover(self) -> None:
        """A hostile writer with Write on the coordination topic forges a takeover of a live
        member's announcement: a heartbeat of its member claim, under its client id and an
        instance id that nobody runs, stamped by the broker now. The fold takes it for the
        client restarted elsewhere (a client id is self-declared: ACLs are the only defence),
        so the member is replaced; the forger never writes again. One record must not take the
        member down for good: dormant while the forged instance's claim is fresh, it claims
        again once that has fallen silent (`one_instance`)."""
        fleet = self.fleet
        node = self.victim()
        if node is None:
            return
        key = node.member.member
        held = node.member.held.get(key)
        position = held.position if held is not None and held.position is not None else 0
        forged = f"forged{fleet.instances}"  # (no member's instance id: those are i1, i2, ...)
        message = Heartbeat(int(fleet.t), forged, node.settings.client_id, *key, position)
        fleet.log.land(node.member.ctx.home(key), record_key(message), encode(message), fleet.t)
        fleet.window(3 * fleet.p.heartbeat_interval)

    def feed_loss(self) -> None:
        """The records of one data partition stop coming on one member's host: sliced
        (`slice_reads = "host"`), the host's reader of the partition died, froze or broke a
        rule of its feed, and every slice child of the partition there ends with the Kafka exit
        code; a whole partition's child, its consumer failed the same way. Each has published
        what it handled (`SimChild.lose_feed`); the member restarts each claim's child as after
        any crash (a reader is not modelled: the runtime kills it and the next child's start
        brings a new one). A member frozen meanwhile sees the exits when it runs again (its
        reader and children are not stopped with it); not on a stalled host, where nothing
        runs."""
        fleet = self.fleet
        node = self.victim(on_host=True, holding=True)
        if node is None:
            return
        data_key = fleet.cut.data_key
        fed = sorted({data_key(k) for k, c in node.children.items() if _fed(c)})
        data = fleet.rng.choice(fed)
        for key, child in list(node.children.items()):
            if data_key(key) == data:
                child.lose_feed(fleet.t)
        fleet.window(0.0)

    def forgery(self) -> None:
        """A hostile writer appends malformed, extreme and flooding records (`sim.forgery`):
        nothing of the fleet's may change, and no reader may fail."""
        fleet = self.fleet
        forgery.forge(fleet.log, fleet.t, list(fleet.modes), ADMIN, fleet.p.seed)
        fleet.window(0.0)

    def clock_jump(self) -> None:
        """One broker's clock jumps: back by up to HB (its stamps go back; the fold clamps log
        time, so claims there look fresh for longer: liveness waits), or forward by up to the
        lease margin, the most the safety argument covers (a holder's lease ends a margin
        before 2*HB of log time after its heartbeat's send; a bigger forward jump lets a rival
        win while the holder's child may still run: a named residual risk, not simulated)."""
        fleet = self.fleet
        hb = fleet.p.heartbeat_interval
        part = fleet.rng.choice(fleet.log.parts)
        seconds = fleet.rng.uniform(-hb, default_margin(hb))
        part.jump_clock(seconds, fleet.t)
        fleet.window(max(0.0, -seconds) + 2 * hb)

    def poison(self) -> None:
        """A record that always fails, or whose handler call hangs, a little ahead of an ALO
        partition's end: the fleet must count its failures in the log and park it."""
        fleet = self.fleet
        placed = self._place_poison(Mode.ALO)
        if placed is None:
            return
        key, offset = placed
        owner = fleet.cut.owner(fleet.cut.data_key(key), offset)  # (sliced: its slice)
        fleet.poisoned.add(owner)
        fleet.window(0.0)
        # half the time an operator retries it a few HB later (failing by then, or not: then
        # the log refuses the retry); drawn apart, so the fleet's own draws stay as they were
        retries = random.Random(f"{fleet.p.seed}/retry/{offset}")
        if retries.random() < 0.5:
            later = fleet.t + retries.uniform(3, 8) * fleet.p.heartbeat_interval
            action = Action.SKIP if retries.random() < fleet.p.operator_skips else Action.RETRY
            decide = functools.partial(self.decide_record, owner, offset, action)
            fleet.at(later, action.value, decide)

    def amo_poison(self) -> None:
        """A record whose handler raises, or hangs, a little ahead of an AMO partition's end:
        the child ends on it (exit 4 under the `stop` policy, or 10 at the handler deadline),
        the record and the rest of what it had reserved are lost, and the member must report
        that loss as the handler's (`handler_failed`, `amo_loss_reported`), then go on past it
        (nothing is tried twice in AMO: no count parks the claim)."""
        if self._place_poison(Mode.AMO) is not None:
            # reached within a second or two; a hung call ends at the handler deadline
            self.fleet.window(4 * self.fleet.p.heartbeat_interval)  # (the deadline is 2 HB)

    def _place_poison(self, mode: Mode) -> tuple[ClaimKey, int] | None:
        """A record that always fails, or hangs, up to 20 records past the end of a partition
        of a group of ``mode``: its claim key and offset (None: no such group)."""
        fleet = self.fleet
        groups = [g for g, m in fleet.modes.items() if m is mode]
        if not groups:
            return None
        key = fleet.rng.choice(fleet.keys(fleet.rng.choice(groups)))
        data = fleet.data_of(key)
        offset = data.high_watermark(fleet.t) + fleet.rng.randint(0, 20)
        data.poison[offset] = fleet.rng.choice(("fail", "hang"))
        return key, offset

    def decide_record(self, key: ClaimKey, offset: int, action: Action) -> None:
        """An operator's retry of the record (its failure count starts again, and the fleet
        must try it again promptly: `retry_heeded`, the run lasts long enough to see) or skip
        (the holder moves past it). Written whatever the folds say, as any writer may: a
        decision on a record that is not failing (not reached, or displaced by another poison
        record of the claim) is refused by the log, and must change nothing, after the cleaner
        too (`poison_bounded`)."""
        fleet = self.fleet
        msg = PoisonResolved(int(fleet.t), "admin-i", ADMIN, key.group, key.topic,
                             key.partition, offset, action)  # fmt: skip
        home = fleet.layout(key.group).partition_of(key.topic, key.partition)
        fleet.log.land(home, poison_record_key(msg), encode_poison(msg), fleet.t)
        fleet.window(fleet.checker.retry_bound_s)

    def kill(self) -> None:
        fleet = self.fleet
        node = self.victim()
        if node is not None:
            node.kill(fleet.t)
            fleet.window(0.0)
            back = fleet.t + fleet.rng.uniform(0.2, 3 * fleet.p.heartbeat_interval)
            fleet.add_node(node.settings.group, node.settings.client_id, back)
            fleet.window(back - fleet.t)

    def freeze(self) -> None:
        fleet = self.fleet
        node = self.victim(on_host=True)
        if node is not None:
            seconds = fleet.rng.uniform(0.5, 4) * fleet.p.heartbeat_interval
            node.freeze(fleet.t, seconds)
            fleet.window(seconds)

    def stall(self) -> None:
        """A member's host stops with its clock held: suspended on a clock that does not count
        a suspend, or a VM paused without its guest seeing the pause. The member and its
        children do nothing for up to 8*HB, and their lease clock loses that time; the wall
        clock is held too (a VM pause: only the log's time shows it) or jumps (a suspend)."""
        fleet = self.fleet
        node = self.victim(running=True)
        if node is not None:
            seconds = fleet.rng.uniform(0.5, 8) * fleet.p.heartbeat_interval
            node.stall(fleet.t, seconds, wall_held=fleet.rng.random() < 0.5)
            fleet.window(seconds)

    def restart(self) -> None:
        fleet = self.fleet
        node = self.victim(on_host=True)
        if node is not None:
            node.signal(signal.SIGTERM, fleet.t)
            back = fleet.t + fleet.rng.uniform(1, 3) * fleet.p.heartbeat_interval
            fleet.at(back, "restart kill", lambda: node.kill(fleet.t))
            fleet.add_node(node.settings.group, node.settings.client_id, back + 0.01)
            fleet.window(back - fleet.t)

    def twins(self) -> None:
        fleet = self.fleet
        node = self.victim(on_host=True)
        if node is not None:  # a second live instance of one client id (two hosts)
            twin = fleet.add_node(node.settings.group, node.settings.client_id, fleet.t)
            paused = fleet.rng.random() < 0.5  # the old host paused as the twin starts
            seconds = fleet.rng.uniform(0.5, 2) * fleet.p.heartbeat_interval if paused else 0.0
            node.freeze(fleet.t, seconds)
            if fleet.rng.random() < 0.5:  # an operator stops the duplicate soon after
                stop_at = fleet.t + fleet.rng.uniform(0.2, 1.0) * fleet.p.heartbeat_interval
                fleet.at(stop_at, "stop twin", lambda: self._stop_twin(twin))
            fleet.window(2 * fleet.p.heartbeat_interval + seconds)

    def _stop_twin(self, twin: SimNode) -> None:
        """The operator stops the duplicate (TERM). The original, dormant since the duplicate
        replaced it (a frozen one goes dormant when it runs again), claims again once the
        duplicate's release of the announcement is folded: nobody need start it
        (`one_instance` judges that it did)."""
        self.fleet.window(self.fleet.p.heartbeat_interval)
        twin.signal(signal.SIGTERM, self.fleet.t)

    def compaction(self) -> None:
        fleet = self.fleet
        # the least compaction lag a member accepts (4*HB, `min_compaction_lag_ms`) up to 6*HB:
        # the cleaner of a topic a member would refuse is not what a fleet runs on
        lag_ms = min_compaction_lag_ms(fleet.p.heartbeat_interval) * fleet.rng.uniform(1.0, 1.5)
        self.compact(int(fleet.t * 1000 - lag_ms))

    def eager_compaction(self) -> None:
        """The cleaner with a lag below the safe window (0 to 2*HB): a topic altered after the
        fleet started, which a member checks only at its start. Outside the guarantees on AMO
        loss (a member whose fold the cleaner made uncertain cannot confirm its own
        reservations: "reservation not confirmed" is a fault's refusal); every other invariant
        still holds, `fold_agreement`'s positions included: a compacted reader's estimate (a
        frozen holder's refused release can be its key's newest record within seconds here)
        may differ from the whole log's, never so that a new holder skips or grants twice (an
        AMO holder may start above it: what it passes over is such a loss, which no reader of
        the compacted log can report, `Checker.holder_started`)."""
        fleet = self.fleet
        fleet.checker.eager_compaction = True
        self.compact(int((fleet.t - fleet.rng.uniform(0, 2) * fleet.p.heartbeat_interval) * 1000))

    def compact(self, clean_before: int) -> None:
        fleet = self.fleet
        fleet.log.compact(clean_before)
        node = self.victim()
        if node is not None:  # a member restarts and one joins, both reading compacted
            node.kill(fleet.t)
            fleet.add_node(node.settings.group, node.settings.client_id, fleet.t + 0.1)
            fleet.add_node(node.settings.group, f"new{fleet.instances}", fleet.t + 0.1)
        fleet.window(0.2)

    def pause(self) -> None:
        fleet = self.fleet
        group = fleet.rng.choice(list(fleet.modes))
        seconds = fleet.rng.uniform(1, 4) * fleet.p.heartbeat_interval
        until = int(fleet.t + seconds) + 1
        msg = ReleaseGroup(int(fleet.t), "admin-i", ADMIN, group, "", 0, until)
        for part in range(fleet.log.num_partitions):
            fleet.log.land(part, record_key(msg), encode(msg), fleet.t)
        fleet.window(until - fleet.t + 1.0)

    def partitions(self) -> None:
        fleet = self.fleet
        group = fleet.rng.choice(list(fleet.modes))
        fleet.partition_count[group] += fleet.rng.randint(1, 4)
        fleet.window(10.0 + fleet.p.heartbeat_interval)  # discovery runs every 10 s
