"""Leases as arithmetic (DESIGN.md section 3), shared by the core, the runtime and the child.

A rival can claim only at log time > last valid heartbeat + 2*HB, so a holder that sent a
heartbeat at local monotonic time s, and saw it folded valid, is safe until s + 2*HB - margin.
"""

from __future__ import annotations


def lease_deadline(sent_at: float, heartbeat_interval_s: float, margin_s: float) -> float:
    """The monotonic time until which a heartbeat sent at ``sent_at`` keeps the claim safe."""
    return sent_at + 2 * heartbeat_interval_s - margin_s


def default_margin(heartbeat_interval_s: float) -> float:
    """Safety margin taken off every lease: a tenth of HB, at least 50 ms, at most 2 s."""
    return min(2.0, max(0.05, heartbeat_interval_s / 10))
