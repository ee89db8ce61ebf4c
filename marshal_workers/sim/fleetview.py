"""What the faults and the end-of-run checks see of a simulated run (`scenario.Fleet` is it):
its time, its random stream, its members and log, the checker, and the few acts a fault
needs. A Protocol, so those modules stand below the run instead of beside it in a circle."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Protocol

from marshal_workers.protocol.amolosses import AmoLoss
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.placement import Placement
from marshal_workers.protocol.rationalizer import World
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.sim.children import DataPartition
from marshal_workers.sim.invariants import Checker
from marshal_workers.sim.node import SimNode
from marshal_workers.sim.params import SimParams
from marshal_workers.sim.slices import SimCut
from marshal_workers.sim.vlog import VirtualLog


class FleetView(Protocol):
    """A run, as its faults and checks use it."""

    p: SimParams
    t: float
    rng: random.Random
    log: VirtualLog
    nodes: list[SimNode]
    modes: dict[str, Mode]
    checker: Checker
    cut: SimCut
    poisoned: set[ClaimKey]
    partition_count: dict[str, int]
    instances: int
    # members' folds at fault boundaries: (label, virtual time, world)
    snapshots: list[tuple[str, float, World]]
    failures_written: dict[tuple[str, bytes], int]
    log_losses: list[AmoLoss]
    settled_losses: list[AmoLoss]
    placements: dict[str, Placement]  # the placed groups' placements (none: every group spread)

    def layout(self, group: str) -> Placement: ...

    def keys(self, group: str) -> list[ClaimKey]: ...

    def data_of(self, key: ClaimKey) -> DataPartition: ...

    def add_node(
        self, group: str, client_id: str, at: float, mode: Mode | None = None
    ) -> SimNode: ...

    def at(self, t: float, what: str, action: Callable[[], None]) -> None: ...

    def window(self, seconds: float) -> None: ...
