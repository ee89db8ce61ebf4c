"""A simulated member: the real core (`core.member.Member`) in a runtime of virtual time.

`SimNode` does what `supervisor.runtime.Supervisor` does, against the virtual log and
simulated children: it feeds the core records, acknowledgements, children's messages and exits,
and ticks, and carries out its commands. It can be killed (its children die with it), frozen
(SIGSTOP: its children run on until their leases end), stalled (a suspended host, or a paused VM
whose guest clocks did not count the pause: the member and its children stop, and their lease
clock, on which the core's ``now`` and the children's lease checks run, loses the stall) and
replaced by a restart.
"""

from __future__ import annotations

import dataclasses
import random
import signal
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, assert_never

from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core import observations as obs
from marshal_workers.core.member import Member
from marshal_workers.core.pending import WRITE_TRIES, Kind
from marshal_workers.core.settings import MemberSettings
from marshal_workers.protocol.members import is_member_key
from marshal_workers.protocol.metadata import (
    needs_recording,
    recorded_problem,
    settings_records,
)
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.wire import (
    Appended,
    ClaimingPartition,
    ClaimKey,
    claim_key,
)
from marshal_workers.sim import pace, releases
from marshal_workers.sim.children import DataPartition, Died, Handled, SimChild
from marshal_workers.sim.lostreleases import LostReleases
from marshal_workers.sim.slices import child_filter
from marshal_workers.sim.vlog import VirtualLog

TRACE_LINES = 40


class LostReported(Protocol):
    """Told each AMO loss a member reports (`AmoLost`): its claim, range, the reporting
    tenure (instance, token) for a refusal, whether a compacted estimate passed it over, its
    cause, whether a write given up on landed (`AmoLost.given_up`), and the exit code of the
    claim's child whose end the member was reading when it reported it (None: reported on
    anything else)."""

    def __call__(
        self,
        key: ClaimKey,
        start: int,
        end: int,
        tenure: tuple[str, int] | None,
        *,
        estimated: bool = False,
        cause: str = "",
        ended: int | None = None,
        given_up: bool = False,
    ) -> None: ...


WALL_EPOCH = 1_790_000_000.0  # virtual time 0 on the hosts' wall clocks (informational only)


@dataclass(slots=True)
class LeaseCell:
    """One claim's lease in "shared memory": the child keeps the cell it was started with."""

    deadline: float = 0.0


@dataclass(slots=True)
class InFlight:
    """An append on its way to the broker."""

    lands_at: float
    op: int
    partition: int
    key: bytes
    value: bytes
    fails: bool
    lands_anyway: bool  # a timeout: the client is told it failed, the record still lands


class SimNode:
    """One member process in virtual time."""

    def __init__(
        self,
        name: str,
        settings: MemberSettings,
        log: VirtualLog,
        data: Callable[[ClaimKey], DataPartition],
        partitions: Callable[[], list[ClaimKey]],
        rng: random.Random,
        on_handled: Handled,
        on_failed: Handled,
        on_died: Died,
        on_violation: Callable[[str, str], None],
        speed: float,
        wall_skew: float = 0.0,
        on_start: Callable[[ClaimKey, int], None] = lambda key, offset: None,
        on_granted: Handled = lambda child, end, t: None,
        on_checked: Callable[[str], None] = lambda invariant: None,
        read_lag_s: float = 0.0,
        on_failure_written: Callable[[str, bytes], None] = lambda instance, value: None,
        on_lost: LostReported | None = None,
    ) -> None:
        self.name = name
        self.settings = settings
        self.member = Member(settings)
        self.log = log
        self.data = data
        self.partitions = partitions
        self.rng = rng
        self.on_handled = on_handled
        self.on_failed = on_failed
        self.on_died = on_died
        self.on_violation = on_violation
        self.on_start = on_start
        self.on_granted = on_granted
        self.on_checked = on_checked
        self.on_failure_written = on_failure_written  # a failure's count written (not again)
        self.on_lost = on_lost  # AMO records it reported lost (`AmoLost`), if told
        self._ending: tuple[ClaimKey, int] | None = None  # a child's end being fed, its code
        self.speed = speed
        self.wall_skew = WALL_EPOCH + wall_skew  # a Unix time, off by the host clock's skew
        self.alive = True
        self.started = False
        self.frozen_until = self.stalled_until = 0.0  # (`stall`: the children stop too)
        # (start, end) of each stall with the wall clock held too (`stopped_between`)
        self.stalls: list[tuple[float, float]] = []
        self.turned_at = -1.0  # when the member last ran its turn
        # coordination records it read and folded (its start's catch-up too), and the span of
        # virtual time it read them over (`member_reads_per_s`)
        self.records_read = 0
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self.clock_lost = 0.0  # seconds the host's lease clock did not count (stalls)
        self.wall_lost = 0.0  # of which its wall clock did not count either
        self.leases: dict[ClaimKey, LeaseCell] = {}
        self.children: dict[ClaimKey, SimChild] = {}
        self.dead_children: list[SimChild] = []
        self.in_flight: list[InFlight] = []
        self.acks: list[inp.Input] = []
        self.answers: list[tuple[float, inp.Input]] = []
        # the coordination partitions it follows (its group's reads: all of them when spread)
        self.cursor = dict.fromkeys(sorted(self.member.worlds), 0)
        self.read_lag_s = read_lag_s  # `read-latency`: its view of the log lags up to this
        self.read_until = 0.0  # the true time its view has reached (it never goes back)
        self.spawned = 0
        self.trace: deque[str] = deque(maxlen=TRACE_LINES)
        self.exit_code: int | None = None
        self.refused: str | None = None  # why its settings were refused at its start
        self.announced = False  # it held its member claim at some turn
        self.faults = 0  # kills, freezes and stops it suffered (each may lose a poison count)
        # failure counts (RecordFailed) the log failed to take, by record: written `WRITE_TRIES`
        # times and failed each time, a count is given up (`RecordParking.gave_up`)
        self.count_write_failures: dict[bytes, int] = {}
        self.releases_seen: list[ClaimKey] = []  # others' releases its fold showed this turn
        self.lost_releases = LostReleases()
        self.pace = pace.HeartbeatPace()  # `heartbeat_pace`

    @property
    def releases_lost(self) -> dict[ClaimKey, tuple[float, float]]:
        """Its releases that did not land, by claim: when the latest was sent and the lease it
        had left then, which the claim waits out before it goes stale (`LostReleases`)."""
        return self.lost_releases.lost

    # ---- life ------------------------------------------------------------------------------

    def start(self, t: float) -> None:
        """Catch up on the whole log as it is now, check the group's settings (`preflight`),
        then begin."""
        self.started_at = t
        self._read(t, lag=False)
        if not self.preflight(t):
            return
        self.started = True
        self._run(self.member.begin(self.local(t), self.wall(t), self.partitions()), t)

    def preflight(self, t: float) -> bool:
        """As the runtime's (`fleet.groupcheck.ensure_group_settings`), in one step: the
        member's settings recorded on each followed partition that has none (or none with a
        mode), folded, and compared with the group's, before and after (the records land at
        once here, so the runtime's home-first order changes nothing). Whether it may begin;
        else it exits 2 with the line (``refused``), having claimed nothing."""
        mine = self.settings.shared
        if mine is None:
            return True
        worlds, group = self.member.worlds, mine.group_id
        if self._settings_problem() is None:
            missing = [
                p for p, w in worlds.items() if needs_recording(w.group_settings.get(group), mine)
            ]
            for part in sorted(missing):
                for key, value in settings_records(mine):
                    self.log.land(part, key, value, t)
            if missing:
                self._read(t, lag=False)
        self.refused = self._settings_problem()
        if self.refused is None:
            return True
        self.exit_code = 2
        self.ended_at, self.alive = t, False
        return False

    def _settings_problem(self) -> str | None:
        mine = self.settings.shared
        assert mine is not None
        worlds = self.member.worlds.values()
        return recorded_problem((w.group_settings.get(mine.group_id) for w in worlds), mine)

    def kill(self, t: float) -> None:
        """kill -9: the member and (parent-death signal) its children end now."""
        if self.alive:
            self.faults += 1
            self.ended_at = t
        self.alive = False
        for child in self.children.values():
            child.die(-signal.SIGKILL, t)

    def signal(self, sig: signal.Signals, t: float) -> None:
        """A signal to the member process (its handler enqueues it; the core acts on it)."""
        if self.alive and self.started:
            self._feed(inp.SignalReceived(self.local(t), sig), t)

    def catch_up(self, t: float) -> None:
        """Fold every record the log has now (for the end-of-run comparison; not counted as
        the member's reading)."""
        self._read(t, lag=False, counted=False)

    def reserving(self) -> list[tuple[ClaimKey, int, int]]:
        """The AMO reservations the member has written and has no verdict on yet, and what its
        claims carry for a child not started yet (`HeldClaim.carry`): in its hands."""
        ops = self.member.ctx.pending.ops.values()
        held = self.member.ctx.held.values()
        carried = [(h.key, *h.carry) for h in held if h.carry is not None]
        return [(o.key, o.start, o.end) for o in ops if o.kind is Kind.RESERVE] + carried

    def freeze(self, t: float, seconds: float) -> None:
        """SIGSTOP for ``seconds``: the member does nothing; its children run on."""
        self.faults += 1
        self.frozen_until = max(self.frozen_until, t + seconds)

    def stop_tree(self, t: float, seconds: float) -> None:
        """SIGSTOP of the member's whole process tree for ``seconds``, every clock running: the
        member and its children do nothing; `continue_tree` ends it."""
        self.faults += 1
        self.stalled_until = max(self.stalled_until, t + seconds)
        self.frozen_until = max(self.frozen_until, t + seconds)

    def continue_tree(self, t: float, stopped_at: float) -> None:
        """SIGCONT to every process of the tree stopped at ``stopped_at`` (`stop_tree`), before
        any of them runs on."""
        for child in self.children.values():
            child.continued(t, stopped_at)

    def stall(self, t: float, seconds: float, *, wall_held: bool) -> None:
        """A suspended host, or a paused VM whose guest clocks do not see the pause, for
        ``seconds``: the member and its children do nothing, and the lease clock they share
        does not count the time (``wall_held``: nor does the wall clock; else the wall clock
        jumps by it, as after a suspend on a clock that does not count one)."""
        self.faults += 1
        end = t + seconds
        lost = max(0.0, end - max(t, self.stalled_until))
        self.clock_lost += lost
        if wall_held:
            self.wall_lost += lost
        self.stalled_until = max(self.stalled_until, end)
        self.frozen_until = max(self.frozen_until, end)
        if wall_held:
            self.stalls.append((t, end))

    def stopped_between(self, start: float, end: float) -> float:
        """The seconds of ``start``..``end`` its host was stalled with every clock held (stalls
        may overlap): a pause nothing on the host can see until a record of the log shows it.
        A stall the wall clock counts is seen at the member's first turn after it, so time
        its children handle after one is not excused (a review: with that detection disabled,
        only the rehandle bound found the children handling on)."""
        stopped, reach = 0.0, start
        for begun, ended in sorted(self.stalls):
            a, b = max(begun, reach), min(ended, end)
            if b > a:
                stopped += b - a
                reach = b
        return stopped

    def stalled(self, t: float) -> bool:
        """Whether the host (member and children) is stopped at ``t``."""
        return t < self.stalled_until

    def woke_unseen(self, t: float) -> bool:
        """Whether its host resumed from a stall and the member has not run a turn since (its
        children already run, on the held clock, until that turn sees the pause)."""
        return self.turned_at < self.stalled_until <= t

    def local(self, t: float) -> float:
        """The host's lease clock at true time ``t`` (read only while it runs)."""
        return t - self.clock_lost

    def counts_lost_to_the_log(self) -> int:
        """Failure counts the log lost: every write of the record failed without landing
        (`WRITE_TRIES` of them; a write that timed out but landed is counted by the log)."""
        return sum(1 for n in self.count_write_failures.values() if n >= WRITE_TRIES)

    def frozen(self, t: float) -> bool:
        """Whether the member is stopped at ``t``."""
        return t < self.frozen_until

    # ---- one step --------------------------------------------------------------------------

    def land_appends(self, t: float) -> None:
        """The broker's side: appends sent before ``t`` land (even while the member is frozen
        or dead: they were on the wire)."""
        still: list[InFlight] = []
        for f in self.in_flight:
            if f.lands_at > t:
                still.append(f)
                continue
            if f.fails and f.value.startswith(b"RecordFailed/"):
                failed = self.count_write_failures
                failed[f.value] = failed.get(f.value, 0) + (not f.lands_anyway)
            if f.fails and not f.lands_anyway:
                self.acks.append(inp.AppendFailed(t, f.op, "simulated append failure"))
                continue
            record = self.log.land(f.partition, f.key, f.value, f.lands_at)
            if f.fails:
                self.acks.append(inp.AppendFailed(t, f.op, "simulated timeout"))
            else:
                appended = Appended(record.partition, record.offset, record.timestamp_ms)
                self.acks.append(inp.AppendDone(t, f.op, appended))
        self.in_flight = still

    def step(self, t: float, dt: float) -> None:
        """The runtime's turn at ``t`` (nothing while dead or frozen)."""
        if not self.alive or not self.started or self.frozen(t):
            return
        self.turned_at = t
        if not self.announced and self.member.member in self.member.held:
            self.announced = True
        now = self.local(t)
        # the clocks and the log first, as the runtime's turn (`Supervisor.step`)
        self._feed(inp.ClocksRead(now, self.wall(t)), t)
        self._read(t)
        acks, self.acks = self.acks, []
        self.rng.shuffle(acks)
        for ack in acks:
            self._feed(dataclasses.replace(ack, now=now), t)
        for key, child in list(self.children.items()):
            for message in child.outbox:
                self._feed(inp.ChildSaid(now, key, message), t)
            child.outbox.clear()
        due = [a for a in self.answers if a[0] <= t]
        self.answers = [a for a in self.answers if a[0] > t]
        for _, late in due:
            answer = dataclasses.replace(late, now=now)  # (when the runtime reads it)
            self._feed(answer, t)
        for key, child in list(self.children.items()):
            if not child.alive:
                del self.children[key]
                self.dead_children.append(child)
                assert child.exit_code is not None
                alo = child.spec.mode is Mode.ALO
                position = child.published if alo else child.position  # AMO: handled end
                self._ending = (key, child.exit_code)  # (the losses it reports: `_observe`)
                exited = inp.ChildExited(
                    now, key, child.exit_code, child.end, position, child.stopped_at
                )
                self._feed(exited, t)
                self._ending = None
        positions = {k: c.published for k, c in self.children.items() if c.published is not None}
        self._feed(inp.Tick(now, self.wall(t), positions), t)
        self._check_releases(now)

    def _check_releases(self, now: float) -> None:
        """`release_claimed`, for every release by another member folded in this turn (``now``
        on the member's own lease clock, as its turn saw it)."""
        seen, self.releases_seen = self.releases_seen, []
        for key in seen:
            self.on_checked(releases.INVARIANT)
            why = releases.left_unclaimed(self.member, key, now)
            if why is not None:
                self.on_violation(
                    releases.INVARIANT, f"{self.name}: {key.topic}/{key.partition} {why}"
                )

    def wall(self, t: float) -> float:
        """The host's wall clock (Unix seconds) at true time ``t``."""
        return t + self.wall_skew - self.wall_lost

    def step_children(self, t: float, dt: float) -> None:
        """The children's turn (they run even while the member is frozen, not in a stall)."""
        if self.stalled(t):
            return
        for child in self.children.values():
            child.step(t, dt)

    def _read(self, t: float, *, lag: bool = True, counted: bool = True) -> None:
        """Fold what the log has: all of it, or with a read lag what had landed a random
        delay ago (a consumer's fetch behind the log's end; in offset order, never back)."""
        until = None
        if lag and self.read_lag_s > 0:
            self.read_until = max(self.read_until, t - self.rng.uniform(0, self.read_lag_s))
            until = self.read_until
        elif not lag:
            self.read_until = max(self.read_until, t)
        records = []
        parts = self.log.parts
        for p, at in self.cursor.items():
            got = parts[p].read_from(at, until)
            if got:
                self.cursor[p] = got[-1].offset + 1
                records.extend(got)
        if records:
            if counted:
                self.records_read += len(records)
            self._feed(inp.RecordsRead(self.local(t), records), t)

    @property
    def followed(self) -> frozenset[int]:
        """The coordination partitions it reads."""
        return frozenset(self.cursor)

    def reads_per_s(self, end: float) -> float | None:
        """Coordination records it read and folded per second of virtual time while it ran
        (None for a member that never started or ran no time)."""
        if self.started_at is None:
            return None
        until = self.ended_at if self.ended_at is not None else end
        span = until - self.started_at
        return self.records_read / span if span > 0 else None

    def _feed(self, event: inp.Input, t: float) -> None:
        self._run(self.member.feed(event), t)

    # ---- commands --------------------------------------------------------------------------

    def _run(self, commands: list[cmd.Command], t: float) -> None:
        """Carry out the core's commands at ``t`` as the runtime does (`Supervisor._run`, the
        other interpreter; tests/sim/test_command_contract.py holds the two to the same effects),
        on the virtual log and the simulated children."""
        for c in commands:
            match c:
                case cmd.Append():
                    self._append(c, t)
                case cmd.SetLease():
                    self._set_lease(c.key, c.deadline)
                case cmd.DropLease():
                    self._drop_lease(c.key)
                case cmd.Spawn():
                    self._spawn(c, t)
                case cmd.SignalChild():
                    self._signal_child(c, t)
                case cmd.TellChild():
                    self._tell_child(c, t)
                case cmd.LookupStart():
                    self._lookup_start(c.key, t)
                case cmd.Discover():
                    found = inp.PartitionsFound(
                        t + 0.01, self.partitions(), self.log.num_partitions
                    )
                    self.answers.append((t + 0.01, found))
                case cmd.FindLogEnd():  # the followed partitions' ends as the broker has them now
                    ends = {p: self.log.parts[p].next_offset for p in self.cursor}
                    self.answers.append((t + 0.01, inp.LogEndFound(t + 0.01, ends)))
                case cmd.Observe():
                    self._observe(c.what)
                case cmd.Log():
                    self._trace(c, t)
                case cmd.Exit():
                    self.exit_code = c.code
                    self.kill(t)
                case _:
                    assert_never(c)

    def _set_lease(self, key: ClaimKey, deadline: float) -> None:
        """As the runtime's shared lease: 0 revokes it; any other deadline only moves it later
        (`SharedLease.extend_to`)."""
        cell = self.leases.setdefault(key, LeaseCell())
        cell.deadline = 0.0 if deadline == 0.0 else max(cell.deadline, deadline)

    def _drop_lease(self, key: ClaimKey) -> None:
        dropped = self.leases.pop(key, None)
        if dropped is not None:
            dropped.deadline = 0.0

    def _signal_child(self, c: cmd.SignalChild, t: float) -> None:
        child = self.children.get(c.key)
        if child is not None and c.signal is signal.SIGTERM:
            child.terminate(t)  # (at the next record boundary)
        elif child is not None:
            child.die(-c.signal, t)

    def _tell_child(self, c: cmd.TellChild, t: float) -> None:
        child = self.children.get(c.key)
        if child is not None:
            child.receive(c.message, t)

    def _lookup_start(self, key: ClaimKey, t: float) -> None:
        """Answer at once with the retained range's end the reset names."""
        latest = self.settings.child.auto_offset_reset == "latest"
        offset = self.data(key).high_watermark(t) if latest else 0  # (nothing expires here)
        self.answers.append((t + 0.01, inp.StartFound(t + 0.01, key, offset)))

    def _observe(self, what: obs.Observation) -> None:
        """The runtime's observers (metrics, systemd, offsets) are not simulated: only the
        releases seen and the AMO losses reported are kept (for the checks)."""
        if isinstance(what, obs.ReleaseSeen):
            self.releases_seen.append(what.key)
        elif isinstance(what, obs.AmoLost) and self.on_lost is not None:
            refused = what.cause is obs.LossCause.REFUSED and what.token is not None
            tenure = (
                (self.settings.instance_id, what.token)
                if refused and what.token is not None
                else None
            )
            estimated = what.cause is obs.LossCause.ESTIMATE
            ending = self._ending
            ended = ending[1] if ending is not None and ending[0] == what.key else None
            self.on_lost(
                what.key,
                what.start,
                what.end,
                tenure,
                estimated=estimated,
                cause=what.cause.value,
                ended=ended,
                given_up=what.given_up,
            )

    def _trace(self, c: cmd.Log, t: float) -> None:
        """The log lines a run's trace keeps: warnings, errors, claims won."""
        if c.level in ("warning", "error") or c.event in ("claim_won", "claim_resumed"):
            self.trace.append(f"{t:9.3f} {self.name} {c.event} {dict(c.fields)}")

    def _append(self, c: cmd.Append, t: float) -> None:
        """An append in flight on the virtual log, checked for isolation and pauses."""
        group = self.settings.group
        self.on_checked("isolation")
        if c.message.group_id != group:
            self.on_violation(
                "isolation",
                f"{self.name} of group {group} wrote {type(c.message).__name__}"
                f" for group {c.message.group_id}",
            )
        self._check_pause(c, t)
        self._check_pace(c, t)
        if c.value.startswith(b"RecordFailed/"):
            op = self.member.ctx.pending.ops.get(c.op)
            if op is not None and op.tries == 0:  # not the same count written again
                self.on_failure_written(self.settings.instance_id, c.value)
        fails = self.log.fails(c.partition)
        # one producer delivers in order per partition (idempotence): never overtake
        lands_at = max(
            [t + self.log.latency(c.partition)]
            + [f.lands_at for f in self.in_flight if f.partition == c.partition]
        )
        lands_anyway = fails and self.rng.random() < 0.5
        self.in_flight.append(
            InFlight(lands_at, c.op, c.partition, c.key, c.value, fails, lands_anyway)
        )
        lands = not fails or lands_anyway
        self.lost_releases.sent(c.message, lands, t, self.local(t), self.member)

    def _check_pace(self, c: cmd.Append, t: float) -> None:
        """``heartbeat_pace``: at most two heartbeats of a claim's tenure in any HB/4."""
        op = self.member.ctx.pending.ops.get(c.op)
        if op is None or op.kind is not Kind.HEARTBEAT:
            return
        held = self.member.ctx.held.get(op.key)
        self.on_checked("heartbeat_pace")
        hb = self.settings.heartbeat_interval
        token = -1 if held is None else held.token
        many = self.pace.beat(op.key, token, self.local(t), hb)
        if many is not None:
            self.on_violation(
                "heartbeat_pace",
                f"{self.name} wrote {many} heartbeats of {op.key.topic}/{op.key.partition} "
                f"(token {token}) within {pace.WINDOW_HB}*HB, at {t:.2f}",
            )

    def _check_pause(self, c: cmd.Append, t: float) -> None:
        """``pause_respected``: no data claim is written while the member's own fold shows
        another client's pause of its group in force."""
        message = c.message
        if not isinstance(message, ClaimingPartition) or is_member_key(claim_key(message)):
            return
        self.on_checked("pause_respected")
        pause = self.member.pause(self.local(t))
        if pause is not None:
            self.on_violation(
                "pause_respected",
                f"{self.name} claimed {message.topic}/{message.partition} during the pause by "
                f"{pause.client_id} until {pause.until_ms}",
            )

    def _spawn(self, c: cmd.Spawn, t: float) -> None:
        self.spawned += 1
        key = c.key
        cell = self.leases.setdefault(key, LeaseCell())
        child = SimChild(
            cid=f"{self.name}/{key.topic}/{key.partition}#{self.spawned}",
            key=key,
            spec=c.spec,
            lease=lambda: self._lease_in_true_time(cell),
            data=self.data(key),
            speed=self.speed,
            ready_at=t + self.rng.uniform(0.1, 0.3),
            on_handled=self.on_handled,
            on_failed=self.on_failed,
            on_died=self.on_died,
            takes=child_filter(c.spec.slice),  # what the core told it to take
            on_granted=self.on_granted,
        )
        self.children[key] = child
        if c.spec.start_offset is not None:  # where the claim's records are owed from, if first
            self.on_start(key, c.spec.start_offset)
        self.trace.append(
            f"{t:9.3f} {self.name} spawn {key.topic}/{key.partition} "
            f"at {c.spec.start_offset} token {c.spec.fencing_token}"
        )

    def _lease_in_true_time(self, cell: LeaseCell) -> float:
        """A child's lease as the true time its lease clock reaches it (0: revoked). The
        child reads its lease on the host's lease clock, which loses what stalls lost; a sim
        child compares true time, so the deadline is moved by what the clock has lost (it only
        checks while the host runs)."""
        deadline = cell.deadline
        return deadline + self.clock_lost if deadline else 0.0

    def held_data(self) -> list[ClaimKey]:
        """The data claims the core counts as held."""
        return [k for k in self.member.held if not is_member_key(k)]
