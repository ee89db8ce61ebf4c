"""Leases as arithmetic, the one place the lease rule is written (docs/design.md, leases).

A rival can claim only at log time > last valid heartbeat + 2*HB, so a holder that sent a
heartbeat at time s on its lease clock (`common.leaseclock`: CLOCK_BOOTTIME, which counts a
suspend), and saw it folded valid, is safe until s + 2*HB - margin, provided that clock ran
while the broker's did: a clock that stood still longer than `clock_tolerance` is detected
(`core.clockcheck`) and ends every lease judged on it.
The supervisor TERMs a child a kill grace before that deadline and KILLs it at a third of it.
Heartbeats go out every HB/2, so when coordination writes stall (a broker died) the last lease
confirmed before the stall still runs 1.5*HB - margin - kill grace after the stall began:
`outlasts_stall` and `min_heartbeat_s` are that bound. Used by the core, the runtime, the child's
shared lease and the supervisor's broker check. Pure: seconds in, seconds out.
"""

from __future__ import annotations


def lease_deadline(sent_at: float, heartbeat_interval_s: float, margin_s: float) -> float:
    """The lease-clock time until which a heartbeat sent at ``sent_at`` keeps the claim safe."""
    return sent_at + 2 * heartbeat_interval_s - margin_s


def default_margin(heartbeat_interval_s: float) -> float:
    """Safety margin taken off every lease: a tenth of HB, at least 50 ms, at most 2 s."""
    return min(2.0, max(0.05, heartbeat_interval_s / 10))


def clock_tolerance(heartbeat_interval_s: float) -> float:
    """How much further the log's time (or the wall clock) may move than the lease clock before
    a member takes its lease clock to have stood still: half the lease margin. A smaller loss
    goes unnoticed and eats at most that half of the margin; the other half is left to a
    write's latency (decision 19)."""
    return default_margin(heartbeat_interval_s) / 2


def kill_grace(heartbeat_interval_s: float) -> float:
    """TERM a child this long before its lease ends (KILL at a third of it): HB/4, at most 1 s."""
    return min(1.0, heartbeat_interval_s / 4)


def stall_tolerance(heartbeat_interval_s: float) -> float:
    """How long coordination writes may stall before a confirmed lease comes to its kill grace:
    the last heartbeat confirmed was sent at most HB/2 before the stall began."""
    hb = heartbeat_interval_s
    return 1.5 * hb - default_margin(hb) - kill_grace(hb)


def min_heartbeat_s(stall_s: float, step_s: float = 0.5) -> float:
    """The least heartbeat interval (a multiple of ``step_s``) that outlasts a ``stall_s`` stall."""
    hb = step_s
    while stall_tolerance(hb) <= stall_s:
        hb += step_s
    return hb


def min_compaction_lag_ms(heartbeat_interval_s: float) -> int:
    """The least ``min.compaction.lag.ms`` a member accepts on its coordination topic: 4*HB.

    A reader that meets a gap treats what it folded before as uncertain and lets a rival win
    only after 2*HB of log time with no record of the claim; that holds only while every
    record of the last lease (2*HB) survives the cleaner. Twice that covers a cleaner whose
    clock runs ahead of the log time it compares with."""
    return round(4 * heartbeat_interval_s * 1000)
