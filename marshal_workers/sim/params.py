"""What one simulated run is given: its fleet, its log, its faults (`marshal-sim`'s options)."""

from __future__ import annotations

from dataclasses import dataclass

FAULTS = (
    "kill",
    "freeze",
    "restart",
    "twins",
    "compaction",
    "eager-compaction",
    "latency",
    "clock",
    "failures",
    "pause",
    "partitions",
    "shared-ids",
    "poison",
    "read-latency",
    "clock-jumps",
    "forgery",
    "stall",
    "feed-loss",
    "amo-poison",
    "mixed-modes",
    "forged-takeover",
    "tree-stop",
)
DEFAULT_FAULTS = (
    "kill",
    "freeze",
    "stall",
    "restart",
    "twins",
    "compaction",
    "latency",
    "clock",
    "pause",
    "poison",
    "feed-loss",
)
POISON_PARK_AFTER = 4  # failures of one record before its claim is parked (the fleet's setting)
MAX_HANDLER_FAILURES = 3


@dataclass(frozen=True, slots=True)
class SimParams:
    """What one run simulates."""

    seed: int = 0
    members: int = 6
    groups: int = 2
    partitions: int = 8  # per group
    duration: float = 30.0  # virtual seconds
    heartbeat_interval: float = 1.0
    coordination_partitions: int = 4
    faults: tuple[str, ...] = DEFAULT_FAULTS
    fault_count: int = 3
    dt: float = 0.05
    speed: float = 200.0  # records a child handles per second
    rate: float = 20.0  # records produced per partition per second
    backlog: int = 100
    # What a claim covers (`protocol.slicing`), and slices per data partition
    ordering: str = "partition"
    workers_per_partition: int = 1
    fail_rate: float = 0.02  # `failures`: the share of appends that fail (half land anyway)
    operator_skips: float = 0.0  # `poison`: the share of operators' decisions that skip
    # Where each group's claims are coordinated (`protocol.placement`): ``spread`` over every
    # coordination partition, or ``placed`` in a window of ``span`` partitions from its home
    placement: str = "spread"
    span: int = 1

    @property
    def settle(self) -> float:
        """The liveness bound: after the last fault ends, everything is held and fair by then."""
        return 10 * self.heartbeat_interval + 3.0
