"""A process that fences itself as a child does, for tests that stop and continue it: the
watchdog's thread, the SIGCONT handler, one `FirstFence` between them, the stack dumps'
thread and a priority timer still waiting, around a handler that works in pure Python under
a 0.2 s switch interval (as ``tests/integration/liveness_handlers.py``'s ``work_until``
does).

``python stopped_fencer.py LEASE_S``: the lease ends ``LEASE_S`` after the start; ``ready`` on
stdout once the work has begun; the fence's last words on stderr (``fenced by=resume`` or
``fenced by=watchdog``); exit code `CODE`.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from typing import Any

from marshal_workers.child.fencing import FirstFence, Watchdog, fence_on_resume, write_with_timeout
from marshal_workers.child.priority import Lowering
from marshal_workers.childlink.sharedlease import SharedLease
from marshal_workers.common import leaseclock
from marshal_workers.common.stacks import collect_fault_dumps
from marshal_workers.common.threadsignals import start_leaving_to_the_main_thread

CODE = 31


class NoLog:
    def info(self, event: str, **fields: Any) -> None:
        pass


def main(lease_s: float) -> None:
    lease = SharedLease(multiprocessing.get_context("spawn"))
    lease.extend_to(leaseclock.now() + lease_s)
    collect_fault_dumps(NoLog())
    Lowering(1, 600.0, lambda exc: None)  # its timer waits all along

    def words(reason: str, by: str, code: int) -> None:
        write_with_timeout(2, f"fenced by={by}\n".encode(), 2.0)

    fence = FirstFence(words, lambda reason: CODE)
    start_leaving_to_the_main_thread(
        Watchdog(lease, os.getppid(), lambda reason: fence(reason, "watchdog"))
    )
    fence_on_resume(lease, lambda reason: fence(reason, "resume"))
    sys.setswitchinterval(0.2)
    os.write(1, b"ready\n")
    x = 0
    while True:
        for i in range(10_000):
            x = (x + i) % 7919


if __name__ == "__main__":
    main(float(sys.argv[1]))
