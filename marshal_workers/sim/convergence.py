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
# A release that did not land is not written again (the member cannot tell it did not land,
# and one landing after a rival's claim is decision 19's hazard): the claim waits for its
# record to go stale, 2*HB after its last heartbeat. That is the lease it had left when the
# release was sent more than a lease lost to failing writes waits (its stale margin).
# A claim's problem begins at the check that first sees its child gone (checks every 0.25 s);
# its release goes as the member handles the exit, around then
LOST_RELEASE_LEAD_S = 0.5
STUCK_AFTER_S = 2.0  # a claim with a record of its own available and not handled this long


def converged(fleet: FleetView) -> bool:
    """Every partition of every group handled by a live child and moving (a record handled
    in the last 2 s, or none of its own available for that long); every member announced;
    shares fair."""
    return not problems(fleet)


def problems(fleet: FleetView) -> dict[str, str]:
    """What keeps the fleet from being converged now, by what it is about (a group, a claim
    or a member) and what is wrong with it (empty: converged): a group with no live member, a
    claim no live child holds or held and not moving, a member not announced or over its fair
    share."""
    t = fleet.t
    found: dict[str, str] = {}
    for group in fleet.modes:
        live = [
            n
            for n in fleet.nodes
            if n.alive and n.started and not n.frozen(t) and n.settings.group == group
        ]
        if not live:
            found[group] = "no live member"
            continue
        covered = {
            key
            for n in live
            for key, child in n.children.items()
            if child.alive and t >= child.ready_at and child.lease() > t
        }
        # (a poisoned partition is parked: held, with no child)
        for key in set(fleet.keys(group)) - fleet.poisoned - covered:
            found[named(key)] = "held by no live child"
        last = fleet.checker.last_handled
        # (of the claims held only: looking a claim's data up creates it, and a run must not
        # depend on what its checks looked at)
        moving = [k for k in fleet.keys(group) if k not in fleet.poisoned and k in covered]
        stuck = [k for k in moving if t - last.get(k, -1e9) > STUCK_AFTER_S]
        for key in stuck:
            if not _idle(fleet, key, live, t):  # held but not moving (records keep coming)
                found[named(key)] = "not moving"
        announced = {n.member.member for n in live if n.member.member in n.member.held}
        for n in live:
            if n.member.member not in announced:  # (twins share one announcement)
                found[n.name] = "not announced"
        members = {n.settings.client_id for n in live}  # twins share one client id
        share = math.ceil(len(fleet.keys(group)) / len(members))
        for n in live:
            if len(n.held_data()) > share:
                found[n.name] = f"over its share of {share}"
    return found


def named(key: ClaimKey) -> str:
    """A claim as `problems` names it."""
    return f"{key.topic}/{key.partition}"


def releases_lost(fleet: FleetView) -> dict[str, tuple[float, float]]:
    """Each claim's latest release that did not land, by `named`: when it was sent and the
    lease its claim had left then."""
    lost: dict[str, tuple[float, float]] = {}
    for node in fleet.nodes:
        for key, sent in node.releases_lost.items():
            name = named(key)
            lost[name] = max(sent, lost.get(name, sent))
    return lost


class Recovering:
    """Under lasting write failures, how long each claim, member or group goes without being
    fine (`problems`), to judge the fleet by that rather than by one check at which nothing is
    wrong.

    At 30% of writes failing a claim's lease is lost every few seconds somewhere in the fleet
    (three heartbeats in a row fail), and is recovered in about 2*HB; with sixteen claims and
    their members one or another is always recovering, so the fleet may be converged at none
    of the window's checks though nothing is wedged (seeds 84 of `failures,read-latency,stall`
    and 213000 of `failures,read-latency,kill,stall` at 0.3). A wedge is one claim (or member)
    that is not fine for long, whatever is wrong with it from one check to the next: a child
    that crashes in a loop is held by no live child, then not moving, then again (a review).
    The bound on one: `recovery_bound_s`; for a claim whose release did not land in its
    spell, plus the lease it had left when the release was sent (seed 1880131 of
    `feed-loss,failures,read-latency,stall` at 0.3, unordered/4)."""

    def __init__(self) -> None:
        self.since: dict[str, float] = {}  # each one not fine now: since when
        # over the window's checks, the one furthest past its bound: (how far past the common
        # bound, what, what is wrong, how long, the more it was allowed)
        self.longest: tuple[float, str, str, float, float] | None = None
        self.judged = False  # a check in the window was made

    def checked(
        self,
        found: dict[str, str],
        t: float,
        *,
        in_window: bool,
        releases_lost: dict[str, tuple[float, float]] | None = None,
    ) -> None:
        """The problems at the check at ``t``; ``in_window``: at or after the bound;
        ``releases_lost``: each claim's latest release that did not land (`releases_lost`)."""
        self.since = {what: self.since.get(what, t) for what in found}
        if not in_window:
            return
        self.judged = True
        lost = releases_lost or {}
        for what, since in self.since.items():
            # as long as its checks say: the run's clock is a sum of float steps, and a spell
            # of exactly the bound was past it by 4e-15 s (seed 1820006, a review)
            lasted = round(t - since, 6)
            sent, left = lost.get(what, (-math.inf, 0.0))
            allowed = round(left, 6) if sent >= since - LOST_RELEASE_LEAD_S else 0.0
            past = round(lasted - allowed, 6)
            if self.longest is None or past > self.longest[0]:
                self.longest = (past, what, found[what], lasted, allowed)

    def within(self, bound_s: float) -> bool:
        """Whether checks were made in the window and nothing there stayed not fine for longer
        than ``bound_s`` (and what it was allowed more)."""
        return self.judged and (self.longest is None or self.longest[0] <= bound_s)

    def describe(self) -> str:
        """The longest spell, for a violation's detail."""
        if self.longest is None:
            return ""
        _, what, wrong, lasted, allowed = self.longest
        more = f", {allowed:.2f}s more allowed: a release of it did not land" if allowed else ""
        return f"; longest: {what} {wrong} for {lasted:.1f}s{more}"


def recovery_bound_s(fleet: FleetView) -> float:
    """How long one claim or member may stay not fine under lasting write failures: a lease
    lost to them is recovered within `FAILURES_RECOVERY_HB` (its stale margin, a claim round,
    the claim's first heartbeat and a child's start), plus one HB for the failed writes of
    those steps (each costs up to HB/2: two of them)."""
    return (FAILURES_RECOVERY_HB + 1.0) * fleet.p.heartbeat_interval


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
