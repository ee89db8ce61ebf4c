"""What operators ask of a running supervisor: reload (SIGHUP), stack dumps (SIGUSR1), and
a pause of the whole group by an admin (ReleaseGroup in the log, from `marshal-admin`).

`OperatorRequests` is the part of `Supervisor` that carries these out; the supervisor's loop
calls `_react_to_pause` every turn and `_check_reload` while a reload is pending, and its
signal handling calls `reload` and `dump_stacks`.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterable

from marshal_workers import ipc
from marshal_workers.childcare import ChildCare, tell
from marshal_workers.holding import Phase
from marshal_workers.rationalizer import GroupPause, World, pause_of
from marshal_workers.stacks import catches_signal, log_stacks


class OperatorRequests(ChildCare):
    """Reload, stack dumps and group pauses (a base of `Supervisor`, which sets these)."""

    clock: Callable[[], float]
    stopping: bool
    reload_pending: bool
    paused_until_ms: int | None

    # ---- signals: reload and stack dumps ---------------------------------------------------

    def reload(self) -> None:
        """SIGHUP: replace every child by a fresh one (the handler imported anew), claims kept.

        Each child finishes its batch and stops (`Stop`, then `Stopped` with its position); once
        it has exited, a new child starts for the same claim with the same token at that
        position. No release and no claim is written, and heartbeats go on, so nobody else can
        take the partition meanwhile. A child still running after --stop-timeout is killed first
        (ALO: its unreported records are handled again; AMO: a granted batch is lost, as on any
        kill). A child waiting to be restarted after a failure starts at once."""
        if self.stopping:
            self._log.info("reload ignored: stopping")
            return
        deadline = self.clock() + self.config.stop_timeout
        asked = 0
        for holding in self.holdings.values():
            if holding.is_member or holding.phase is not Phase.RUNNING:
                continue
            if holding.child is None:
                holding.restart_at = 0.0
                continue
            self._stop_child(holding, deadline, Phase.RELOADING)
            asked += 1
        self.reload_pending = True
        self.observer.reloading()
        self._log.info("reloading", children=asked)

    def _check_reload(self) -> None:
        """Report the reload done once no claim waits for its fresh child any more."""
        if any(h.phase is Phase.RELOADING for h in self.holdings.values()):
            return
        self.reload_pending = False
        if self.stopping:
            self._log.info("reload cut short: stopping")
            return
        self.observer.reloaded()
        children = sum(1 for h in self.holdings.values() if h.child is not None)
        self._log.info("reloaded", children=children)

    def dump_stacks(self) -> None:
        """SIGUSR1: log every thread's stack, and ask every child for its own.

        A child answers `DumpStacks` between batches with a line per thread, and SIGUSR1 at once
        (even while stuck in its handler) with faulthandler's dump as one line. It is sent
        SIGUSR1 only once it has registered for it (the default action would end it)."""
        threads = log_stacks(self._log)
        asked = 0
        for holding in self.holdings.values():
            if holding.child is None:
                continue
            pid = holding.child.pid
            tell(holding, ipc.DumpStacks())
            if catches_signal(pid, signal.SIGUSR1):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGUSR1)
            asked += 1
        self._log.info("stack dump done", threads=threads, children_asked=asked)

    # ---- group pauses (ReleaseGroup) -----------------------------------------------------

    def _react_to_pause(self, now: float) -> bool:
        """While another client (an admin) has paused the group: claim nothing, and release
        every data claim gracefully (children finish their batch, then ReleasingPartition at
        the position they reported); the member claim stays. Claiming resumes once the pause
        has expired in log time or was lifted. Returns whether the group is paused."""
        c = self.config
        pause = pause_by_other(
            self.co.reader.worlds.values(), c.group, c.client_id, self.co.now_ms()
        )
        if pause is None:
            if self.paused_until_ms is not None:
                self.paused_until_ms = None
                self._log.info("group pause over: claiming again")
            return False
        if pause.until_ms != self.paused_until_ms:
            self.paused_until_ms = pause.until_ms
            self._log.warning(
                "group paused: releasing every claim",
                paused_by=pause.client_id,
                until_ms=pause.until_ms,
                claims=sum(1 for h in self.holdings.values() if not h.is_member),
            )
        deadline = now + c.stop_timeout
        for holding in self.holdings.values():
            if not holding.is_member and holding.phase not in (Phase.STOPPING, Phase.LOST):
                self._stop_child(holding, deadline)
        return True


def pause_by_other(
    worlds: Iterable[World], group: str, client_id: str, now_ms: int
) -> GroupPause | None:
    """The pause of ``group`` by a client other than ``client_id`` in force at log time
    ``now_ms`` on any coordination partition (the longest), or None. An admin pauses every
    coordination partition, and each folds its own ReleaseGroup."""
    found: GroupPause | None = None
    for world in worlds:
        pause = pause_of(world, group, now_ms)
        if pause is None or pause.client_id == client_id:
            continue
        if found is None or pause.until_ms > found.until_ms:
            found = pause
    return found
