"""Imported last by the fork server (`forkserver.PRELOAD`): what its imports made is frozen out
of the cyclic collector before it forks the first child.

Every child is a fork of the fork server and inherits its heap: the modules of the child's whole
import graph, tens of thousands of tracked objects. A child collects once set up
(`child.loop.ChildLoop._setup`) and whenever its allocations say so. A collection traverses every
object of the generations it collects, writing to each one's header: unfrozen, the inherited
heap was traversed in each child (19 ms of CPU of a child's 31 ms from its fork to `Started`,
eight children at once on two cores: about 0.14 s of each child's start; measured with marks in
the child, `bench/peers.py`'s launch) and each page it touched was copied out of the fork
server's. `gc.freeze` moves it to the permanent generation, which no collection visits (the
pattern the `gc` documentation gives for a server that forks its workers). Its objects are never
freed: they live as long as the fork server and its children do anyway.

Imported anywhere else (the supervisor, a spawned child) it does nothing.
"""

from __future__ import annotations

import gc

from marshal_workers.childlink.forkserver import IN_FORK_SERVER


def freeze_imports() -> bool:
    """In the fork server: collect what the imports left as garbage (a frozen object is never
    freed), then freeze the rest. Whether it froze."""
    if not IN_FORK_SERVER:
        return False
    gc.collect()
    gc.freeze()
    return True


freeze_imports()
