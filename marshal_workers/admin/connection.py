"""The coordination log as every admin command opens it: where it is, how to fold it, and the
sessions that read it to its end (no click here).

`status` and `dump` read the coordination log from the beginning and fold it with the same
rationalizer the supervisors use, so they show what every worker sees. `open_log` and
`admin_session` open the log that way for every command. A command about one group first
locates it (`locate_group`: its settings on its home partition): a placed group's partitions
(home and window) are all it reads; a spread group, or one without settings, is read on every
partition. A command that only reads opens the log read-only (`open_log`'s default): no
producer, so a principal with only Read and Describe on the topic can run it; `admin_session`
opens a writer unless told it only reads.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from marshal_workers.admin.session import AdminSession
from marshal_workers.common.errors import EXIT_COORDINATION_CHANGED, ConfigError, MarshalError
from marshal_workers.config.runconfig import DEFAULT_ADMIN_CLIENT_IDS
from marshal_workers.fleet.groupcheck import group_settings_problem
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.interface import LogError
from marshal_workers.log.kafkalog import OPEN_TIMEOUT_S, KafkaLog
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.metadata import GroupSettings
from marshal_workers.protocol.placement import Placement, PlacementBook, home, reads
from marshal_workers.protocol.rationalizer import RationalizerConfig, World
from marshal_workers.protocol.wire import CoordRecord, Partitioner

ADMIN_CLIENT_ID = "marshal-admin"
# The settings a fold depends on, which every member and admin of a group must share.
FOLD_SETTINGS = frozenset({"heartbeat_interval", "partitioner", "admin_client_ids"})


@dataclass(frozen=True, slots=True)
class Connection:
    """Where the coordination log is and how to fold it (the options every command shares)."""

    bootstrap_servers: str
    coordination_topic: str = "__marshal"
    heartbeat_interval_ms: int = 10_000
    partitioner: Partitioner = Partitioner.SPEC
    admin_client_ids: frozenset[str] | None = frozenset(DEFAULT_ADMIN_CLIENT_IDS)
    kafka: Mapping[str, str] = field(default_factory=dict)  # the fleet's [kafka] table
    # Which of FOLD_SETTINGS were given (flag, MARSHAL_* or --config file); the others follow
    # the group's settings recorded in the log (`for_group`). Built in code: all given.
    given: frozenset[str] = FOLD_SETTINGS

    def rationalizer_config(self, num_partitions: int) -> RationalizerConfig:
        """How to fold the log: what the workers use (their admin list included)."""
        return RationalizerConfig(
            self.heartbeat_interval_ms,
            num_partitions=num_partitions,
            partitioner=self.partitioner,
            admin_client_ids=self.admin_client_ids,
        )


def reach_timeout(timeout_s: float) -> float:
    """How long a command waits for the cluster to answer: its ``--timeout``, at most
    OPEN_TIMEOUT_S (a shorter one is the operator's to ask for)."""
    return min(OPEN_TIMEOUT_S, timeout_s)


def open_log(
    conn: Connection,
    client_id: str = ADMIN_CLIENT_ID,
    *,
    read_only: bool = True,
    group: str | None = None,
    timeout_s: float = OPEN_TIMEOUT_S,
) -> tuple[KafkaLog, FoldedLog]:
    """The coordination log as ``client_id`` (read-only unless told otherwise: no producer),
    and a reader folding it as the workers do (the caller closes the log); with ``group``, as a
    member of it does: other groups' records are counted, never kept (`rationalizer`, "One
    group's view"). Reaching the cluster takes at most `reach_timeout` of ``timeout_s``."""
    log = KafkaLog(
        conn.bootstrap_servers,
        conn.coordination_topic,
        client_id=client_id,
        extra_config=conn.kafka,
        read_only=read_only,
        open_timeout_s=reach_timeout(timeout_s),
    )
    try:
        config = replace(conn.rationalizer_config(log.num_partitions), only_group=group)
        return log, FoldedLog(log, config)
    except BaseException:
        log.close()
        raise


def locate_group(
    log: KafkaLog,
    conn: Connection,
    group: str,
    timeout_s: float,
    *,
    home_unreadable_spread: bool = False,
) -> Placement | None:
    """Where ``group`` is coordinated, from its settings on its home partition (the only one
    read): its placement, or None (spread, or no settings there: every partition). The log
    is left following home. MarshalError (exit 4) for a placement made for another count.
    A home that cannot be read is refused (one line), or with ``home_unreadable_spread`` (a
    read-only view: `status`) None: every partition is read, a placed group's window too,
    whose copies of its settings fold it as placed, and what cannot be read is listed."""
    n = log.num_partitions
    at = home(group, n)
    reader = FoldedLog(log, replace(conn.rationalizer_config(n), only_group=group))
    reader.follow([at])
    try:
        reader.catch_up(timeout_s)
    except LogError as exc:
        if home_unreadable_spread:
            return None
        raise MarshalError(f"reading group {group}'s home partition {at}: {exc}") from None
    found = reader.worlds[at].group_settings.get(group)
    placement = None if found is None else found.placement
    if placement is not None and placement.partitions != n:
        raise MarshalError(
            f"coordination topic {conn.coordination_topic} has {n} partitions but group {group} "
            f"was placed for {placement.partitions}: refusing to read it",
            EXIT_COORDINATION_CHANGED,
        )
    return placement


def open_group_log(
    conn: Connection,
    group: str,
    timeout_s: float,
    client_id: str = ADMIN_CLIENT_ID,
    *,
    read_only: bool = True,
    only_group: bool = True,
    home_unreadable_spread: bool = False,
) -> tuple[KafkaLog, FoldedLog, Placement | None]:
    """`open_log`, then `locate_group`: the reader follows a placed group's partitions from
    their first records (knowing its placement), every partition for any other group; and the
    placement. ``only_group``: the fold keeps only the group's state."""
    view = group if only_group else None
    log, reader = open_log(conn, client_id, read_only=read_only, group=view, timeout_s=timeout_s)
    try:
        placement = locate_group(
            log, conn, group, timeout_s, home_unreadable_spread=home_unreadable_spread
        )
        config = reader.config
        wanted: list[int] = list(range(log.num_partitions))
        if placement is not None:
            config = replace(config, placements=PlacementBook.of({group: placement}))
            wanted = sorted(reads(group, placement))
        reader = FoldedLog(log, config)
        reader.follow(wanted, from_start=True)
        return log, reader, placement
    except BaseException:
        log.close()
        raise


@contextmanager
def admin_session(
    conn: Connection,
    client_id: str,
    timeout_s: float,
    *,
    read_only: bool = False,
    group: str | None = None,
) -> Iterator[AdminSession]:
    """An `AdminSession` writing as ``client_id`` (or ``read_only``: one that writes nothing),
    caught up with the whole log, or with ``group``'s partitions (`open_group_log`) (AdminError
    if that takes longer than ``timeout_s``); the log is closed after the block."""
    placement = None
    if group is None:
        log, reader = open_log(conn, client_id, read_only=read_only, timeout_s=timeout_s)
    else:
        log, reader, placement = open_group_log(
            conn, group, timeout_s, client_id, read_only=read_only, only_group=False
        )
    try:
        session = AdminSession(log, reader, client_id, placement=placement)
        session.catch_up(timeout_s)
        yield session
    finally:
        log.close()


def _read_to_end(
    conn: Connection, log: KafkaLog, reader: FoldedLog, timeout_s: float
) -> Iterator[tuple[CoordRecord, ev.Event]]:
    """Fold up to the log's end at the start; yield each record with its verdict.

    Each event is handed on at once, never collected: holding a million of them costs more
    in garbage collection than the fold itself."""
    try:
        deadline = time.monotonic() + timeout_s
        targets = log.end_offsets(timeout_s)
        while not reader.caught_up_to(targets):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise MarshalError(
                    f"could not read {conn.coordination_topic} to its end within {timeout_s:.0f}s"
                )
            records = log.poll(min(remaining, 0.5))
            yield from zip(records, reader.fold_records(records), strict=True)
    except LogError as exc:
        raise MarshalError(str(exc)) from None


def read_records(conn: Connection, timeout_s: float) -> Iterator[tuple[CoordRecord, ev.Event]]:
    """Every record up to the log's end at the start, in order per partition, with its verdict."""
    log, reader = open_log(conn, timeout_s=timeout_s)
    try:
        yield from _read_to_end(conn, log, reader, timeout_s)
    finally:
        log.close()


def read_group_records(
    conn: Connection, group: str, timeout_s: float
) -> Iterator[tuple[CoordRecord, ev.Event]]:
    """`read_records` of the partitions ``group``'s records live on (`open_group_log`: a placed
    group's home and window, every partition for a spread one), folded as a member of it
    folds them; the caller keeps the group's own records."""
    log, reader, _ = open_group_log(conn, group, timeout_s)
    try:
        yield from _read_to_end(conn, log, reader, timeout_s)
    finally:
        log.close()


def admin_settings(conn: Connection, group: str, client_id: str = "marshal-admin") -> GroupSettings:
    """The settings this admin command folds with, as a GroupSettings record."""
    return GroupSettings(
        0, "admin", client_id, group, conn.heartbeat_interval_ms, conn.partitioner,
        conn.admin_client_ids, None,  # (an admin acts on a group whatever its ordering)
    )  # fmt: skip


def check_group_settings(conn: Connection, worlds: Mapping[int, World], group: str) -> None:
    """Refuse (exit 2, one line) an admin command whose settings differ from the group's (its
    placement aside: an admin acts on the group wherever it is coordinated)."""
    found = recorded_settings(worlds, group)
    mine = admin_settings(conn, group)
    if found is not None:
        mine = replace(mine, placement=found.placement)
    problem = group_settings_problem(worlds, mine)
    if problem is not None:
        raise ConfigError(
            f"{problem}; or leave the setting out: marshal-admin reads the group's from the log"
        )


def recorded_settings(worlds: Mapping[int, World], group: str) -> GroupSettings | None:
    """The group's settings as the log records them (partition 0's, else any), or None; a
    placed group's are its home's where home was read: a change after a move from spread is
    written on home and window only, and the copies the move left on every other partition
    keep the old ones (`newest_settings`)."""
    found = {p: w.group_settings[group] for p, w in worlds.items() if group in w.group_settings}
    return newest_settings(group, found)


def newest_settings(group: str, by_partition: Mapping[int, GroupSettings]) -> GroupSettings | None:
    """Of a group's settings as each partition has them, the group's: its home's if the lowest
    partition's are placed and home is among them, else the lowest partition's."""
    if not by_partition:
        return None
    lowest = by_partition[min(by_partition)]
    placement = lowest.placement
    if placement is None:
        return lowest
    return by_partition.get(home(group, placement.partitions), lowest)


def for_group(conn: Connection, worlds: Mapping[int, World], group: str) -> Connection:
    """The connection to fold ``group``'s records with: each fold setting not given (flag,
    environment, --config file) is the one the group's settings record in the log, so an
    admin command judges the group as its members do without being told their settings; a
    given one that differs from the record is refused (ConfigError, exit 2, one line)."""
    found = recorded_settings(worlds, group)
    adopted = conn
    if found is not None:
        given = conn.given
        adopted = replace(
            conn,
            heartbeat_interval_ms=conn.heartbeat_interval_ms
            if "heartbeat_interval" in given
            else found.heartbeat_interval_ms,
            partitioner=conn.partitioner if "partitioner" in given else found.partitioner,
            admin_client_ids=conn.admin_client_ids
            if "admin_client_ids" in given
            else found.admin_client_ids,
        )
    check_group_settings(adopted, worlds, group)
    return adopted


def fold_settings_differ(a: Connection, b: Connection) -> bool:
    """Whether a log folded with ``a`` must be folded again for ``b``."""
    return (a.heartbeat_interval_ms, a.partitioner, a.admin_client_ids) != (
        b.heartbeat_interval_ms,
        b.partitioner,
        b.admin_client_ids,
    )


MAX_REFOLDS = 4  # whole-log views: folds of the log again for groups' own settings, at most


def unknown_group(conn: Connection, group: str) -> str:
    """The line for a group the coordination log has never named (a typo, another fleet's
    topic): every command that takes ``--group`` says it the same way."""
    return (
        f"group {group} is unknown: {conn.coordination_topic} on {conn.bootstrap_servers} has "
        "no record of it"
    )


def some_of(groups: list[str], shown: int = 10) -> str:
    """Up to ``shown`` of ``groups`` by name, and how many more (a note on a thousand)."""
    more = f" and {len(groups) - shown} more" if len(groups) > shown else ""
    return ", ".join(groups[:shown]) + more


def refolds(
    conn: Connection, recorded: Mapping[str, GroupSettings]
) -> tuple[list[tuple[Connection, list[str]]], list[str]]:
    """For a view of every group: each distinct set of fold settings (heartbeat interval,
    partitioner, admin ids) that groups record other than ``conn``'s, with the connection to
    fold the log with for them and those groups, and the groups left to ``conn``'s settings.
    One fold per set, not per group: a fleet of many groups on one interval other than the
    command's is one more read of the log. At most `MAX_REFOLDS` sets, those most groups
    share: settings records are anyone's who may write the topic, and a thousand made-up
    groups each with its own interval were a thousand reads of the whole log."""
    out: dict[tuple[object, ...], tuple[Connection, list[str]]] = {}
    for group, found in sorted(recorded.items()):
        adopted = replace(
            conn,
            heartbeat_interval_ms=found.heartbeat_interval_ms,
            partitioner=found.partitioner,
            admin_client_ids=found.admin_client_ids,
        )
        if fold_settings_differ(conn, adopted):
            fold = (found.heartbeat_interval_ms, found.partitioner, found.admin_client_ids)
            out.setdefault(fold, (adopted, []))[1].append(group)
    ranked = sorted(out.values(), key=lambda s: -len(s[1]))  # (stable: ties as recorded)
    left = sorted(g for _, names in ranked[MAX_REFOLDS:] for g in names)
    return ranked[:MAX_REFOLDS], left


@contextmanager
def group_session(
    conn: Connection, group: str, client_id: str, timeout_s: float
) -> Iterator[tuple[AdminSession, Connection]]:
    """An `admin_session` folded with ``group``'s settings (`for_group`), and the connection
    with them. The log is read with ``conn`` first; only if the group's recorded settings
    differ from it is it read again with theirs."""
    with admin_session(conn, client_id, timeout_s, group=group) as session:
        adopted = for_group(conn, session.worlds, group)
        if not fold_settings_differ(conn, adopted):
            yield session, adopted
            return
    with admin_session(adopted, client_id, timeout_s, group=group) as session:
        yield session, for_group(adopted, session.worlds, group)
