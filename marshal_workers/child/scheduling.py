"""How Linux schedules a child's handling: SCHED_BATCH with a long time slice, unless
``child_scheduling`` is normal.

Eight CPU-bound children on two cores take turns: under SCHED_OTHER the kernel's default slice
(about 1.4 ms on two cores) ends each turn, and every switch costs the next child the caches
the last one filled. A child asks for SCHED_BATCH (a waking batch thread does not preempt a
running one) and for a time slice of `CHILD_SLICE_NS` (``sched_setattr``'s ``sched_runtime``,
which EEVDF kernels, Linux 6.12 and later, take as the slice a thread asks for; older ones
ignore it): turns ten times longer, the same share of the cores. The supervisor stays
SCHED_OTHER with the default slice, so when it wakes (heartbeats, progress, claims) it still
preempts a child.

`use_batch_scheduling` changes the calling thread only (Linux schedules threads, and pid 0
names the caller). `child_main` calls it on the main thread after it has started the watchdog
and before the handler's setup: the watchdog, which ends the child at its lease's end, keeps
SCHED_OTHER and its short slice and wakes as promptly as before; the threads started after it
(librdkafka's, the handler's own) inherit the batch policy and the slice.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from typing import Any

CHILD_SLICE_NS = 20_000_000  # 20 ms (the kernel takes 0.1 to 100 ms)
# sched_setattr(2) is not in the os module; its system call number by machine
_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274, "arm64": 274}
# struct sched_attr, its first version: size, policy, flags, nice, priority, runtime,
# deadline, period
_SCHED_ATTR = struct.Struct("=IIQiIQQQ")


def use_batch_scheduling(enabled: bool, log: Any) -> bool:
    """Put the calling thread under SCHED_BATCH (with the long slice where the kernel takes
    one) if ``enabled``; True if it is now. A refusal (a platform without it, a seccomp filter)
    is logged and changes nothing else."""
    if not enabled:
        return False
    if _set_batch_with_slice(CHILD_SLICE_NS):
        return True
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError) as exc:
        log.info("batch_scheduling_refused", error=str(exc))
        return False
    return True


def _set_batch_with_slice(slice_ns: int) -> bool:
    """``sched_setattr(0, {SCHED_BATCH, runtime: slice_ns})``; False where it cannot be."""
    number = _SCHED_SETATTR.get(platform.machine())
    policy = getattr(os, "SCHED_BATCH", None)
    if number is None or policy is None:
        return False
    try:
        syscall = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return False
    attr = ctypes.create_string_buffer(
        _SCHED_ATTR.pack(_SCHED_ATTR.size, policy, 0, 0, 0, slice_ns, 0, 0)
    )
    return bool(syscall(number, 0, attr, 0) == 0)
