"""The supervisor: claims partitions through the coordination log and runs one child per claim.

Theory of operation
-------------------
One thread runs a loop (`step`). Each turn it waits briefly on its children's pipes and the
signal pipe, handles what the children said, folds whatever the coordination log delivered and
acts on the verdicts, then runs its timers: heartbeats every HB/2, lease deadlines, the claim
engine, partition discovery, and restarts of failed children.

Every coordination write goes through `_send`, which returns only once the log acknowledged
the record (so its partition and offset are known). A heartbeat's send time is kept under
that position; when the fold accepts that very record, the claim's lease becomes
send time + 2*HB - margin (DESIGN.md section 3). A claim is decided by the fold of the log up
to the claimer's own record (`LogReader.wait_for`), never by what the claimer believes.

When the fold shows a claim lost (a heartbeat refused, a newer instance of this client took
it over), or its lease is about to run out, the child's process group is sent TERM, then KILL,
both before the lease ends; the child's own watchdog ends it at the deadline regardless.
"""

from __future__ import annotations

import contextlib
import random
import signal
import time
from collections.abc import Callable
from multiprocessing import connection
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext

import structlog

from marshal_workers import events as ev
from marshal_workers import ipc
from marshal_workers.child import EXIT_HANDLER_FAILED, start_child
from marshal_workers.claims import is_member_key, member_key, plan
from marshal_workers.config import RunConfig
from marshal_workers.coordlog import Appended, CoordinationLog, LogError
from marshal_workers.datatopics import DataTopics
from marshal_workers.holding import Holding, Phase
from marshal_workers.lease import SharedLease, default_margin, lease_deadline
from marshal_workers.protocol import (
    ClaimingMessages,
    ClaimingPartition,
    ClaimKey,
    Heartbeat,
    Message,
    ReleasingPartition,
    coordination_partition,
    encode,
    record_key,
)
from marshal_workers.rationalizer import ClaimState, resume_offset
from marshal_workers.reader import LogReader

Clock = Callable[[], float]
DISCOVERY_INTERVAL_S = 10.0


class CoordinationChangedError(Exception):
    """The coordination topic's partition count changed: coordination cannot go on."""


class Supervisor:
    """Holds claims for one client id and runs their children."""

    def __init__(
        self,
        config: RunConfig,
        log: CoordinationLog,
        reader: LogReader,
        topics: DataTopics,
        mp_context: SpawnContext,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
        wake_fd: int | None = None,
    ) -> None:
        self.config = config
        self.log = log
        self.reader = reader
        self.topics = topics
        self.mp = mp_context
        self.clock = clock
        self.wall = wall
        self.wake_fd = wake_fd
        self.hb = config.heartbeat_interval
        self.margin = default_margin(self.hb)
        self.kill_grace = min(1.0, self.hb / 4)
        self.holdings: dict[ClaimKey, Holding] = {}
        self.partitions: list[ClaimKey] = []
        self.avoid_until: dict[ClaimKey, float] = {}
        self.stopping = False
        self.stop_deadline = 0.0
        self.done = False
        self._sent: dict[tuple[int, int], tuple[ClaimKey, float]] = {}
        self._next_heartbeat = 0.0
        self._next_claim = 0.0
        self._next_release = 0.0
        self._next_discovery = 0.0
        self._seen_log_time = (0, clock())
        self.log_ = structlog.get_logger().bind(
            group=config.group, client_id=config.client_id, instance_id=config.instance_id
        )

    # ---- start and recovery -------------------------------------------------------------

    def start(self, catch_up_timeout: float = 60.0) -> None:
        """Catch up on the log, resume this client's fresh claims, announce the member."""
        folded = self.reader.catch_up(catch_up_timeout)
        self._note_log_time()
        self.partitions = self.topics.partitions()
        self._next_discovery = self.clock() + DISCOVERY_INTERVAL_S
        self.log_.info("caught up", records=folded, partitions=len(self.partitions))
        for key, state in list(self._view().items()):
            if state.certain and state.holder_client == self.config.client_id:
                self._resume(key, state)
        if member_key(self.config.group, self.config.client_id) not in self.holdings:
            self._claim(member_key(self.config.group, self.config.client_id))

    def _resume(self, key: ClaimKey, state: ClaimState) -> None:
        """Take a fresh claim of this client over with a heartbeat (restart recovery)."""
        position = self._start_position(key, state)
        sent_at = self.clock()
        verdict = self._send_and_fold(self._heartbeat_msg(key, position))
        if not isinstance(verdict, ev.HeartbeatAccepted):
            return
        lease = SharedLease(self.mp)
        lease.extend_to(lease_deadline(sent_at, self.hb, self.margin))
        holding = Holding(
            key,
            verdict.coord_partition,
            verdict.token,
            position,
            lease,
            is_member=is_member_key(key),
        )
        self.holdings[key] = holding
        self.log_.info(
            "claim resumed",
            topic=key.topic,
            partition=key.partition,
            token=verdict.token,
            replaced=verdict.replaced_instance,
        )
        if not holding.is_member:
            self._spawn(holding)

    # ---- the loop -----------------------------------------------------------------------

    def step(self, signals: list[signal.Signals], wait_s: float = 0.05) -> None:
        """One turn of the loop."""
        for sig in signals:
            self._on_signal(sig)
        conns = {h.child.conn: h for h in self.holdings.values() if h.child is not None}
        waitables: list[Connection | int] = [*conns]
        if self.wake_fd is not None:
            waitables.append(self.wake_fd)
        if waitables:
            ready = connection.wait(waitables, timeout=wait_s)
        else:
            time.sleep(wait_s)
            ready = []
        for conn in ready:
            if conn in conns:
                self._read_child(conns[conn])
        self._fold(self.reader.poll(0))
        now = self.clock()
        self._check_children(now)
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + self.hb / 2
            for holding in list(self.holdings.values()):
                if holding.phase is not Phase.LOST:
                    self._heartbeat(holding)
        if self.stopping:
            self._advance_stop(now)
            return
        if now >= self._next_discovery:
            self._discover()
        if now >= self._next_claim:
            self._rebalance(now)

    def _on_signal(self, sig: signal.Signals) -> None:
        if sig is signal.SIGTERM and not self.stopping:
            self.request_stop(fast=False)
        elif sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            self.request_stop(fast=True)

    # ---- coordination writes --------------------------------------------------------------

    def _message_partition(self, key: ClaimKey) -> int:
        return coordination_partition(
            key.topic, key.partition, self.log.num_partitions, self.config.partitioner
        )

    def _send(self, msg: Message, timeout_s: float) -> Appended | None:
        key = ClaimKey(msg.group_id, msg.topic, msg.partition)
        try:
            return self.log.append(
                self._message_partition(key), record_key(msg), encode(msg), timeout_s
            )
        except LogError as exc:
            self.log_.warning(
                "coordination write failed",
                message=type(msg).__name__,
                topic=msg.topic,
                partition=msg.partition,
                error=str(exc),
            )
            return None

    def _send_and_fold(self, msg: Message) -> ev.Event | None:
        """Append and fold up to that record; return the verdict on it (None on failure)."""
        sent_at = self.clock()
        appended = self._send(msg, timeout_s=max(2.0, self.hb))
        if appended is None:
            return None
        if isinstance(msg, Heartbeat):
            self._sent[(appended.partition, appended.offset)] = (
                ClaimKey(msg.group_id, msg.topic, msg.partition),
                sent_at,
            )
        try:
            verdict, folded = self.reader.wait_for(appended, timeout_s=max(5.0, 2 * self.hb))
        except LogError as exc:
            self.log_.warning("own record not folded", error=str(exc))
            return None
        self._fold(folded)
        self._fold([verdict])
        return verdict

    def _heartbeat_msg(self, key: ClaimKey, position: int) -> Heartbeat:
        c = self.config
        return Heartbeat(
            int(self.wall()),
            c.instance_id,
            c.client_id,
            key.group,
            key.topic,
            key.partition,
            position,
        )

    def _heartbeat(self, holding: Holding) -> None:
        sent_at = self.clock()
        appended = self._send(
            self._heartbeat_msg(holding.key, holding.position),
            timeout_s=max(0.2, min(1.0, self.hb / 4)),
        )
        if appended is not None:
            self._sent[(appended.partition, appended.offset)] = (holding.key, sent_at)

    # ---- verdicts -------------------------------------------------------------------------

    def _note_log_time(self) -> None:
        latest = max((w.log_time for w in self.reader.worlds.values()), default=0)
        if latest > self._seen_log_time[0]:
            self._seen_log_time = (latest, self.clock())

    def _now_ms(self) -> int:
        """An estimate of the log's current time: the newest log time plus time since."""
        seen, at = self._seen_log_time
        return seen + int((self.clock() - at) * 1000)

    def _view(self) -> dict[ClaimKey, ClaimState]:
        view: dict[ClaimKey, ClaimState] = {}
        for world in self.reader.worlds.values():
            view.update(world.claims)
        return view

    def _fold(self, events: list[ev.Event]) -> None:
        for event in events:
            self._on_event(event)
        if events:
            self._note_log_time()
        horizon = self.clock() - 4 * self.hb
        for position in [p for p, (_, at) in self._sent.items() if at < horizon]:
            del self._sent[position]

    def _on_event(self, e: ev.Event) -> None:
        if not isinstance(e, ev.ClaimVerdict):
            return
        sent = self._sent.pop((e.coord_partition, e.coord_offset), None)
        holding = self.holdings.get(e.key)
        if holding is None or holding.phase is Phase.LOST:
            return
        mine = e.client_id == self.config.client_id
        if isinstance(e, ev.HeartbeatAccepted):
            if mine and e.instance_id != self.config.instance_id:
                self._lose(holding, f"taken over by instance {e.instance_id}")
            elif sent is not None and e.token == holding.token:
                holding.lease.extend_to(lease_deadline(sent[1], self.hb, self.margin))
        elif isinstance(e, ev.HeartbeatRejected) and sent is not None:
            self._lose(holding, f"heartbeat refused: {e.reason}")
        elif isinstance(e, ev.ClaimGranted) and e.token != holding.token:
            self._lose(holding, f"claimed by {e.client_id}")

    def _lose(self, holding: Holding, reason: str) -> None:
        """The claim is no longer ours: revoke the lease, kill the child, forget the claim."""
        self.log_.warning(
            "claim lost", topic=holding.key.topic, partition=holding.key.partition, reason=reason
        )
        holding.phase, holding.lost_reason, holding.release_when_stopped = Phase.LOST, reason, False
        holding.lease.revoke()
        if holding.child is not None:
            holding.child.signal_group(signal.SIGKILL)
            holding.kill_sent = True

    # ---- children -------------------------------------------------------------------------

    def _start_position(self, key: ClaimKey, state: ClaimState | None) -> int:
        known = resume_offset(state, self.config.mode)
        if known is not None:
            return known
        low, high = self.topics.watermarks(key.topic, key.partition)
        return low if self.config.auto_offset_reset == "earliest" else high

    def _spawn(self, holding: Holding) -> None:
        c = self.config
        spec = ipc.ChildSpec(
            handler=c.handler,
            mode=c.mode,
            bootstrap_servers=c.bootstrap_servers,
            group_id=c.group,
            client_id=c.client_id,
            instance_id=c.instance_id,
            topic=holding.key.topic,
            partition=holding.key.partition,
            start_offset=holding.position,
            fencing_token=holding.token,
            auto_offset_reset=c.auto_offset_reset,
            batch_size=c.batch_size,
            kafka_config=tuple(sorted(c.kafka.items())),
            log_json=c.log_json,
        )
        holding.child = start_child(spec, holding.lease, self.mp)
        holding.term_sent = holding.kill_sent = False
        self.log_.info(
            "child started",
            topic=spec.topic,
            partition=spec.partition,
            pid=holding.child.pid,
            position=holding.position,
            token=holding.token,
        )

    def _read_child(self, holding: Holding) -> None:
        assert holding.child is not None
        conn = holding.child.conn
        try:
            while conn.poll():
                self._on_child_message(holding, conn.recv())
        except (EOFError, OSError):
            pass  # the child is gone; _check_children reaps it

    def _on_child_message(self, holding: Holding, msg: ipc.ToSupervisor) -> None:
        if isinstance(msg, ipc.Progress):
            holding.position = msg.next_offset
        elif isinstance(msg, ipc.GrantRequest):
            self._grant(holding, msg)
        elif isinstance(msg, ipc.HandlerFailed):
            same = holding.failed_offset == msg.offset
            holding.failures = holding.failures + 1 if same else 1
            holding.failed_offset = msg.offset
            self.log_.error(
                "handler failed",
                topic=holding.key.topic,
                partition=holding.key.partition,
                offset=msg.offset,
                error=msg.error,
                failures=holding.failures,
            )
        elif isinstance(msg, ipc.Stopped) and msg.next_offset is not None:
            holding.position = msg.next_offset

    def _grant(self, holding: Holding, req: ipc.GrantRequest) -> None:
        """AMO: reserve the batch in the log, check the verdict, commit, and only then grant."""
        refusal = None
        if holding.phase is not Phase.RUNNING or not holding.lease.valid():
            refusal = "claim not held"
        elif req.start < holding.position:
            refusal = f"batch starts at {req.start}, before the position {holding.position}"
        if refusal is None:
            c, key = self.config, holding.key
            reserve = ClaimingMessages(
                int(self.wall()),
                c.instance_id,
                c.client_id,
                key.group,
                key.topic,
                key.partition,
                req.end,
            )
            verdict = self._send_and_fold(reserve)
            if not isinstance(verdict, ev.MessagesClaimed) or holding.phase is not Phase.RUNNING:
                refusal = getattr(verdict, "reason", "reservation not confirmed")
            else:
                holding.position = req.end
                self._heartbeat(holding)  # the committing heartbeat
        _tell(holding, ipc.Grant(req.request_id, refusal is None, refusal or ""))

    def _check_children(self, now: float) -> None:
        for holding in list(self.holdings.values()):
            child = holding.child
            if child is None:
                if (
                    holding.phase is Phase.RUNNING
                    and not holding.is_member
                    and now >= holding.restart_at
                ):
                    self._spawn(holding)
                elif holding.phase is not Phase.RUNNING:
                    self._finish(holding)
                continue
            remaining = holding.lease.deadline - now
            if holding.phase is Phase.STOPPING and now >= holding.stop_deadline:
                remaining = min(remaining, 0.0)
            if remaining <= self.kill_grace and not holding.term_sent:
                child.signal_group(signal.SIGTERM)
                holding.term_sent = True
            if remaining <= self.kill_grace / 3 and not holding.kill_sent:
                child.signal_group(signal.SIGKILL)
                holding.kill_sent = True
            if child.exitcode is not None:
                self._read_child(holding)
                self._on_exit(holding, child.exitcode, now)

    def _on_exit(self, holding: Holding, code: int, now: float) -> None:
        if holding.child is not None:
            holding.child.close()
        holding.child = None
        key = holding.key
        self.log_.info(
            "child exited",
            topic=key.topic,
            partition=key.partition,
            code=code,
            phase=holding.phase.value,
        )
        if holding.phase is not Phase.RUNNING:
            self._finish(holding)
            return
        if not holding.lease.valid():  # heartbeats were not confirmed in time
            self.log_.warning("lease expired", topic=key.topic, partition=key.partition)
            self.avoid_until[key] = now + self.hb
            holding.phase = Phase.STOPPING  # the child is dead: releasing is safe, and the
            self._finish(holding)  # log refuses the release if the claim was taken meanwhile
            return
        if code == EXIT_HANDLER_FAILED and holding.failures >= self.config.max_handler_failures:
            self.log_.error(
                "releasing partition after repeated handler failures",
                topic=key.topic,
                partition=key.partition,
                offset=holding.failed_offset,
                failures=holding.failures,
            )
            self.avoid_until[key] = now + max(60.0, 10 * self.hb)
            holding.phase = Phase.STOPPING
            self._finish(holding)
            return
        backoff = min(30.0, 0.5 * 2 ** max(0, holding.failures - 1)) if code else 0.5
        holding.restart_at = now + backoff

    def _finish(self, holding: Holding) -> None:
        """The child is gone: release the claim if it ended gracefully, then forget it."""
        if holding.phase is Phase.STOPPING and holding.release_when_stopped:
            self._release(holding)
        self.holdings.pop(holding.key, None)

    def _release(self, holding: Holding) -> None:
        c, key = self.config, holding.key
        msg = ReleasingPartition(
            int(self.wall()),
            c.instance_id,
            c.client_id,
            key.group,
            key.topic,
            key.partition,
            holding.position,
        )
        verdict = self._send_and_fold(msg)
        self.log_.info(
            "claim released",
            topic=key.topic,
            partition=key.partition,
            position=holding.position,
            confirmed=isinstance(verdict, ev.Released),
        )

    def _stop_child(self, holding: Holding, deadline: float) -> None:
        holding.phase = Phase.STOPPING
        holding.stop_deadline = deadline  # the lease still ends it earlier if heartbeats fail
        _tell(holding, ipc.Stop())

    # ---- claiming and rebalancing --------------------------------------------------------

    def _claim(self, key: ClaimKey) -> bool:
        c = self.config
        sent_at = self.clock()
        msg = ClaimingPartition(
            int(self.wall()), c.instance_id, c.client_id, key.group, key.topic, key.partition
        )
        verdict = self._send_and_fold(msg)
        if not isinstance(verdict, ev.ClaimGranted):
            return False
        state = self._view().get(key)
        position = 0 if is_member_key(key) else self._start_position(key, state)
        lease = SharedLease(self.mp)
        lease.extend_to(lease_deadline(sent_at, self.hb, self.margin))
        holding = Holding(
            key,
            verdict.coord_partition,
            verdict.token,
            position,
            lease,
            is_member=is_member_key(key),
        )
        self.holdings[key] = holding
        self._heartbeat(holding)
        self.log_.info(
            "claim won",
            topic=key.topic,
            partition=key.partition,
            token=verdict.token,
            position=position,
        )
        if not holding.is_member:
            self._spawn(holding)
        return True

    def _discover(self) -> None:
        self._next_discovery = self.clock() + DISCOVERY_INTERVAL_S
        current = self.log.current_num_partitions(10.0)
        if current != self.log.num_partitions:
            raise CoordinationChangedError(
                f"{self.config.coordination_topic} now has {current} partitions, not "
                f"{self.log.num_partitions}: claims would move; refusing to go on"
            )
        found = self.topics.partitions()
        if len(found) != len(self.partitions):
            self.log_.info("partitions changed", before=len(self.partitions), now=len(found))
        self.partitions = found

    def _rebalance(self, now: float) -> None:
        self._next_claim = now + max(0.05, self.hb / 10)
        member = member_key(self.config.group, self.config.client_id)
        if member not in self.holdings and not self._claim(member):
            return  # not announced: claiming now would count this member out of the shares
        mine = [k for k, h in self.holdings.items() if not h.is_member and h.phase is Phase.RUNNING]
        self.avoid_until = {k: t for k, t in self.avoid_until.items() if t > now}
        step = plan(
            client_id=self.config.client_id,
            group=self.config.group,
            partitions=self.partitions,
            claims=self._view(),
            mine=mine,
            now_ms=self._now_ms(),
            hb_ms=self.config.heartbeat_interval_ms,
            avoid=self.avoid_until,
        )
        if step.claim is not None and not self._claim(step.claim):
            self._next_claim = now + random.uniform(0.1, 0.5) * self.hb  # lost a race
        if step.release is not None and now >= self._next_release:
            self._next_release = now + self.hb
            self.avoid_until[step.release] = now + 2 * self.hb
            self.log_.info(
                "over fair share: releasing",
                topic=step.release.topic,
                partition=step.release.partition,
                share=step.share,
                members=step.members,
            )
            self._stop_child(self.holdings[step.release], now + self.config.stop_timeout)

    # ---- stopping -------------------------------------------------------------------------

    def request_stop(self, fast: bool) -> None:
        """TERM: children finish their batch, then release. INT/QUIT (or a second TERM): now."""
        now = self.clock()
        self.log_.info("stopping", fast=fast, claims=len(self.holdings))
        self.stopping = True
        self.stop_deadline = now if fast else now + self.config.stop_timeout
        for holding in self.holdings.values():
            if holding.is_member or holding.phase is Phase.LOST:
                continue
            self._stop_child(holding, self.stop_deadline)
            if fast and holding.child is not None:
                holding.lease.revoke()
                holding.child.signal_group(signal.SIGKILL)
                holding.kill_sent = True

    def _advance_stop(self, now: float) -> None:
        children = [h for h in self.holdings.values() if not h.is_member]
        if children:
            return
        for holding in list(self.holdings.values()):  # the member claim goes last
            holding.phase = Phase.STOPPING
            self._finish(holding)
        self.done = True


def _tell(holding: Holding, msg: ipc.ToChild) -> None:
    """Send to a child; a child that is already gone is reaped by the loop."""
    if holding.child is not None:
        with contextlib.suppress(BrokenPipeError, OSError):
            holding.child.conn.send(msg)
