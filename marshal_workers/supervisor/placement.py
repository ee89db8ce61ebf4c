"""Where a member's group is coordinated: found (or chosen) before the member folds anything.

A member knows only its group's name and N, the coordination topic's partition count. It reads
the group's *home* first (`protocol.placement.home`: md5(group) mod N), where every settings
record of a placed group is:

1. placed settings of the group there: the member follows that placement's partitions (home
   and window) and nothing else; a placement made for another N is refused (exit 4, the
   group's pin);
2. spread (legacy) settings: every partition, as before placement;
3. none: the group is new, or older than settings records. The *creation scan*, once in a
   group's life: partition 0's topic record first; a version-1 topic (or none) is spread,
   as before placement. On a version-2 topic whose count is the recorded one (else exit 4)
   every partition, home and 0 included, is read once from its first record; placed settings
   of the group made for another count (the count changed and was repinned: its home moved)
   are refused there (exit 4), before anything is written. Settings of the
   group on home by then (a member created it meanwhile: it writes them there before anything
   else, so they are read if any record of it was) decide. Else any record of the group (a
   keyless one too: a Marshal Go fleet's, which the member then refuses on its spread path,
   exit 5 as before) makes it a group from before, spread. Otherwise the member
   records placed settings on home (span from ``coordination_span``), folds home past them,
   and takes the settings the fold accepted there: the first written win, so members that
   create one group at the same moment agree on one placement.

A member that took its new group spread because the topic was version 1 checks, once its
settings are recorded, that it is version 1 still (`refuse_placing_since`): else a member
started after `init --enable-placement` may have placed the group meanwhile.

The caller then follows `reads` of the answer (every partition for spread) from their first
record and folds them into the member's core. This reader's fold keeps only the group's state.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from marshal_workers.common.errors import EXIT_COORDINATION_CHANGED, ConfigError, MarshalError
from marshal_workers.config.runconfig import RunConfig
from marshal_workers.fleet.groupcheck import (
    WRITE_TIMEOUT_S,
    check_partition_count,
    own_settings,
)
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.interface import CoordinationLog, LogError
from marshal_workers.protocol.metadata import (
    METADATA_PARTITION,
    GroupSettings,
    settings_records,
)
from marshal_workers.protocol.placement import Placement, auto_span, home, placed
from marshal_workers.protocol.rationalizer import RationalizerConfig, World
from marshal_workers.protocol.wire import CoordRecord, DecodeError, ReleaseGroup, decode


@dataclass(frozen=True, slots=True)
class Located:
    """Where a member's group is coordinated (None: spread), and whether it was taken spread
    only because the topic placed no new groups then (no settings on home, a version-1
    topic record): such a member must see the topic still version 1 after its settings are
    recorded (`refuse_placing_since`)."""

    placement: Placement | None
    new_while_spreading: bool = False


def locate_member_group(
    log: CoordinationLog, config: RunConfig, claims: int, timeout_s: float
) -> Placement | None:
    """`locate_member`'s placement."""
    return locate_member(log, config, claims, timeout_s).placement


def locate_member(
    log: CoordinationLog, config: RunConfig, claims: int, timeout_s: float
) -> Located:
    """The placement of ``config.group``'s claims (None: spread over every partition), found
    or created as the module says. ``claims``: the member's claims (for an auto span). The
    log is left following what the last step read."""
    n = log.num_partitions
    group = config.group
    reader = FoldedLog(
        log,
        RationalizerConfig(
            config.heartbeat_interval_ms,
            num_partitions=n,
            partitioner=config.partitioner,
            admin_client_ids=config.admin_client_ids,
            only_group=group,
        ),
    )
    at = home(group, n)
    reader.follow([at])
    reader.catch_up(timeout_s)
    found = reader.worlds[at].group_settings.get(group)
    if found is None:
        reader.follow([at, METADATA_PARTITION])
        reader.catch_up(timeout_s)
        pin = reader.worlds[METADATA_PARTITION].topic_record
        if pin is None or not pin.placed:
            # a version-1 topic: new groups are spread, as before placement
            return Located(None, new_while_spreading=True)
        found = _creation_scan(reader, config, claims, timeout_s)
        if found is None:
            return Located(None)
    return Located(_checked(found, config, n))


def refuse_placing_since(worlds: Mapping[int, World], group: str) -> None:
    """For a member that took its new group spread on a version-1 topic (`Located`): refuse
    (exit 1: started again, it locates the group anew) if the topic record it has folded is
    version 2 now. `marshal-admin init --enable-placement` ran meanwhile, and a member started
    since may have found nothing of the group and placed it (its settings on home replace
    spread ones: only placed records survive the cleaner). Checked once the member's spread
    settings are folded on every partition and the log folded to its end after them: if the
    topic record is still version 1 then, it was written after those settings were, so any
    member that read it reads them on home too, and takes the group spread."""
    pin = worlds[METADATA_PARTITION].topic_record
    if pin is not None and pin.placed:
        raise MarshalError(
            f"group {group} was taken for new and spread while the coordination topic placed "
            "no new groups, and it places them now (marshal-admin init --enable-placement "
            "ran meanwhile): stopping before claiming anything; started again, the member "
            "locates the group anew"
        )


def _checked(found: GroupSettings, config: RunConfig, n: int) -> Placement | None:
    """The recorded placement, refused if made for another partition count (exit 4) or of
    another span than this member's explicit ``coordination_span`` (exit 2)."""
    placement = found.placement
    if placement is None:
        return None
    if placement.partitions != n:
        raise MarshalError(
            f"coordination topic {config.coordination_topic} has {n} partitions but group "
            f"{config.group} was placed for {placement.partitions}: its claims would move; "
            "refusing (move the group to a new coordination topic: docs/operating.md, "
            "'Changing the coordination topic')",
            EXIT_COORDINATION_CHANGED,
        )
    span = config.coordination_span
    if span is not None and span != placement.span:
        raise ConfigError(
            f"coordination_span is {span} here but {placement.span} in group {config.group}'s "
            "settings: every member of a group shares it (leave it auto to take the group's, or "
            f"move the group: marshal-admin group-settings --move --span {span})"
        )
    return placement


def _creation_scan(
    reader: FoldedLog, config: RunConfig, claims: int, timeout_s: float
) -> GroupSettings | None:
    """Home holds no settings of the group, and the topic (its record folded) places new
    groups: spread (None) if the group has records from before; else create it placed and
    return the settings the fold accepted on home."""
    log, group = reader.log, config.group
    n = log.num_partitions
    at = home(group, n)
    # the count recorded at init first (exit 4, nothing written), as for a spread group
    check_partition_count(config.coordination_topic, reader.worlds, n)
    # every partition from its first record, home and 0 too: their records were folded above
    # but not examined for the group's
    reader.follow(range(n), from_start=True)
    seen = _group_seen(reader, group, timeout_s)
    _refuse_other_count(reader, config, n)
    if seen:
        # A member that created the group meanwhile wrote its settings on home before anything
        # else: folded to the ends as they are now, home shows them if a record of theirs was
        # seen. Home's settings decide; only without any is the group one from before.
        reader.catch_up(timeout_s)
    found = reader.worlds[at].group_settings.get(group)
    if found is not None or seen:
        return found
    span = config.coordination_span or auto_span(claims, n)
    if not 1 <= span <= n:
        raise ConfigError(f"coordination_span {span} is more than the topic's {n} partitions")
    mine = replace(own_settings(config), placement=placed(group, n, span, config.partitioner))
    try:
        for key, value in settings_records(mine):
            appended = log.append(at, key, value, WRITE_TIMEOUT_S)
        verdict, _ = reader.wait_for(appended, timeout_s)
    except LogError as exc:
        raise MarshalError(f"cannot record group {group}'s settings: {exc}") from None
    accepted = reader.worlds[at].group_settings.get(group)
    if accepted is None:  # the fold took no settings of the group at all: cannot be, say so
        raise MarshalError(f"group {group}'s settings were not taken on its home: {verdict}")
    return accepted  # ours, or the first writer's (a member that created it at the same time)


def _refuse_other_count(reader: FoldedLog, config: RunConfig, n: int) -> None:
    """Placed settings of the group made for another partition count, off today's home (the
    count changed and the topic was repinned): its claims' positions are where that placement
    put them; refused (exit 4) before anything is written."""
    for world in reader.worlds.values():
        found = world.group_settings.get(config.group)
        if found is not None and found.placement is not None and found.placement.partitions != n:
            _checked(found, config, n)


def _group_seen(reader: FoldedLog, group: str, timeout_s: float) -> bool:
    """Fold every followed partition to its end; whether any record names ``group``."""
    log = reader.log
    deadline = time.monotonic() + timeout_s
    targets = log.end_offsets(timeout_s)
    seen = False
    while not reader.caught_up_to(targets):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LogError(f"coordination log not read to its end within {timeout_s:.0f}s")
        records = log.poll(min(remaining, 0.5))
        seen = seen or any(_of_group(r, group) for r in records)
        reader.fold_records(records)
    return seen


def _of_group(record: CoordRecord, group: str) -> bool:
    """Whether a record is the group's, from before: its key names the group, or (keyless: a
    Marshal Go writer) its value does. A keyed pause is not (`release-group --new-group` before
    the first member starts writes one on every partition; it holds no claim, and made the
    group spread; a review); a keyless one is a Go fleet's, refused on the spread path."""
    key = record.key
    name = group.encode()
    if key is not None:
        if not (key == name or key.startswith(name + b"/")):
            return False
        try:
            return not isinstance(decode(record.value), ReleaseGroup)
        except DecodeError:
            return True  # (a settings record, or malformed: the group's all the same)
    try:
        return decode(record.value).group_id == group
    except DecodeError:
        return False
