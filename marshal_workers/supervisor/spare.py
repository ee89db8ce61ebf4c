"""A child started ahead of the member's first claim (`Spare`), so that the first claim's child
is not started only once the claim is won.

A child's start is its process (the fork server's fork, multiprocessing's preparation), its
fencing (its process group, the group's guardian, the parent-death signal), its logs and the
import of the handler's module, before it opens its consumer: about 20-30 ms of a launch on two
busy cores, every one of them after the claim was won (docs/benchmarks.md, the launch). The
supervisor starts one child at the start of its `Supervisor.start`, while it reads the log and
claims: that child (`child.main.spare_main`) does all of the above and waits for a spec on its
pipe. The member's first spawn hands it the claim's spec (`take`); from then on it is that
claim's child like any other, under the ``lease`` it was started with, which the supervisor
makes the claim's before the core can write to it (`Supervisor._spawn`).

Until it has a spec the spare holds no lease, reads nothing and handles nothing (its consumer,
made and connecting to the cluster meanwhile, is assigned nothing: `child.consumer.Prepared`):
nothing of the safety argument is touched (docs/design.md, the process model). It is used
once: a member that claims nothing within `KEEP_S` (a member joining a full group) kills it,
as does a supervisor that stops; a spare that died, or that the spec cannot reach, is killed
and the claim's child is started as usual. Everything here runs on the start thread
(`supervisor.childstarts`), in order: the spare's start before the spawn that takes it.
"""

from __future__ import annotations

import contextlib
import signal
from typing import TYPE_CHECKING, Any

from marshal_workers.childlink.sharedlease import SharedLease
from marshal_workers.ipc.messages import ChildSpec
from marshal_workers.supervisor.childprocess import ChildHandle, start_spare

if TYPE_CHECKING:  # the fork server's module guards the server at import: not here
    from marshal_workers.childlink.forkserver import ChildContext

KEEP_S = 5.0  # an unused spare is killed this long after the member's first claims


class Spare:
    """One child started ahead of its claim (module doc)."""

    def __init__(self, lease: SharedLease, since: float, log: Any) -> None:
        self.lease = lease  # the claim's, once taken
        self.since = since  # when it was asked for (the supervisor's clock)
        self.log = log
        self.handle: ChildHandle | None = None
        self.taken: int | None = None  # the pid of the spare a spec was handed to

    def start(self, template: ChildSpec, mp_context: ChildContext) -> None:
        """Start the process (on the start thread). Nothing is logged, not even a failure to
        make it (then there is no spare, and the first claim's child is started as usual, and
        says so if it fails too): the supervisor may not have started yet, and before a
        start-up error nothing is printed but its line."""
        with contextlib.suppress(Exception):
            self.handle = start_spare(template, self.lease, mp_context)

    def take(self, spec: ChildSpec) -> ChildHandle | None:
        """Hand ``spec`` to the spare: its handle, now the spec's child (`child_started` says
        ``spare``); None if there is no spare to take (never started, dead, its pipe closed),
        which is then killed."""
        handle, self.handle = self.handle, None
        if handle is None:
            return None
        if handle.exitcode is None and handle.send(spec):
            self.taken = handle.pid
            return handle
        _end(handle)
        return None

    def kill(self, say: bool = False) -> None:
        """Kill the spare, unused (on the start thread); ``say``: log it (a running member's
        drop, not a supervisor's exit)."""
        handle, self.handle = self.handle, None
        if handle is not None:
            _end(handle)
            if say:
                self.log.info("child_spare_dropped", child_pid=handle.pid)


def _end(handle: ChildHandle) -> None:
    if handle.exitcode is None:  # (ended and reaped, its pid may be another process's now)
        handle.signal_group(signal.SIGKILL)
    handle.close()  # (its end unreported by the fork server yet: forgotten, not joined)
