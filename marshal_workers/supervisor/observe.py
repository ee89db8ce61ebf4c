"""What the supervisor reports as it works, for metrics, systemd and anything else watching.

The supervisor calls an `Observer` at each point of interest; `Observers` fans out to several.
Every method has a no-op default, so an observer implements only what it needs. Observers run
on the supervisor's loop thread and must return quickly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import assert_never

from marshal_workers.core import observations as obs
from marshal_workers.core.observations import LossCause, Observation
from marshal_workers.ipc.messages import Stats
from marshal_workers.protocol.wire import ClaimKey


@dataclass(frozen=True, slots=True)
class ClaimSnapshot:
    """One held claim as seen at a loop turn (``lease_remaining``: seconds until its child must
    stop; None once the claim is lost or its lease revoked)."""

    key: ClaimKey
    token: int
    position: int
    lease_remaining: float | None
    child_pid: int | None
    phase: str
    # the handler call in progress: seconds since it began (None: no call), and whether that
    # is more than half the handler timeout (it is killed at the whole)
    call_s: float | None = None
    call_slow: bool = False


class Observer:
    """No-op observer; subclass and override what you need."""

    def ready(self) -> None:
        """The log is caught up and the claim loop runs."""

    def tick(self, claims: Mapping[ClaimKey, ClaimSnapshot], healthy: bool) -> None:
        """A turn of the loop finished (at most one every `runtime.OBSERVE_S`, 50 ms, gets a
        tick); ``healthy`` is False while a data claim it holds (running
        or reloading) has no more than the kill grace left on its lease: its heartbeats are not
        confirmed in time (see `Member.healthy`)."""

    def claim_won(self, key: ClaimKey, token: int) -> None:
        """A claim was won (or resumed after a restart)."""

    def claim_lost(self, key: ClaimKey, reason: str) -> None:
        """A claim was lost (taken, refused, lease expired)."""

    def claim_released(self, key: ClaimKey) -> None:
        """A claim was released gracefully."""

    def release_seen(self, key: ClaimKey) -> None:
        """Another member's release of a claim of this group was folded."""

    def failover(self, key: ClaimKey, previous_client: str) -> None:
        """A claim was won from a holder that had gone stale."""

    def record_failures(self, key: ClaimKey, offset: int, failures: int, parked: bool) -> None:
        """The failing record of a held claim as the log counts it (0 failures: cleared)."""

    def group_view(self, claims: int, unheld: int, members: int) -> None:
        """The group's claims, those no live member holds, and its live members."""

    def child_started(self, key: ClaimKey, pid: int, restart: bool) -> None:
        """A child started for a claim (``restart`` after a failure)."""

    def child_exited(self, key: ClaimKey, pid: int, code: int) -> None:
        """A child exited with ``code`` (negative: killed by that signal)."""

    def fencing_kill(self, key: ClaimKey, pid: int, why: str) -> None:
        """The supervisor killed a child to fence it."""

    def handler_failed(self, key: ClaimKey, offset: int, error: str) -> None:
        """The handler raised on ``offset``."""

    def coordination_write(self, kind: str, seconds: float, ok: bool) -> None:
        """A coordination write finished (acknowledged or failed) after ``seconds``."""

    def dormant(self, instance: str) -> None:
        """Another instance of this client id (``instance``) took this one's place: it holds
        and claims nothing until that one falls silent."""

    def resumed(self) -> None:
        """The instance that had replaced this one fell silent: claiming again."""

    def stopping(self) -> None:
        """The supervisor began to stop."""

    def reloading(self) -> None:
        """SIGHUP: children are being replaced by fresh ones, the claims kept."""

    def reloaded(self) -> None:
        """Every claim's child was replaced after a reload (not called if a stop cut it short)."""

    def child_stats(self, key: ClaimKey, stats: Stats) -> None:
        """A child reported what it handled since its last report (see `ipc.Stats`)."""

    def amo_lost(self, key: ClaimKey, start: int, end: int, cause: LossCause) -> None:
        """AMO: offsets ``start``..``end`` were reserved in the log and will never be handled."""


class Observers(Observer):
    """Calls every observer it holds, in order."""

    def __init__(self, observers: Iterable[Observer] = ()) -> None:
        self.observers = list(observers)

    def ready(self) -> None:
        for o in self.observers:
            o.ready()

    def tick(self, claims: Mapping[ClaimKey, ClaimSnapshot], healthy: bool) -> None:
        for o in self.observers:
            o.tick(claims, healthy)

    def claim_won(self, key: ClaimKey, token: int) -> None:
        for o in self.observers:
            o.claim_won(key, token)

    def claim_lost(self, key: ClaimKey, reason: str) -> None:
        for o in self.observers:
            o.claim_lost(key, reason)

    def claim_released(self, key: ClaimKey) -> None:
        for o in self.observers:
            o.claim_released(key)

    def release_seen(self, key: ClaimKey) -> None:
        for o in self.observers:
            o.release_seen(key)

    def failover(self, key: ClaimKey, previous_client: str) -> None:
        for o in self.observers:
            o.failover(key, previous_client)

    def record_failures(self, key: ClaimKey, offset: int, failures: int, parked: bool) -> None:
        for o in self.observers:
            o.record_failures(key, offset, failures, parked)

    def group_view(self, claims: int, unheld: int, members: int) -> None:
        for o in self.observers:
            o.group_view(claims, unheld, members)

    def child_started(self, key: ClaimKey, pid: int, restart: bool) -> None:
        for o in self.observers:
            o.child_started(key, pid, restart)

    def child_exited(self, key: ClaimKey, pid: int, code: int) -> None:
        for o in self.observers:
            o.child_exited(key, pid, code)

    def fencing_kill(self, key: ClaimKey, pid: int, why: str) -> None:
        for o in self.observers:
            o.fencing_kill(key, pid, why)

    def handler_failed(self, key: ClaimKey, offset: int, error: str) -> None:
        for o in self.observers:
            o.handler_failed(key, offset, error)

    def coordination_write(self, kind: str, seconds: float, ok: bool) -> None:
        for o in self.observers:
            o.coordination_write(kind, seconds, ok)

    def dormant(self, instance: str) -> None:
        for o in self.observers:
            o.dormant(instance)

    def resumed(self) -> None:
        for o in self.observers:
            o.resumed()

    def stopping(self) -> None:
        for o in self.observers:
            o.stopping()

    def reloading(self) -> None:
        for o in self.observers:
            o.reloading()

    def reloaded(self) -> None:
        for o in self.observers:
            o.reloaded()

    def child_stats(self, key: ClaimKey, stats: Stats) -> None:
        for o in self.observers:
            o.child_stats(key, stats)

    def amo_lost(self, key: ClaimKey, start: int, end: int, cause: LossCause) -> None:
        for o in self.observers:
            o.amo_lost(key, start, end, cause)


def deliver(observer: Observer, what: Observation) -> None:
    """Call the method of ``observer`` that ``what`` (a core observation) stands for."""
    match what:
        case obs.ClaimWon(key, token):
            observer.claim_won(key, token)
        case obs.ClaimLost(key, reason):
            observer.claim_lost(key, reason)
        case obs.ClaimReleased(key):
            observer.claim_released(key)
        case obs.ReleaseSeen(key):
            observer.release_seen(key)
        case obs.Failover(key, previous):
            observer.failover(key, previous)
        case obs.RecordFailures(key, offset, failures, parked):
            observer.record_failures(key, offset, failures, parked)
        case obs.GroupView(claims, unheld, members):
            observer.group_view(claims, unheld, members)
        case obs.ChildStats(key, stats):
            observer.child_stats(key, stats)
        case obs.HandlerFailed(key, offset, error):
            observer.handler_failed(key, offset, error)
        case obs.AmoLost(key, start, end, cause):
            observer.amo_lost(key, start, end, cause)
        case _:
            _deliver_member_wide(observer, what)


_MemberWide = (
    obs.CoordinationWrite | obs.Dormant | obs.Resumed | obs.Stopping | obs.Reloading | obs.Reloaded
)


def _deliver_member_wide(observer: Observer, what: _MemberWide) -> None:
    """`deliver` for the observations that name no claim."""
    match what:
        case obs.CoordinationWrite(kind, seconds, ok):
            observer.coordination_write(kind, seconds, ok)
        case obs.Dormant(instance):
            observer.dormant(instance)
        case obs.Resumed():
            observer.resumed()
        case obs.Stopping():
            observer.stopping()
        case obs.Reloading():
            observer.reloading()
        case obs.Reloaded():
            observer.reloaded()
        case _:
            assert_never(what)
