"""Imported last by the fork server (`forkserver.PRELOAD`): what its imports made is frozen out
of the cyclic collector before it forks the first child.

Every child is a fork of the fork server and inherits its heap: the modules of the child's whole
import graph, tens of thousands of tracked objects. A child collects once set up
(`child.loop.ChildLoop._setup`) and whenever its allocations say so. A collection traverses every
object of the generations it collects, writing to each one's header: unfrozen, the inherited
heap was traversed in each child (19 ms of CPU of a child's 31 ms from its fork to `Started`,
eight children at once on two cores: about 0.14 s of each child's start; measured with marks in
the child, `bench/peers.py`'s launch) and each page it touched was copied out of the fork
server's. `gc.freeze` moves it to the permanent generation, which no collection visits. (The
`gc` documentation's pattern for a server that forks its workers disables the collector early
and freezes just before the fork, warning that a collection before it leaves freed holes that
later allocations fill, copying their pages. Here the imports are done when it runs: the
collection first frees the few cycles they left (10 objects measured), which freezing would keep
for good, since a frozen object in a cycle is never collected; the fork server allocates little
after it.)

Anywhere else it does nothing: the supervisor and a spawned child never import it, a child
forked from the fork server inherits it imported (and `freeze_imports` would refuse there), and
a fork server multiprocessing starts again by itself has no `forkserver.FORK_SERVER_PID`.
"""

from __future__ import annotations

import gc
import os

from marshal_workers.childlink.forkserver import FORK_SERVER_PID
from marshal_workers.common import classcode


def freeze_imports() -> bool:
    """In the fork server only: collect what the imports left as garbage (frozen, a cycle is
    never collected), then freeze the rest. Whether it froze."""
    if os.getpid() != FORK_SERVER_PID:
        return False
    classcode.stop()  # the preload's dataclasses are made: `dataclasses` as before, for handlers
    gc.collect()
    gc.freeze()
    return True


freeze_imports()
