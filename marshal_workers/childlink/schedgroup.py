"""The children's share of the CPU where Linux schedules sessions as groups (autogroup).

`child_nice` lowers a child's handler thread below the supervisor's priority. A nice value only
orders threads inside one scheduling group, though. On a kernel with ``CONFIG_SCHED_AUTOGROUP``
and ``kernel.sched_autogroup_enabled = 1`` (most desktop and many server distributions), every
session of a process in the root cpu cgroup (a shell, a `setsid` process: the local broker of
`marshal-admin kafka start`) is a group of its own, and the groups
share the CPU by their own weights, each at nice 0 unless told otherwise. The children, in the
supervisor's session, were ordered below the supervisor but weighed, as a group, the same as
every other session on the host. Measured on two cores (docs/benchmarks.md, "Busy children
starved the host's other sessions"): 64 CPU-bound slice children in two members' sessions kept
a probe in a session of its own (a 0.1 s sleep, at nice 0) waiting 1.1-7.8 s at its worst in
each of 18 runs; with the autogroups switched off, or with the children in a session of their own
whose group is at their nice (this module), it was never late by more than 0.2 s.

So where the kernel has autogroups the fork server leads a session of its own
(`leave_session`, in the fork server only, at its start: `forkserver._guard`), which every
child it forks inherits, and a child once set up gives that session's group the nice its
handler's thread now has (`GroupNice`): all of a member's children are then one group that
weighs as little against the host's other sessions as each handler does against the
supervisor. Every thread of that session is in the group: the children's watchdogs and
consumers' threads and a child still starting keep their nice inside it (above the handlers),
and the host's readers, which only feed the children, share it too. The supervisor stays in
its session and at its priority.

Autogroups apply only to processes whose cpu cgroup is the root one: a systemd service whose
unit has the cpu controller (any ``CPUWeight=`` turns it on) is ordered by its cgroup, and the
write is accepted and changes nothing there; a service without it is a session, and an
autogroup, as a shell is. Without autogroup support the file is missing: nothing to do.

The kernel lets a process without ``CAP_SYS_ADMIN`` change a group's nice at most once per
0.1 s host-wide (``EAGAIN`` meanwhile: two members starting together meet it), so a child that
meets that refusal tries again every `RETRY_S` from a thread of its own (`settle_soon`), not
after its next batch, which a slow handler may take minutes to finish.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from collections.abc import Callable

from marshal_workers.common.threadsignals import start_leaving_to_the_main_thread

RETRY_S = 0.11  # past the kernel's 0.1 s between two changes of a group's nice
RETRIES = 100  # about 11 s of "too soon" (other members' children settling) before giving up

AUTOGROUP = "/proc/self/autogroup"  # "/autogroup-<id> nice <n>" (Linux, CONFIG_SCHED_AUTOGROUP)


def leave_session(path: str = AUTOGROUP) -> bool:
    """Where the kernel has autogroups (``path`` exists), lead a new session (and process group)
    of this process; whether it does now. Called by the fork server at its start, so that its
    children are a scheduling group apart from the supervisor's session. Elsewhere nothing
    changes: no gain, and the fork server stays in the supervisor's process group."""
    if os.path.exists(path):
        with contextlib.suppress(OSError):  # (a group leader already, or not allowed)
            os.setsid()
    return os.getsid(0) == os.getpid()


def session_group_nice(path: str = AUTOGROUP) -> int | None:
    """The nice of this process's autogroup; None where there is none to read."""
    try:
        with open(path, encoding="ascii") as file:
            fields = file.read().split()
    except OSError:
        return None
    if len(fields) != 3 or fields[1] != "nice":
        return None
    try:
        return int(fields[2])
    except ValueError:
        return None


class GroupNice:
    """Give this child's session group (the fork server's, shared by all the member's children)
    ``nice`` (its handler thread's, lowered), once: `settle` until it says done.

    Only a child of a fork server that leads its own session (``session_leader``: the fork
    server's pid, and this process's session is that one) touches it: any other child is in the
    supervisor's session, whose group must keep its weight."""

    def __init__(self, nice: int, session_leader: int | None, path: str = AUTOGROUP) -> None:
        self.nice = nice
        self.path = path
        self.done = nice <= 0 or session_leader is None or os.getsid(0) != session_leader
        self.error: str | None = None  # why it could not be done, once given up

    def settle(self) -> bool:
        """Try once: whether there is nothing more to do (done, not needed, not possible)."""
        if self.done:
            return True
        current = session_group_nice(self.path)
        if current is None or current >= self.nice:  # no autogroup, or lowered already
            self.done = True
            return True
        try:
            with open(self.path, "w", encoding="ascii") as file:
                file.write(str(self.nice))
        except OSError as exc:
            if exc.errno == errno.EAGAIN:  # another change of a group's nice within 0.1 s
                return False
            self.error = str(exc)
        self.done = True
        return True


def settle_soon(
    group: GroupNice,
    settled: Callable[[GroupNice], None],
    retry_s: float = RETRY_S,
    retries: int = RETRIES,
) -> threading.Thread | None:
    """`GroupNice.settle` now, and while the kernel says too soon again from a daemon thread
    every ``retry_s`` (at most ``retries`` times, then given up with an ``error``); then call
    ``settled(group)``. The thread, if one was needed. Started from the handler's thread once
    lowered, it runs at that thread's nice, and sleeps."""
    if group.settle():
        settled(group)
        return None

    def retry() -> None:
        for _ in range(retries):
            time.sleep(retry_s)
            if group.settle():
                break
        else:
            group.error = f"the kernel answered too soon {retries + 1} times"
            group.done = True
        settled(group)

    thread = threading.Thread(target=retry, name="marshal-group-nice", daemon=True)
    start_leaving_to_the_main_thread(thread)
    return thread
