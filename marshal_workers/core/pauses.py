"""Which pause of a group is in force for a member (pure).

An admin pauses a group by writing ReleaseGroup to every coordination partition, and each
partition folds its own. A member honours the longest pause in force by another client, each
judged by its own partition's log time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from marshal_workers.protocol.rationalizer import GroupPause, World, pause_of


def pause_by_other(
    worlds: Iterable[World], group: str, client_id: str, now_ms: int | Callable[[int], int]
) -> GroupPause | None:
    """The pause of ``group`` by a client other than ``client_id`` in force at log time
    ``now_ms`` (one for all partitions, or a function of the partition) on any coordination
    partition (the longest), or None."""
    found: GroupPause | None = None
    for world in worlds:
        if not world.pauses:
            continue
        now = now_ms if isinstance(now_ms, int) else now_ms(world.partition)
        pause = pause_of(world, group, now)
        if pause is None or pause.client_id == client_id:
            continue
        if found is None or pause.until_ms > found.until_ms:
            found = pause
    return found
