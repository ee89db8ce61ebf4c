"""The lease clock counts a suspended host's sleep where the platform can."""

from __future__ import annotations

import sys
import time

import pytest

from marshal_workers.common import leaseclock


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="CLOCK_BOOTTIME is Linux's")
def test_on_linux_leases_are_kept_on_the_clock_that_counts_a_suspend() -> None:
    """On Linux the lease clock is CLOCK_BOOTTIME, not CLOCK_MONOTONIC (stopped in a suspend)."""
    assert leaseclock.CLOCK_ID == time.CLOCK_BOOTTIME
    assert leaseclock.CLOCK_NAME == "CLOCK_BOOTTIME"
    before = time.clock_gettime(time.CLOCK_BOOTTIME)
    reading = leaseclock.now()
    after = time.clock_gettime(time.CLOCK_BOOTTIME)
    assert before <= reading <= after


def test_the_lease_clock_never_goes_back() -> None:
    """Successive readings never decrease."""
    readings = [leaseclock.now() for _ in range(1000)]
    assert readings == sorted(readings)
