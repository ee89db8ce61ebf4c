"""What `marshal-admin init`, `status` and `dump` do, with plain arguments (no click here).

`status` and `dump` read the whole coordination log from the beginning and fold it with the
same rationalizer the supervisors use, so they show what every worker sees. `open_log` and
`admin_session` open the log that way for every command. A command that only reads opens it
read-only (`open_log`'s default): no producer, so a principal with only Read and Describe on
the topic can run it; `admin_session` opens a writer unless told it only reads.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from marshal_workers.admin.session import AdminSession
from marshal_workers.common.errors import ConfigError, MarshalError
from marshal_workers.config.runconfig import DEFAULT_ADMIN_CLIENT_IDS
from marshal_workers.fleet.brokercheck import cluster_heartbeat_check
from marshal_workers.fleet.groupcheck import group_settings_problem
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.interface import LogError
from marshal_workers.log.kafkalog import KafkaLog
from marshal_workers.log.topicadmin import admin_client, ensure_coordination_topic
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.groupstatus import iso_ms
from marshal_workers.protocol.metadata import GroupSettings
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


def run_init(
    conn: Connection,
    *,
    partitions: int,
    replication_factor: int | None,
    partitions_requested: bool,
    out: Callable[[str], None],
    warn: Callable[[str], None],
) -> None:
    """Create the coordination topic or check the existing one; MarshalError if unusable."""
    result = ensure_coordination_topic(
        conn.bootstrap_servers,
        conn.coordination_topic,
        partitions,
        replication_factor,
        partitions_requested=partitions_requested,
        extra_config=conn.kafka,
    )
    info = result.topic
    verb = "created" if result.created else "found"
    out(
        f"{verb} coordination topic {info.name} on {conn.bootstrap_servers}: "
        f"{info.partitions} partition(s), replication factor {info.replication_factor}, "
        f"message.timestamp.type={info.config.get('message.timestamp.type')}"
    )
    if result.recorded_partitions is not None:
        how = "recorded now" if result.newly_recorded else "as recorded at init"
        out(
            f"partition count pinned at {result.recorded_partitions} ({how}): never change it; "
            "see docs/operating.md to move a fleet to a new coordination topic"
        )
    for diff in result.differences:
        if not diff.fatal:
            warn(str(diff))
    said = cluster_heartbeat_check(
        admin_client(conn.bootstrap_servers, conn.kafka), conn.heartbeat_interval_ms / 1000
    )
    if said is not None:
        warn(f"warning: {said[1]}")
    fatal = [d for d in result.differences if d.fatal]
    if fatal:
        more = f" (and {len(fatal) - 1} more)" if len(fatal) > 1 else ""
        raise MarshalError(f"{fatal[0]}{more}")


def open_log(
    conn: Connection,
    client_id: str = ADMIN_CLIENT_ID,
    *,
    read_only: bool = True,
    group: str | None = None,
) -> tuple[KafkaLog, FoldedLog]:
    """The coordination log as ``client_id`` (read-only unless told otherwise: no producer),
    and a reader folding it as the workers do (the caller closes the log); with ``group``, as a
    member of it does: other groups' records are counted, never kept (`rationalizer`, "One
    group's view")."""
    log = KafkaLog(
        conn.bootstrap_servers,
        conn.coordination_topic,
        client_id=client_id,
        extra_config=conn.kafka,
        read_only=read_only,
    )
    try:
        config = replace(conn.rationalizer_config(log.num_partitions), only_group=group)
        return log, FoldedLog(log, config)
    except BaseException:
        log.close()
        raise


@contextmanager
def admin_session(
    conn: Connection, client_id: str, timeout_s: float, *, read_only: bool = False
) -> Iterator[AdminSession]:
    """An `AdminSession` writing as ``client_id`` (or ``read_only``: one that writes nothing),
    caught up with the whole log (AdminError if that takes longer than ``timeout_s``); the log
    is closed after the block."""
    log, reader = open_log(conn, client_id, read_only=read_only)
    try:
        session = AdminSession(log, reader, client_id)
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
    log, reader = open_log(conn)
    try:
        yield from _read_to_end(conn, log, reader, timeout_s)
    finally:
        log.close()


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def verdict_name(event: ev.Event) -> str:
    """The verdict as the dump names it: the event's type, but a ReleaseGroup whose expire
    time has passed at its own log time (``release-group --for 0``) lifted the pause, so it is
    ``PauseLifted``, not ``GroupPaused``."""
    if isinstance(event, ev.GroupPaused) and event.until_ms <= event.log_time:
        return "PauseLifted"
    return type(event).__name__


def dump_entry(record: CoordRecord, event: ev.Event) -> dict[str, object]:
    """One record and its verdict as a JSON object."""
    reason = getattr(event, "reason", None)
    return {
        "partition": record.partition,
        "offset": record.offset,
        "log_time": iso_ms(record.timestamp_ms),
        "log_time_ms": record.timestamp_ms,
        "key": _text(record.key),
        "message": _text(record.value),
        "verdict": verdict_name(event),
        "reason": reason if isinstance(reason, str) else None,
    }


def dump_line(record: CoordRecord, event: ev.Event) -> str:
    """One record and its verdict as a line of text."""
    entry = dump_entry(record, event)
    verdict = str(entry["verdict"])
    if entry["reason"] is not None:
        verdict += f": {entry['reason']}"
    return (
        f"{record.partition}:{record.offset}  {entry['log_time']}  {entry['key']}  "
        f"{entry['message']!s}  -> {verdict}"
    )


def run_dump(
    conn: Connection, as_json: bool, timeout_s: float, group: str | None = None
) -> Iterator[str]:
    """The decoded log with verdicts, one line per record (JSON objects with ``as_json``);
    with ``group`` only its records, folded with its recorded settings (`for_group`)."""
    if group is not None:
        with group_session(conn, group, ADMIN_CLIENT_ID, timeout_s) as (_, adopted):
            conn = adopted
    for record, event in read_records(conn, timeout_s):
        if group is not None and group_of_record(record, event) != group:
            continue
        if as_json:
            yield json.dumps(dump_entry(record, event))
        else:
            yield dump_line(record, event)


def group_of_record(record: CoordRecord, event: ev.Event) -> str | None:
    """The group a coordination record is about: its message's (a claim, a pause, a poison
    record), its settings' or, for a record nobody could read, its key's first field."""
    message = getattr(event, "message", None)
    group = getattr(message, "group_id", None)
    if isinstance(group, str):
        return group
    if isinstance(event, ev.GroupSettingsRecorded):
        return event.settings.group_id
    if isinstance(event, ev.Malformed) and event.keyless_group is not None:
        return event.keyless_group
    key = _text(record.key)
    return None if key is None else key.split("/", 1)[0]


def admin_settings(conn: Connection, group: str, client_id: str = "marshal-admin") -> GroupSettings:
    """The settings this admin command folds with, as a GroupSettings record."""
    return GroupSettings(
        0, "admin", client_id, group, conn.heartbeat_interval_ms, conn.partitioner,
        conn.admin_client_ids, None,  # (an admin acts on a group whatever its ordering)
    )  # fmt: skip


def check_group_settings(conn: Connection, worlds: Mapping[int, World], group: str) -> None:
    """Refuse (exit 2, one line) an admin command whose settings differ from the group's."""
    problem = group_settings_problem(worlds, admin_settings(conn, group))
    if problem is not None:
        raise ConfigError(
            f"{problem}; or leave the setting out: marshal-admin reads the group's from the log"
        )


def recorded_settings(worlds: Mapping[int, World], group: str) -> GroupSettings | None:
    """The group's settings as the log records them (partition 0's, else any), or None."""
    for _, world in sorted(worlds.items()):
        if group in world.group_settings:
            return world.group_settings[group]
    return None


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


@contextmanager
def group_session(
    conn: Connection, group: str, client_id: str, timeout_s: float
) -> Iterator[tuple[AdminSession, Connection]]:
    """An `admin_session` folded with ``group``'s settings (`for_group`), and the connection
    with them. The log is read with ``conn`` first; only if the group's recorded settings
    differ from it is it read again with theirs."""
    with admin_session(conn, client_id, timeout_s) as session:
        adopted = for_group(conn, session.worlds, group)
        if not fold_settings_differ(conn, adopted):
            yield session, adopted
            return
    with admin_session(adopted, client_id, timeout_s) as session:
        yield session, for_group(adopted, session.worlds, group)
