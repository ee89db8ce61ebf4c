"""`marshal-admin dump`: the decoded coordination log with the verdict on every record.

It reads the whole log from the beginning (with `--group`, the partitions the group's records
live on: a placed group's home and window) and folds it with the same rationalizer the
supervisors use, so it shows what every worker sees (`--go-topic`: a Go fleet's log, `goread`).
The whole log is folded with the command's settings, then again with each other set of
settings groups record (their heartbeat interval above all), each such group's records shown
with that fold's verdicts, as its members fold them (`regrouped_verdicts`: with one interval
for every group, a rival's claim on a holder stale by the group's 1 s read as rejected by
10 s).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

import click

from marshal_workers.admin.connection import (
    ADMIN_CLIENT_ID,
    MAX_REFOLDS,
    Connection,
    group_session,
    newest_settings,
    read_group_records,
    read_records,
    refolds,
    some_of,
    unknown_group,
)
from marshal_workers.admin.goread import go_dump
from marshal_workers.admin.options import (
    connection,
    go_hb_option,
    go_topic_option,
    read_timeout_option,
)
from marshal_workers.common.errors import MarshalError
from marshal_workers.config.toolconfig import FleetSettings, fleet_options
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.groupstatus import group_known, iso_ms
from marshal_workers.protocol.metadata import GroupSettings
from marshal_workers.protocol.placement import Placement
from marshal_workers.protocol.wire import CoordRecord


@click.command()
@fleet_options
@click.option(
    "--group",
    default=None,
    help="Only this group's records (its claims, members, pauses, settings, poison records), "
    "folded with its settings as recorded in the log; only the coordination partitions they "
    "live on are read.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@read_timeout_option
@go_topic_option
@go_hb_option
def dump(
    *,
    fleet: FleetSettings,
    group: str | None,
    as_json: bool,
    timeout: float,
    go_topic: str | None,
    go_hb_s: int,
) -> None:
    """Print the decoded coordination log with the verdict on every record.

    One line per record: PARTITION:OFFSET LOG-TIME KEY MESSAGE -> VERDICT[: REASON]; with
    --json, one object per line with partition, offset, log_time, log_time_ms, key, message,
    verdict and reason. Records come in offset order per coordination partition.
    """
    if go_topic is not None:
        if group is not None:
            raise click.UsageError("--group does not go with --go-topic")
        for line in go_dump(
            fleet.bootstrap_servers, go_topic, go_hb_s, as_json, timeout, fleet.kafka
        ):
            click.echo(line)
        return
    for line in run_dump(connection(fleet), as_json, timeout, group=group):
        click.echo(line)


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def verdict_name(event: ev.Event) -> str:
    """The verdict as the dump names it: the event's type, but a ReleaseGroup whose expire
    time has passed at its own log time (``release-group --for 0``) lifted the pause, so it is
    ``PauseLifted``, not ``GroupPaused``."""
    if isinstance(event, ev.GroupPaused) and event.until_ms <= event.log_time:
        return "PauseLifted"
    return type(event).__name__


def home_now(record: CoordRecord, event: ev.Event, placement: Placement | None) -> int | None:
    """For a placed group's dump: the coordination partition a claim's record belongs on by
    the group's placement now, if the fold judged it (not Malformed) on another: a record left
    over from before the group moved (until the cleaner), which its members no longer take
    the claim from (after the move's settings a record there is malformed). None otherwise."""
    if placement is None or not isinstance(event, ev.ClaimVerdict):
        return None
    at = placement.partition_of(event.key.topic, event.key.partition)
    return None if at == record.partition else at


def left_over_note(at: int) -> str:
    """What a dump says of a record left over from before the group's move (`home_now`)."""
    return f"left over from before the group's move: the claim's home is partition {at} now"


def dump_entry(
    record: CoordRecord, event: ev.Event, moved_to: int | None = None
) -> dict[str, object]:
    """One record and its verdict as a JSON object; ``moved_to``: the claim's home now, for a
    record left over from before the group's move (`home_now`), said in ``note``."""
    reason = getattr(event, "reason", None)
    note = {} if moved_to is None else {"note": left_over_note(moved_to)}
    return {
        "partition": record.partition,
        "offset": record.offset,
        "log_time": iso_ms(record.timestamp_ms),
        "log_time_ms": record.timestamp_ms,
        "key": _text(record.key),
        "message": _text(record.value),
        "verdict": verdict_name(event),
        "reason": reason if isinstance(reason, str) else None,
        **note,
    }


def dump_line(record: CoordRecord, event: ev.Event, moved_to: int | None = None) -> str:
    """One record and its verdict as a line of text (``moved_to``: as in `dump_entry`)."""
    entry = dump_entry(record, event, moved_to)
    verdict = str(entry["verdict"])
    if entry["reason"] is not None:
        verdict += f": {entry['reason']}"
    if moved_to is not None:
        verdict += f" ({entry['note']})"
    return (
        f"{record.partition}:{record.offset}  {entry['log_time']}  {entry['key']}  "
        f"{entry['message']!s}  -> {verdict}"
    )


def run_dump(
    conn: Connection, as_json: bool, timeout_s: float, group: str | None = None
) -> Iterator[str]:
    """The decoded log with verdicts, one line per record (JSON objects with ``as_json``);
    with ``group`` only its records, folded with its recorded settings (`for_group`)."""
    records: Iterable[tuple[CoordRecord, ev.Event]]
    placement = None
    if group is None:
        records = regrouped_verdicts(conn, list(read_records(conn, timeout_s)), timeout_s)
    else:
        with group_session(conn, group, ADMIN_CLIENT_ID, timeout_s) as (session, adopted):
            placement = session.placement  # (and the settings its records are folded with)
            if not group_known(session.worlds, group):  # a typo: not an empty dump, exit 0
                raise MarshalError(unknown_group(conn, group))
        records = read_group_records(adopted, group, timeout_s)
    for record, event in records:
        if group is not None and group_of_record(record, event) != group:
            continue
        moved_to = home_now(record, event, placement)
        if as_json:
            yield json.dumps(dump_entry(record, event, moved_to))
        else:
            yield dump_line(record, event, moved_to)


def regrouped_verdicts(
    conn: Connection, records: list[tuple[CoordRecord, ev.Event]], timeout_s: float
) -> list[tuple[CoordRecord, ev.Event]]:
    """``records`` (the whole log folded with ``conn``), each record of a group whose recorded
    fold settings differ from ``conn``'s given the verdict of a fold with its settings (one
    more read of the log per distinct set of settings: `connection.refolds`). A group's
    settings are as `recorded_settings` takes them (`connection.newest_settings`)."""
    newest: dict[str, dict[int, GroupSettings]] = {}
    for record, event in records:  # (in order per partition: the last one wins)
        if isinstance(event, ev.GroupSettingsRecorded):
            newest.setdefault(event.settings.group_id, {})[record.partition] = event.settings
    recorded = {g: found for g, parts in newest.items() if (found := newest_settings(g, parts))}
    verdicts: dict[tuple[int, int], ev.Event] = {}
    sets, left = refolds(conn, recorded)
    if left:
        _note(left, f"more than {MAX_REFOLDS} sets of settings recorded")
    for adopted, names in sets:
        theirs: dict[tuple[int, int], ev.Event] = {}  # all of a refold, or none of it
        try:
            for record, event in read_records(adopted, timeout_s):
                if group_of_record(record, event) in names:
                    theirs[(record.partition, record.offset)] = event
            verdicts.update(theirs)
        except MarshalError as exc:  # their verdicts are the first fold's, and said so
            _note(names, str(exc))
    if not verdicts:
        return records
    return [(r, verdicts.get((r.partition, r.offset), e)) for r, e in records]


def _note(groups: list[str], why: str) -> None:
    """On stderr: ``groups``' records carry the first fold's verdicts, and why."""
    click.echo(
        f"marshal-admin: note: groups {some_of(groups)} judged with the command's settings: {why}",
        err=True,
    )


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
