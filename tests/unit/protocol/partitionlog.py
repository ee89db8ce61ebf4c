"""Coordination partitions folded record by record, for the tests of a group's move: each
partition's world, its next offset, and the events its records got (`test_status_after_move`,
`test_amo_losses_after_move`, `tests/unit/admin/test_topic_view_after_move`)."""

from __future__ import annotations

from collections.abc import Iterable

from marshal_workers.protocol import events as ev
from marshal_workers.protocol.metadata import GroupSettings, encode_metadata, metadata_key
from marshal_workers.protocol.placement import Placement, PlacementBook, reads
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.wire import CoordRecord, Message, Partitioner, encode, record_key

ADMIN = "marshal-admin"


class PartitionLog:
    """``partitions`` folded with ``config``; settings are ``group``'s unless told."""

    def __init__(self, config: RationalizerConfig, partitions: Iterable[int], group: str) -> None:
        self.config = config
        self.group = group
        self.worlds = {p: World(config, p) for p in sorted(partitions)}
        self.offsets = dict.fromkeys(self.worlds, 0)
        self.events: dict[int, list[ev.Event]] = {p: [] for p in self.worlds}

    def put(self, p: int, t: int, key: bytes, value: bytes) -> None:
        event = fold(self.worlds[p], CoordRecord(p, self.offsets[p], t, key, value))
        self.events[p].append(event)
        self.offsets[p] += 1

    def message(self, p: int, t: int, m: Message) -> None:
        self.put(p, t, record_key(m), encode(m))

    def settings(
        self, p: int, t: int, placement: Placement, client: str, group: str | None = None
    ) -> None:
        """The group's settings (placed by ``placement``) as ``client`` records them."""
        s = GroupSettings(t, f"{client}-1", client, group or self.group,
                          self.config.heartbeat_interval_ms, Partitioner.SPEC,
                          frozenset({ADMIN}), None, placement)  # fmt: skip
        self.put(p, t, metadata_key(s), encode_metadata(s))


def group_log(group: str, placement: Placement, partitions: int, hb_ms: int = 1000) -> PartitionLog:
    """``group``'s partitions (home and window) folded as its members fold them."""
    config = RationalizerConfig(
        hb_ms, num_partitions=partitions, admin_client_ids=frozenset({ADMIN}), only_group=group,
        placements=PlacementBook.of({group: placement}),
    )  # fmt: skip
    return PartitionLog(config, reads(group, placement), group)
