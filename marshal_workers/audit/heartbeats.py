"""Each group's heartbeat interval, as the coordination log records it (pure).

The heartbeat interval decides every verdict (fresh, unknown, stale; who may claim; when a
lease ends), and each group's members fold with their own: the one their group's settings
record (`metadata.GroupSettings`, newest wins; a member with another is refused). So the audit
reads the settings records first (`from_records`; those the fold accepts, `settings_records`)
and judges each group with its interval:

- A record of a group is judged with the interval its group's settings record *in force* at
  that record, on that coordination partition (settings are written on every partition, so
  a change is ordered with the records around it); before the first settings record of the
  group there, with the group's first recorded interval; a group with no settings at all (a
  log written before settings were recorded) with the default.
- The default is the interval given (``--heartbeat-interval``, ``MARSHAL_HEARTBEAT_INTERVAL``
  or the ``--config`` file), else the one interval every recorded group shares, else 10 s
  (`AuditConfig.heartbeat_interval_ms`).
- A given interval that differs from one recorded for a reported group is refused
  (`given_problem`), as marshal-admin refuses it: it would judge the group by other rules
  than its members'.

The fold runs once per distinct interval (`intervals`) and each record takes the verdict of
the world with its group's interval (`fold.py`); a fleet whose groups share one interval
folds once, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from marshal_workers.audit.placed import Placed, place
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.metadata import GroupSettings
from marshal_workers.protocol.rationalizer import RationalizerConfig, World, fold
from marshal_workers.protocol.wire import CoordRecord

DEFAULT_MS = 10_000


@dataclass(frozen=True, slots=True)
class Heartbeats:
    """The heartbeat interval of every group the log records settings for."""

    default_ms: int = DEFAULT_MS
    first_ms: Mapping[str, int] = field(default_factory=dict)  # a group's first recorded
    newest_ms: Mapping[str, int] = field(default_factory=dict)  # and its newest
    recorded_ms: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # every one

    def intervals(self) -> tuple[int, ...]:
        """Every interval some record may be judged with, the default first."""
        rest = sorted({ms for values in self.recorded_ms.values() for ms in values})
        return (self.default_ms, *(ms for ms in rest if ms != self.default_ms))

    def of_group(self, group: str) -> int:
        """The group's newest interval (what judges its claims at the end of the log)."""
        return self.newest_ms.get(group, self.default_ms)

    def at(self, group: str | None, in_force: Mapping[str, GroupSettings]) -> int:
        """The interval a record of ``group`` is judged with, ``in_force`` being the settings
        folded so far on its coordination partition."""
        if group is None:
            return self.default_ms
        now = in_force.get(group)
        if now is not None:
            return now.heartbeat_interval_ms
        return self.first_ms.get(group, self.default_ms)


def settings_records(
    placed: Iterable[Placed], admin_client_ids: frozenset[str] | None = None
) -> list[tuple[CoordRecord, GroupSettings]]:
    """The group settings records among ``placed`` (records annotated with their partition's
    log time, `placed.annotate`) that the fold accepts, in log order.

    A placed group's first settings on a partition win there: a differing record after them
    (a racing creator's that lost, a hostile writer's) is refused by every member's fold
    unless its writer's pause of the group is in force at the partition's log time, and, its
    key kept by compaction for good, would otherwise decide the group's interval. So each
    partition's group records (settings and pauses: `admin_client_ids` decides which pauses
    count) are folded in offset order, each at its partition's log time, as each claim's fold
    takes them (`claimfold`), and the settings it records are kept. (Folded at their own
    stamps, a settings record stamped before a pause's end that the log time had passed was
    accepted here and refused by the fold.)"""
    by_partition: dict[int, list[Placed]] = {}
    for p in placed:
        value = p.record.value
        if value is not None and value.startswith((b"GroupSettings/", b"ReleaseGroup/")):
            by_partition.setdefault(p.record.partition, []).append(p)
    config = RationalizerConfig(DEFAULT_MS, admin_client_ids=admin_client_ids)
    found = []
    for partition, ps in by_partition.items():
        world = World(config, partition)
        for p in sorted(ps, key=lambda p: p.record.offset):  # (stable: copies keep their order)
            place(world, p)
            event = fold(world, p.record)
            if isinstance(event, ev.GroupSettingsRecorded):
                found.append((p.record, event.settings))
    found.sort(key=lambda f: (f[0].timestamp_ms, f[0].partition, f[0].offset))
    return found


def from_records(
    placed: Iterable[Placed],
    given_ms: int | None,
    fallback_ms: int = DEFAULT_MS,
    admin_client_ids: frozenset[str] | None = None,
) -> Heartbeats:
    """Each group's intervals from its settings records the fold accepts (`settings_records`,
    pauses judged with ``admin_client_ids``); ``given_ms``: the interval given on the command
    line (or environment, or config file), None if none was; ``fallback_ms``: the default when
    none was given and the recorded groups do not share one interval."""
    first: dict[str, int] = {}
    newest: dict[str, int] = {}
    recorded: dict[str, list[int]] = {}
    for _, s in settings_records(placed, admin_client_ids):
        first.setdefault(s.group_id, s.heartbeat_interval_ms)
        newest[s.group_id] = s.heartbeat_interval_ms
        seen = recorded.setdefault(s.group_id, [])
        if s.heartbeat_interval_ms not in seen:
            seen.append(s.heartbeat_interval_ms)
    shared = {ms for values in recorded.values() for ms in values}
    if given_ms is not None:
        default = given_ms
    elif len(shared) == 1:
        default = shared.pop()
    else:
        default = fallback_ms
    return Heartbeats(default, first, newest, {g: tuple(v) for g, v in recorded.items()})


def given_problem(
    heartbeats: Heartbeats, given_ms: int, source: str, group: str | None
) -> str | None:
    """Why an interval given by ``source`` may not judge the reported groups (``group``, or
    every group), or None."""
    for name, values in sorted(heartbeats.recorded_ms.items()):
        if group is not None and name != group:
            continue
        other = [ms for ms in values if ms != given_ms]
        if other:
            recorded = " then ".join(f"{ms / 1000:g}s" for ms in values)
            return (
                f"{source} is {given_ms / 1000:g}s but group {name}'s settings in the "
                f"coordination log record {recorded}: its members judge claims with that; "
                f"leave {source} out to audit every group with its recorded interval"
            )
    return None
