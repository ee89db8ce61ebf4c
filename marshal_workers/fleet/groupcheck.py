"""What a member checks against the log before it claims, and watches while it runs.

1. The coordination topic's partition count must be the one `marshal-admin init` recorded
   (`metadata.partition_count_problem`): a topic without a record is refused (exit 2: run
   init), a different count is refused (exit 4, which systemd does not restart on), at start
   here and at run time by the supervisor's partition discovery.
2. The group's shared settings (heartbeat interval, partitioner, admin ids, ordering, placement,
   mode) must be this member's: the first member of a group records its own on every
   coordination partition (again where they lack the mode, `metadata`); a
   member whose settings differ is refused at start with one line naming the setting and both
   values (exit 2). The core (`core.operator`) notices a change while running (an operator's
   `marshal-admin group-settings`): the member then stops gracefully and exits 2.

The checks only read the fold (`FoldedLog.worlds`); the writes go through the member's own
coordination log handle, and count once acknowledged and folded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from marshal_workers.common.errors import (
    EXIT_COORDINATION_CHANGED,
    ConfigError,
    MarshalError,
    PlacementMovedError,
)
from marshal_workers.config.runconfig import RunConfig
from marshal_workers.log.interface import CoordinationLog, LogError
from marshal_workers.protocol.metadata import (
    METADATA_PARTITION,
    GroupSettings,
    needs_recording,
    partition_count_problem,
    placement_moved,
    recorded_problem,
    settings_problem,
    settings_records,
)
from marshal_workers.protocol.placement import home
from marshal_workers.protocol.rationalizer import World

WRITE_TIMEOUT_S = 10.0


def own_settings(config: RunConfig, unix_sec: int | None = None) -> GroupSettings:
    """This member's shared settings, as a GroupSettings record."""
    return GroupSettings(
        int(time.time()) if unix_sec is None else unix_sec,
        config.instance_id,
        config.client_id,
        config.group,
        config.heartbeat_interval_ms,
        config.partitioner,
        config.admin_client_ids,
        config.slicing,
        mode=config.mode,
    )


def check_partition_count(topic: str, worlds: Mapping[int, World], actual: int) -> None:
    """Refuse a coordination topic whose partition count is not the recorded one."""
    record = worlds[METADATA_PARTITION].topic_record
    problem = partition_count_problem(topic, None if record is None else record.partitions, actual)
    if problem is None:
        return
    if record is None:
        raise ConfigError(problem)
    raise MarshalError(problem, EXIT_COORDINATION_CHANGED)


def group_settings_problem(worlds: Mapping[int, World], mine: GroupSettings) -> str | None:
    """Why ``mine`` may not act on its group, per the settings recorded on any partition."""
    return recorded_problem((w.group_settings.get(mine.group_id) for w in worlds.values()), mine)


def ensure_group_settings(
    log: CoordinationLog,
    worlds: Mapping[int, World],
    catch_up: Callable[[float], object],
    mine: GroupSettings,
    timeout_s: float,
) -> None:
    """Record ``mine`` on every followed coordination partition (``worlds``: every one for a
    spread group, home and window for a placed one) that has no settings for the group yet, or
    settings without a mode (`metadata`: a group from before modes were recorded); fold to the
    end (``catch_up`` folds into ``worlds``), and refuse (ConfigError) if the group's settings
    differ from ``mine`` (`PlacementMovedError`, exit 6, if only in the placement: the group
    moved since this member located it, and started again it finds the new one)."""
    # Checked before writing too: the first settings on a partition win there, so a member
    # whose settings differ from those recorded (a placed group's on home) would otherwise win
    # the window partitions its creator has not copied them to yet, and every member with the
    # group's settings would be refused after it (exit 2, not restarted).
    _refuse_if_differ(worlds, mine)
    missing = [
        p for p, w in worlds.items() if needs_recording(w.group_settings.get(mine.group_id), mine)
    ]
    # A placed group's home first, folded and checked before the window: the settings go as a
    # pair (without the mode, then with it: `settings_records`), and a rival of the other mode
    # that saw only the first of the creator's pair on home would otherwise win the window
    # partitions with its own mode while the creator's wins home (each member then refused on
    # one or the other)
    first = [] if mine.placement is None else [home(mine.group_id, mine.placement.partitions)]
    steps = [[p for p in missing if p in first], [p for p in missing if p not in first]]
    records = settings_records(mine)  # a placed group's: keys per writer and second
    for step in (s for s in steps if s):
        try:
            for p in step:
                for key, value in records:
                    log.append(p, key, value, WRITE_TIMEOUT_S)
            catch_up(timeout_s)
        except LogError as exc:
            raise MarshalError(f"cannot record group {mine.group_id}'s settings: {exc}") from None
        _refuse_if_differ(worlds, mine)


def _refuse_if_differ(worlds: Mapping[int, World], mine: GroupSettings) -> None:
    """Refuse (ConfigError) if the group's recorded settings differ from ``mine``
    (`PlacementMovedError` if only in the placement)."""
    problem = group_settings_problem(worlds, mine)
    if problem is None:
        return
    recorded = [w.group_settings.get(mine.group_id) for w in worlds.values()]
    differing = [r for r in recorded if r is not None and settings_problem(r, mine) is not None]
    if all(placement_moved(r, mine) for r in differing):  # (one at least: a problem was found)
        raise PlacementMovedError(f"the group's placement moved: {problem}")
    raise ConfigError(problem)
