"""The settings a member's core decides with (pure: built by the runtime from `RunConfig`)."""

from __future__ import annotations

from dataclasses import dataclass

from marshal_workers.ipc import messages as ipc
from marshal_workers.protocol import leases
from marshal_workers.protocol.metadata import GroupSettings
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.placement import Placement, spread
from marshal_workers.protocol.rationalizer import RationalizerConfig
from marshal_workers.protocol.wire import Partitioner

DISCOVERY_INTERVAL_S = 10.0


@dataclass(frozen=True, slots=True)
class MemberSettings:
    """One member's identity and timings (seconds) and the template of its children's spec.

    The heartbeat interval is stored once, in milliseconds, in ``rationalizer``: the fold
    compares broker log times in integer milliseconds and every reader must agree exactly, so
    that is the value that decides; the member's timers (monotonic seconds) read it through
    `heartbeat_interval`, so the core and the fold can never hold two different intervals.
    """

    group: str
    client_id: str
    instance_id: str
    topics: tuple[str, ...]
    mode: Mode
    coordination_partitions: int
    partitioner: Partitioner
    rationalizer: RationalizerConfig
    child: ipc.ChildSpec  # topic, partition, start offset and token are filled in per claim
    stop_timeout: float = 20.0
    max_handler_failures: int = 5
    on_failure: str = "stop"  # dlq, skip or stop: what a failed or killed handler call gets
    restart_backoff: float = 0.5  # the first restart's back-off (doubling)
    handler_timeout: float | None = None  # per handler call (the backstop's and metrics')
    poison_park_after: int = 10  # failures of one record before the claim is parked (0: never)
    poison_park_time: float = 0.0  # a parked record's hold (0: until an operator decides)
    discovery_interval: float = DISCOVERY_INTERVAL_S
    starving_after_hb: float = 4.0  # holding nothing while work is claimable: unhealthy after
    shared: GroupSettings | None = None  # what the group must agree on (None: not watched)
    coordination_topic: str = "__marshal"  # for messages only
    # where the group's claims are coordinated (`protocol.placement`); None: spread over every
    # partition, as every group the runtime runs
    placement: Placement | None = None

    @property
    def layout(self) -> Placement:
        """The group's placement: its own, or spread over every partition by the partitioner."""
        if self.placement is not None:
            return self.placement
        return spread(self.coordination_partitions, self.partitioner)

    @property
    def heartbeat_interval(self) -> float:
        """HB in seconds, for the member's monotonic timers (from the fold's milliseconds)."""
        return self.rationalizer.heartbeat_interval_ms / 1000

    @property
    def hb_ms(self) -> int:
        """HB in milliseconds, as the fold uses it."""
        return self.rationalizer.heartbeat_interval_ms

    @property
    def margin(self) -> float:
        """Taken off every lease (HB/10, within 50 ms and 2 s)."""
        return leases.default_margin(self.heartbeat_interval)

    @property
    def kill_grace(self) -> float:
        """TERM this long before a lease ends, KILL at a third of it."""
        return leases.kill_grace(self.heartbeat_interval)

    @property
    def op_timeout(self) -> float:
        """A write with no verdict after this long is given up on (it may still land)."""
        return max(3 * self.heartbeat_interval, 5.0)
