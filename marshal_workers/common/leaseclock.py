"""The clock every lease, handler deadline and call start is kept on, in every process.

A lease promises that its holder stops before a rival can win the claim, and the rival's
chance is measured in the broker's time. A clock that stands still while the broker's runs
breaks that promise: Linux's CLOCK_MONOTONIC (``time.monotonic``) does not advance while the
host is suspended, so a member woken from a suspend would believe its leases still run.
CLOCK_BOOTTIME counts the suspend; it is the lease clock wherever the platform has it, and
CLOCK_MONOTONIC elsewhere.

The supervisor writes lease deadlines and the child compares them with its own readings, so
both sides of the process boundary read this clock, and nothing that crosses the boundary as a
deadline or a start time may come from another one. A VM pause that the guest's clocks do not
see at all is caught by other means (the member compares the log's time with this clock).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Final

CLOCK_ID: Final[int] = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)
CLOCK_NAME: Final[str] = "CLOCK_BOOTTIME" if hasattr(time, "CLOCK_BOOTTIME") else "CLOCK_MONOTONIC"

now: Final[Callable[[], float]] = functools.partial(time.clock_gettime, CLOCK_ID)
"""Seconds on the lease clock (an arbitrary origin, never goes back, counts a suspend)."""
