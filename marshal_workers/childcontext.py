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

- its parent is the fork server, whose parent is the supervisor. The fork server exits as soon
  as the supervisor ends (it watches a pipe only the supervisor holds), and the child's
  parent-death signal (``PR_SET_PDEATHSIG``, set against the fork server) then ends the child;
  `fencing.parent_to_watch` checks the chain at the child's start, the watchdog watches the
  fork server after that;
- its environment is the supervisor's when the fork server started: start it (`fork_server`)
  after anything the children must not inherit is taken out (``NOTIFY_SOCKET``, `systemd`);
- the handler module is imported by each child, never by the fork server: a module that starts
  a thread at import would make every later fork unsafe;
- whatever the start method, the parent's ``__main__`` script is not re-run in the child
  (`child.start_child`), so the CLI's imports stay out of it.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
from multiprocessing.context import ForkServerContext, SpawnContext

ChildContext = ForkServerContext | SpawnContext  # spawn: the tests' children, and the fallback

# What the fork server imports once: the child's whole import graph (consumer, structlog, ...).
PRELOAD = ("marshal_workers.child",)


def fork_server() -> ForkServerContext:
    """The ``forkserver`` context for children, its server started now (in the background: its
    imports overlap the supervisor's start-up; the first child waits for them if it must)."""
    context = multiprocessing.get_context("forkserver")
    assert isinstance(context, ForkServerContext)
    context.set_forkserver_preload(list(PRELOAD))
    multiprocessing.forkserver.ensure_running()
    return context
