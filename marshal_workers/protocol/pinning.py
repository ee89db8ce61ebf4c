"""Whether the claims in a coordination log agree with a partition count (pure: no I/O).

The coordination topic's partition count is pinned by a CoordinationTopic record (`metadata`),
and a member refuses a topic whose count is not the pinned one (exit 4). Anyone who may write
the topic can forge that record; then every new member exits 4 and `init` refuses, though the
topic never changed. Re-pinning the count the broker shows (`marshal-admin
repin-partition-count`) is safe only if the topic really has not changed, and the log says
which: every claim record sits on its home partition, ``hash mod N`` for the count N the fleet
wrote it with. So each group's claims are judged against both counts:

- a group whose every claim is on its home partition for the broker's count agrees with it;
- a group whose claims fit only the recorded count is evidence that the topic gained (or
  lost) partitions since: re-pinning would move its claims, and is refused;
- a group whose claims fit neither count (a hostile writer's flood, or another partitioner's
  records) is no evidence either way: named, and left aside.

A claim is judged by the coordination partition its fold holds it on, with its group's
recorded partitioner (the fold is read without its home check, so that misplaced claims show).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from marshal_workers.protocol.rationalizer import World
from marshal_workers.protocol.wire import ClaimKey, Partitioner, coordination_partition


@dataclass(frozen=True, slots=True)
class PinEvidence:
    """Each group with claims, by the counts its claims fit."""

    actual: int  # the count the broker's metadata shows
    recorded: int  # the pinned count
    agree: tuple[str, ...]  # every claim on its home for ``actual``
    recorded_only: tuple[str, ...]  # fit ``recorded`` and not ``actual``: the topic changed
    neither: tuple[str, ...]  # fit no count: no evidence

    @property
    def safe(self) -> bool:
        """Whether re-pinning ``actual`` moves no group's claims."""
        return not self.recorded_only


def pin_evidence(
    worlds: Mapping[int, World], recorded: int, actual: int, default: Partitioner
) -> PinEvidence:
    """Judge every group's claims in ``worlds`` (folded without the home check) against the
    broker's count ``actual`` and the ``recorded`` one; a group's partitioner is its recorded
    one, else ``default``."""
    partitioners: dict[str, Partitioner] = {}
    placed: dict[str, list[tuple[ClaimKey, int]]] = {}
    for p, world in worlds.items():
        for group, settings in world.group_settings.items():
            partitioners.setdefault(group, settings.partitioner)
        for key in world.claims:
            placed.setdefault(key.group, []).append((key, p))
    agree, recorded_only, neither = [], [], []
    for group, claims in sorted(placed.items()):
        partitioner = partitioners.get(group, default)
        if _fits(claims, actual, partitioner):
            agree.append(group)
        elif _fits(claims, recorded, partitioner):
            recorded_only.append(group)
        else:
            neither.append(group)
    return PinEvidence(actual, recorded, tuple(agree), tuple(recorded_only), tuple(neither))


def _fits(claims: list[tuple[ClaimKey, int]], count: int, partitioner: Partitioner) -> bool:
    """Whether every claim is on its home partition for ``count`` partitions."""
    return all(
        coordination_partition(k.topic, k.partition, count, partitioner) == p for k, p in claims
    )
