"""The supervisor: claims partitions through the coordination log and runs one child per claim.

Theory of operation
-------------------
One thread runs a loop (`step`). Each turn it waits briefly on its children's pipes and the
signal pipe, handles what the children said, folds whatever the coordination log delivered and
acts on the verdicts, then runs its timers: heartbeats every HB/2, lease deadlines, the claim
engine, partition discovery, and restarts of failed children.

Writes go through the `Coordinator`. A claim's lease is extended only when the fold accepts a
heartbeat of this client, by what that heartbeat proves (send time + 2*HB - margin). A claim
is decided by the fold of the log up to the claimer's own record, never by belief.

When the fold shows a claim lost (a heartbeat refused, a newer instance of this client took it
over, someone else won it), or its lease is about to run out, the child's process group gets
TERM, then KILL, both before the lease ends; the child's own watchdog ends it at the deadline
regardless. A graceful release (rebalance, TERM) asks the child to finish its batch, waits for
it to exit, and only then writes ReleasingPartition at the position the child reported.

SIGHUP (`reload`) replaces every child by a fresh one while the claims stay: the child is asked
to finish its batch and stop, exactly as for a release, but its claim goes to RELOADING, not
STOPPING, so when it has exited a new child starts for the same claim (same token, the position
it reported) instead of a release. Spawned children import the handler anew, so new code runs.
SIGUSR1 (`dump_stacks`) logs every thread's stack and asks the children for theirs.

While another client (an admin) has paused the group (ReleaseGroup in force in log time), the
supervisor claims nothing and releases every data claim gracefully, keeping its member claim;
it claims again once the pause has expired or was lifted (`_react_to_pause`). Reloads, stack
dumps and pauses are carried out by `operator_requests.OperatorRequests`, children by
`childcare.ChildCare`: both are bases of `Supervisor`.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from multiprocessing import connection
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext

import structlog

from marshal_workers import events as ev
from marshal_workers.claims import is_member_key, member_key, plan
from marshal_workers.config import RunConfig
from marshal_workers.coordination import Coordinator
from marshal_workers.datatopics import DataTopics
from marshal_workers.errors import MarshalError
from marshal_workers.exitpolicy import slow_call
from marshal_workers.holding import Holding, Phase
from marshal_workers.lease import SharedLease, default_margin, lease_deadline
from marshal_workers.observe import ClaimSnapshot, Observer
from marshal_workers.operator_requests import OperatorRequests
from marshal_workers.poisonlog import PoisonLog
from marshal_workers.protocol import ClaimKey, Message
from marshal_workers.rationalizer import ClaimState

Clock = Callable[[], float]
DISCOVERY_INTERVAL_S = 10.0


class CoordinationChangedError(Exception):
    """The coordination topic's partition count changed: coordination cannot go on."""


class Supervisor(OperatorRequests):
    """Holds claims for one client id and runs their children."""

    def __init__(
        self,
        config: RunConfig,
        coordinator: Coordinator,
        topics: DataTopics,
        mp_context: SpawnContext,
        observer: Observer | None = None,
        clock: Clock = time.monotonic,
        wake_fd: int | None = None,
    ) -> None:
        self.config = config
        self.co = coordinator
        self.topics = topics
        self.mp = mp_context
        self.observer = observer or Observer()
        self.clock = clock
        self.wake_fd = wake_fd
        self.hb = config.heartbeat_interval
        self.margin = default_margin(self.hb)
        self.kill_grace = min(1.0, self.hb / 4)
        self.holdings: dict[ClaimKey, Holding] = {}
        self.partitions: list[ClaimKey] = []
        self.avoid_until: dict[ClaimKey, float] = {}
        self.stopping = False
        self.done = False
        self.paused_until_ms: int | None = None  # an admin's pause of the group in force
        self.reload_pending = False
        self._next_heartbeat = self._next_claim = self._next_release = 0.0
        self._next_discovery = 0.0
        self._log = structlog.get_logger().bind(
            group=config.group,
            client_id=config.client_id,
            instance_id=config.instance_id,
            pid=os.getpid(),
        )
        self.poison_log = PoisonLog(config, coordinator, self._log)  # wp-child

    # ---- start and recovery -------------------------------------------------------------

    def start(self, catch_up_timeout: float = 60.0) -> None:
        """Catch up on the log, resume this client's fresh claims, announce the member."""
        folded = self.co.catch_up(catch_up_timeout)
        self.partitions = self.topics.partitions()
        self._next_discovery = self.clock() + DISCOVERY_INTERVAL_S
        self._log.info("caught up", records=folded, partitions=len(self.partitions))
        for key, state in list(self.co.view().items()):
            if state.certain and state.holder_client == self.config.client_id:
                self._resume(key, state)
        member = member_key(self.config.group, self.config.client_id)
        if member not in self.holdings:
            self._claim(member)
        self.observer.ready()

    def _resume(self, key: ClaimKey, state: ClaimState) -> None:
        """Take a fresh claim of this client over with a heartbeat (restart recovery)."""
        position = 0 if is_member_key(key) else self._start_position(key, state)
        sent_at = self.clock()
        verdict = self._decide(self.co.heartbeat_msg(key, position))
        if isinstance(verdict, ev.HeartbeatAccepted):
            self._hold(key, verdict.token, position, sent_at)
            self._log.info(
                "claim resumed",
                topic=key.topic,
                partition=key.partition,
                token=verdict.token,
                replaced=verdict.replaced_instance,
            )

    def _hold(self, key: ClaimKey, token: int, position: int, sent_at: float) -> Holding:
        lease = SharedLease(self.mp, self.clock)
        lease.extend_to(lease_deadline(sent_at, self.hb, self.margin))
        holding = Holding(key, token, position, lease, is_member=is_member_key(key))
        self.holdings[key] = holding
        self.observer.claim_won(key, token)
        if not holding.is_member:
            self._spawn(holding, restart=False)
        return holding

    # ---- the loop -----------------------------------------------------------------------

    def step(self, signals: list[signal.Signals], wait_s: float = 0.05) -> None:
        """One turn of the loop."""
        for sig in signals:
            self._on_signal(sig)
        conns = {h.child.conn: h for h in self.holdings.values() if h.child is not None}
        waitables: list[Connection | int] = [*conns]
        if self.wake_fd is not None:
            waitables.append(self.wake_fd)
        ready = connection.wait(waitables, timeout=wait_s) if waitables else []
        if not waitables:
            time.sleep(wait_s)
        for conn in ready:
            if conn in conns:
                self._read_child(conns[conn])
        self._on_events(self.co.poll())
        now = self.clock()
        self._check_children(now)
        if self.reload_pending:
            self._check_reload()
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + self.hb / 2
            for holding in list(self.holdings.values()):
                if holding.phase is not Phase.LOST:
                    self._refresh_position(holding)  # wp-child: ALO, from the shared cells
                    self.co.heartbeat(holding.key, holding.position)
        if self.stopping:
            self._advance_stop()
        else:
            if now >= self._next_discovery:
                self._discover(now)
            paused = self._react_to_pause(now)
            if not paused and now >= self._next_claim:
                self._rebalance(now)
        self.observer.tick(self.snapshot(now), healthy=self._healthy(now))

    def _healthy(self, now: float) -> bool:
        """No claim's lease is closer to its end than one heartbeat round should allow."""
        return all(
            h.is_member or h.lease.deadline - now > self.kill_grace
            for h in self.holdings.values()
            if h.phase in _HELD
        )

    def snapshot(self, now: float) -> dict[ClaimKey, ClaimSnapshot]:
        """The held claims as observers see them at ``now`` (no lease left to show for a lost
        claim or a revoked lease)."""
        return {
            k: ClaimSnapshot(
                k,
                h.token,
                h.position,
                _lease_remaining(h, now),
                h.child.pid if h.child else None,
                h.phase.value,
                *self._call_in_progress(h, now),  # wp-child: a handler call and its age
            )
            for k, h in self.holdings.items()
        }

    def _call_in_progress(self, holding: Holding, now: float) -> tuple[float | None, bool]:
        """wp-child: the age of the child's handler call in progress (shared cells), and
        whether it is past half the handler timeout."""
        if holding.child is None:
            return None, False
        age = holding.lease.calls.call_age(now)
        return age, slow_call(age, self.config.handler_timeout)

    def _on_signal(self, sig: signal.Signals) -> None:
        if sig is signal.SIGTERM and not self.stopping:
            self.request_stop(fast=False)
        elif sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            self.request_stop(fast=True)
        elif sig is signal.SIGHUP:
            self.reload()
        elif sig is signal.SIGUSR1:
            self.dump_stacks()

    # ---- verdicts -------------------------------------------------------------------------

    def _decide(self, msg: Message) -> ev.Event | None:
        """Write ``msg``, fold to it, act on everything folded; return the verdict on it."""
        verdict, folded = self.co.send_and_fold(msg)
        self._on_events(folded)
        return verdict

    def _on_events(self, events: list[ev.Event]) -> None:
        for e in events:
            if isinstance(e, ev.ClaimVerdict):
                self._on_claim_event(e)

    def _on_claim_event(self, e: ev.ClaimVerdict) -> None:
        sent_at = self.co.sent_at(e)
        holding = self.holdings.get(e.key)
        if holding is None or holding.phase is Phase.LOST:
            return
        mine = e.client_id == self.config.client_id
        if isinstance(e, ev.HeartbeatAccepted):
            if mine and e.instance_id != self.config.instance_id:
                self._lose(holding, f"taken over by instance {e.instance_id}")
            elif sent_at is not None and e.token == holding.token:
                holding.lease.extend_to(lease_deadline(sent_at, self.hb, self.margin))
        elif isinstance(e, ev.HeartbeatRejected) and sent_at is not None:
            self._lose(holding, f"heartbeat refused: {e.reason}")
        elif isinstance(e, ev.ClaimGranted) and e.token != holding.token:
            self._lose(holding, f"claimed by {e.client_id}")

    def _lose(self, holding: Holding, reason: str) -> None:
        """The claim is no longer ours: revoke the lease, kill the child, forget the claim."""
        self._log.warning(
            "claim lost", topic=holding.key.topic, partition=holding.key.partition, reason=reason
        )
        holding.phase = Phase.LOST
        holding.lease.revoke()
        self.observer.claim_lost(holding.key, reason)
        self._kill(holding, signal.SIGKILL, reason)

    # ---- claiming and rebalancing --------------------------------------------------------

    def _claim(self, key: ClaimKey) -> bool:
        sent_at = self.clock()
        verdict = self._decide(self.co.claiming(key))
        if not isinstance(verdict, ev.ClaimGranted):
            return False
        position = 0 if is_member_key(key) else self._start_position(key, self.co.view().get(key))
        holding = self._hold(key, verdict.token, position, sent_at)
        self.co.heartbeat(key, holding.position)
        self._log.info(
            "claim won",
            topic=key.topic,
            partition=key.partition,
            token=verdict.token,
            position=position,
        )
        return True

    def _discover(self, now: float) -> None:
        """Check the coordination topic's partition count; pick up new data partitions.

        A failure to ask (broker unreachable, topic gone) is logged and retried next round:
        the claims held so far stay valid, their heartbeats go on."""
        self._next_discovery = now + DISCOVERY_INTERVAL_S
        try:
            current = self.co.log.current_num_partitions(10.0)
            found = self.topics.partitions()
        except MarshalError as exc:
            self._log.warning("partition discovery failed; retrying", error=str(exc))
            return
        if current != self.co.log.num_partitions:
            raise CoordinationChangedError(
                f"{self.config.coordination_topic} now has {current} partitions, not "
                f"{self.co.log.num_partitions}: claims would move; refusing to go on"
            )
        if len(found) != len(self.partitions):
            self._log.info("partitions changed", before=len(self.partitions), now=len(found))
        self.partitions = found

    def _rebalance(self, now: float) -> None:
        self._next_claim = now + max(0.05, self.hb / 10)
        member = member_key(self.config.group, self.config.client_id)
        if member not in self.holdings and not self._claim(member):
            return  # not announced: claiming now would count this member out of the shares
        mine = [k for k, h in self.holdings.items() if not h.is_member and h.phase in _HELD]
        self.avoid_until = {k: t for k, t in self.avoid_until.items() if t > now}
        step = plan(
            client_id=self.config.client_id,
            group=self.config.group,
            partitions=self.partitions,
            claims=self.co.view(),
            mine=mine,
            now_ms=self.co.now_ms(),
            hb_ms=self.config.heartbeat_interval_ms,
            avoid=self.avoid_until,
        )
        if step.claim is not None and not self._claim(step.claim):
            self._next_claim = now + random.uniform(0.1, 0.5) * self.hb  # lost a race
        if step.release is not None and now >= self._next_release:
            self._next_release = now + self.hb
            self.avoid_until[step.release] = now + 2 * self.hb
            self._log.info(
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
        self._log.info("stopping", fast=fast, claims=len(self.holdings))
        if not self.stopping:
            self.observer.stopping()
        self.stopping = True
        deadline = self.clock() + (0.0 if fast else self.config.stop_timeout)
        for holding in self.holdings.values():
            if holding.is_member or holding.phase is Phase.LOST:
                continue
            self._stop_child(holding, deadline)
            if fast:
                holding.lease.revoke()
                self._kill(holding, signal.SIGKILL, "fast stop")

    def _advance_stop(self) -> None:
        if any(not h.is_member for h in self.holdings.values()):
            return
        for holding in list(self.holdings.values()):  # the member claim goes last
            if holding.phase is not Phase.LOST:  # a lost claim is not ours to release
                holding.phase = Phase.STOPPING
            self._finish(holding)
        self.done = True

    def kill_all(self) -> None:
        """Revoke every lease and kill every child: nothing outlives the supervisor."""
        for holding in self.holdings.values():
            holding.lease.revoke()
            self._kill(holding, signal.SIGKILL, "supervisor exiting")


_HELD = (Phase.RUNNING, Phase.RELOADING)  # counted as this member's share


def _lease_remaining(holding: Holding, now: float) -> float | None:
    """Seconds left on the claim's lease at ``now``; None if it is lost or its lease revoked."""
    deadline = holding.lease.deadline
    if holding.phase is Phase.LOST or deadline == 0.0:
        return None
    return deadline - now
