"""When a simulated fleet counts as converged: the liveness check (`sim.invariants`'s
``liveness``) asks, from the bound after the last fault on, for one check at which every
partition of every group is held by a live child and moving, every member announced, and
shares fair.
"""

from __future__ import annotations

import math

from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.sim.fleetview import FleetView
from marshal_workers.sim.node import SimNode

# liveness: from the bound on, the fleet must be converged at one check (every 0.25 s) within
# this window; under a lasting fault (2% of writes failing) a child restarting at the one
# instant a run ends is no wedge, and a wedge or a loop converges at none of them
CHECK_WINDOW_S = 2.0
# Under lasting write failures a lease can end at any time, the bound included: a claim's
# heartbeats fail to land for 1.5*HB (three in a row) and its child is stopped. The claim is
# stale a margin later, claimed again within a claim round, its start heartbeated and a child
# started: under 1*HB with no further failure, each failed write of those steps costing up to
# HB/2 more. The bound under failures: converged at one check within CHECK_WINDOW_S + this.
FAILURES_RECOVERY_HB = 2.0
STUCK_AFTER_S = 2.0  # a claim with a record of its own available and not handled this long


def converged(fleet: FleetView) -> bool:
    """Every partition of every group handled by a live child and moving (a record handled
    in the last 2 s, or none of its own available for that long); every member announced;
    shares fair."""
    t = fleet.t
    for group in fleet.modes:
        live = [
            n
            for n in fleet.nodes
            if n.alive and n.started and not n.frozen(t) and n.settings.group == group
        ]
        if not live:
            return False
        covered = {
            key
            for n in live
            for key, child in n.children.items()
            if child.alive and t >= child.ready_at and child.lease() > t
        }
        if not set(fleet.keys(group)) - fleet.poisoned <= covered:
            return False  # (a poisoned partition is parked: held, with no child)
        last = fleet.checker.last_handled
        moving = [k for k in fleet.keys(group) if k not in fleet.poisoned]
        stuck = [k for k in moving if t - last.get(k, -1e9) > STUCK_AFTER_S]
        if any(not _idle(fleet, k, live, t) for k in stuck):
            return False  # held but not moving: a wedged partition (records keep coming)
        announced = {n.member.member for n in live if n.member.member in n.member.held}
        if any(n.member.member not in announced for n in live):
            return False  # a member not announced (twins share one announcement)
        members = {n.settings.client_id for n in live}  # twins share one client id
        share = math.ceil(len(fleet.keys(group)) / len(members))
        if any(len(n.held_data()) > share for n in live):
            return False
    return True


def _idle(fleet: FleetView, key: ClaimKey, live: list[SimNode], t: float) -> bool:
    """Whether a claim that handled nothing for `STUCK_AFTER_S` has nothing to handle: a
    live child of it has handled every record of its own produced that long ago. A key
    slice may get a record only every few seconds (a slice no key hashes to takes only
    keyless records): idle is not stuck; a record available and not handled is."""
    produced = fleet.data_of(key).high_watermark(t - STUCK_AFTER_S)
    for node in live:
        child = node.children.get(key)
        if child is None or not child.alive or t < child.ready_at:
            continue
        takes = child.takes
        if not any(takes is None or takes(o) for o in range(child.position, produced)):
            return True
    return False


def check_window(fleet: FleetView) -> float:
    """How long after the liveness bound the fleet has to be converged at one check: a
    lease lost to failing writes at the bound is recovered within `FAILURES_RECOVERY_HB`."""
    if "failures" in fleet.p.faults:
        return CHECK_WINDOW_S + FAILURES_RECOVERY_HB * fleet.p.heartbeat_interval
    return CHECK_WINDOW_S
