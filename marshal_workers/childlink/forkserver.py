"""Where children come from: a fork server preloaded with the child's modules.

A child cannot be a plain fork of the supervisor (librdkafka's threads do not survive a fork),
and a *spawned* child is a fresh interpreter that imports the child's modules before it can open
its consumer: about 0.2 s of CPU per child, paid by all of a member's children at once when it
claims its share (eight children on two cores: most of a second before the last one handles a
record, and CPU taken from the children already handling). multiprocessing's ``forkserver``
start method is the well-kept answer: one process, started early by the supervisor, imports the
child's modules and never starts a thread; each child is a fork of it, ready in milliseconds,
sharing the imported modules' pages.

What changes for a child, and where it is handled:

- its parent is the fork server, whose parent is the supervisor. The fork server is SIGKILLed
  by the kernel when the supervisor dies (its own parent-death signal, set as it imports this
  module, `_guard`; without it the fork server would notice on its pipe and exit, but only
  after its interpreter's half-second shutdown, the children handling all along), and the
  child's parent-death signal (set against the fork server) then ends the child at once;
  `fencing.parent_to_watch` checks the chain at the child's start, the watchdog watches the
  fork server after that;
- its environment is the supervisor's when the fork server started: what the children must not
  inherit is withheld from it (``NOTIFY_SOCKET``: `fork_server`'s ``withheld``). `marshal-run`
  starts it first thing, before its own imports (`supervisor.launch`), and `supervisor.run`
  calls `fork_server` again, which keeps the running server;
- the handler module is imported by each child, never by the fork server: a module that starts
  a thread at import would make every later fork unsafe;
- whatever the start method, the parent's ``__main__`` script is not re-run in the child
  (`supervisor.childprocess.start_child`), so the CLI's imports stay out of it;
- what the server's imports made is frozen out of the cyclic collector before the first fork
  (`childlink.preloaded`, imported last): a child's collections never traverse it, so they
  neither spend the child's CPU on it nor write to its pages (the reference counts of what a
  child uses still do). The preload's dataclasses take their methods' code from the cache
  (`common.classcode`, started in `_guard`, stopped by `childlink.preloaded`). A server
  multiprocessing starts again by itself (after it died) has no ``SERVER_OF_ENV``: neither the
  guard, the cache nor the freeze, its children collect as they did before;
- where Linux schedules sessions as groups (autogroup), the fork server leads a session of its
  own (`schedgroup.leave_session`, in `_guard`, after its parent-death signal is set), so its
  children are one scheduling group apart from the supervisor's, which a child set up gives
  its handler's nice (`child_nice`); the fork server then dies with the supervisor by that
  signal, not by a signal to the supervisor's process group.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import sys
from collections.abc import Collection
from multiprocessing.context import ForkServerContext, SpawnContext

from marshal_workers.childlink.listenerdirs import mark_owner
from marshal_workers.childlink.schedgroup import leave_session
from marshal_workers.common import classcode

ChildContext = ForkServerContext | SpawnContext  # spawn: the tests' children, and the fallback

# What the fork server imports once: this module first (`_guard`), then the child's whole import
# graph (consumer, structlog, ...).
PRELOAD = (
    "marshal_workers.childlink.forkserver",
    "marshal_workers.child.main",
    "marshal_workers.child.entry",  # what a child runs (`supervisor.childprocess`)
    "marshal_workers.child.reader",  # a host's reader of a sliced partition (`supervisor.feeds`)
    "marshal_workers.child.feedentry",  # what it runs
    "marshal_workers.childlink.preloaded",  # last: what the imports made, frozen for the children
)
# Set (to the supervisor's pid) only while the fork server starts: the process that finds its
# parent's pid here is the fork server, and nothing else.
SERVER_OF_ENV = "MARSHAL_FORK_SERVER_OF"
PR_SET_PDEATHSIG = 1


def fork_server(withheld: Collection[str] = ()) -> ForkServerContext:
    """The ``forkserver`` context for children, its server started now unless it runs already
    (in the background: its imports overlap the supervisor's start-up; the first child waits
    for them if it must). The environment variables named in ``withheld`` are out of this
    process's environment while the server starts, and put back after: neither the server nor
    any child has them."""
    context = multiprocessing.get_context("forkserver")
    assert isinstance(context, ForkServerContext)
    context.set_forkserver_preload(list(PRELOAD))
    saved = {name: os.environ.pop(name) for name in withheld if name in os.environ}
    os.environ[SERVER_OF_ENV] = str(os.getpid())
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        del os.environ[SERVER_OF_ENV]
        os.environ.update(saved)
    # its socket's directory, marked: another supervisor removes it once this one died (not
    # marked, it stays behind if this one is killed, as before)
    with contextlib.suppress(OSError):
        mark_owner()
    return context


def _guard() -> bool:
    """In the fork server (imported there first): die with the supervisor, at once. Whether
    this process is the fork server."""
    supervisor = os.environ.pop(SERVER_OF_ENV, None)  # gone: the children never see it
    if supervisor is None or supervisor != str(os.getppid()):
        return False  # not the fork server (or the supervisor is gone already: the pipe ends it)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0)
    if str(os.getppid()) != supervisor:  # it died before the signal was set
        os._exit(0)
    leave_session()  # its children: a scheduling group apart from the supervisor's session
    classcode.start()  # the preload's dataclasses' methods from the cache (`preloaded` stops it)
    return True


# The fork server's pid, in the fork server and in the children it forks (which inherit this
# module as it was imported there); None in any other process.
FORK_SERVER_PID = os.getpid() if _guard() else None
