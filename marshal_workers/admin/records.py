"""`marshal-admin skip-record` and `retry-record`: an operator's decision on a poison record.

A record whose handler keeps failing is counted in the coordination log and, after
``poison_park_after`` failures, parked: the partition's holder runs no child for it (see
`marshal_workers.protocol.recordfailures`; `marshal-admin status` shows it). These commands write a
PoisonResolved as an admin client (``--client-id``, one of the fleet's ``admin_client_ids``):
``skip-record`` makes the holder move its position past the record (it is never handled),
``retry-record`` sets its count to 0 so the fleet tries it again. The command folds the log to
its own record and prints the verdict: exit 0 if taken, 1 if refused (not an admin, or that
offset is not the partition's failing record).
"""

from __future__ import annotations

import click

from marshal_workers.admin.connection import Connection, group_session
from marshal_workers.admin.options import (
    checked,
    client_id_option,
    connection,
    group_of,
    group_option,
    wait_option,
)
from marshal_workers.admin.session import AdminError, AdminSession
from marshal_workers.common.errors import MarshalError
from marshal_workers.config.toolconfig import FleetSettings, fleet_options
from marshal_workers.log.interface import LogError
from marshal_workers.protocol import recordfailures as poison
from marshal_workers.protocol.slicing import split_topic
from marshal_workers.protocol.wire import ClaimKey


def claim_of_record(session: AdminSession, key: ClaimKey, offset: int) -> ClaimKey:
    """The claim a failing record belongs to: ``key`` itself, or, for a group whose ordering
    cuts partitions into slices (`slicing`), the slice of ``key``'s partition whose failing
    record is at ``offset`` (the operator names the data topic, as a ledger or a dead letter
    does; giving the slice's claim name, ``orders+key.2of4``, works too)."""
    if split_topic(key.topic)[1] is not None:
        return key
    for world in session.worlds.values():
        settings = world.group_settings.get(key.group)
        if settings is None or settings.slicing is None or not settings.slicing.sliced:
            continue
        for name in settings.slicing.claim_topics(key.topic):
            part = ClaimKey(key.group, name, key.partition)
            found = session.worlds[session.partition_of(part)].poison.get(part)
            if found is not None and found.offset == offset:
                return part
    return key


def refusal(session: AdminSession, key: ClaimKey, offset: int) -> str | None:
    """Why the log would refuse this session's decision on ``key``'s record at ``offset``, by
    its fold: then nothing is written, and the operator reads why at once (a decision whose
    fold changes between this check and the write is refused by the log instead, harmlessly:
    decisions have a key of their own, so a refused one never stands for the claim's count
    once the cleaner has run). The offset is checked only on a fold of the whole log: after
    the cleaner this fold's count may not be the one a member that read everything holds (a
    parked holder must not be left without its decision), and the decision is written."""
    world = session.worlds[session.partition_of(key)]
    refused = poison.admin_refusal(session.client_id, world.config.admin_client_ids)
    if refused is not None or world.gap_seen:
        return refused
    return poison.offset_refusal(world.poison.get(key), offset)


def resolve(session: AdminSession, key: ClaimKey, offset: int, action: poison.Action) -> str:
    """Write the operator's ``action`` on ``key``'s record at ``offset``; the verdict as a line
    (MarshalError with exit code 1 if the fold or the log refused it)."""
    where = f"{key.topic}/{key.partition} offset {offset}"
    refused = refusal(session, key, offset)
    if refused is not None:
        raise MarshalError(f"{where}: refused: {refused}", 1)
    before = session.worlds[session.partition_of(key)].poison.get(key)  # the count it clears
    msg = poison.PoisonResolved(
        int(session.wall()),
        session.instance_id,
        session.client_id,
        key.group,
        key.topic,
        key.partition,
        offset,
        action,
    )
    try:
        appended = session.log.append(
            session.partition_of(key),
            poison.poison_record_key(msg),
            poison.encode_poison(msg),
            session.write_timeout_s,
        )
        verdict, _ = session.reader.wait_for(appended, session.fold_timeout_s)
    except LogError as exc:
        raise AdminError(f"PoisonResolved: {exc}") from None
    if isinstance(verdict, poison.PoisonCleared):
        what = "skipped: the holder moves past it" if action is poison.Action.SKIP else "retried"
        counted = before.failures if before is not None and before.offset == offset else 0
        return f"{where}: {what} (after {counted} failures)"
    reason = getattr(verdict, "reason", type(verdict).__name__)
    raise MarshalError(f"{where}: refused: {reason}", 1)


def run_resolve(
    conn: Connection,
    key: ClaimKey,
    offset: int,
    action: poison.Action,
    *,
    client_id: str,
    timeout_s: float,
) -> str:
    """Catch up with the log as ``client_id``, then `resolve`."""
    with group_session(conn, key.group, client_id, timeout_s) as (session, _):
        return resolve(session, claim_of_record(session, key, offset), offset, action)


def resolve_command(name: str, action: poison.Action, doc: str) -> click.Command:
    @click.command(name, help=doc)
    @fleet_options
    @group_option()
    @click.option(
        "--topic",
        required=True,
        help="The data topic (with --ordering key or unordered, the command finds the slice "
        "whose failing record is at --offset).",
    )
    @click.option(
        "--partition",
        type=click.IntRange(min=0),
        required=True,
        help="The data topic's partition the failing record is in (as marshal-admin status "
        "shows it).",
    )
    @click.option(
        "--offset",
        type=click.IntRange(min=0),
        required=True,
        help="The failing record's offset (as marshal-admin status shows it).",
    )
    @client_id_option
    @wait_option("Seconds allowed to read the coordination log.")
    def command(
        *,
        fleet: FleetSettings,
        group: str | None,
        topic: str,
        partition: int,
        offset: int,
        client_id: str,
        timeout: float,
    ) -> None:
        key = ClaimKey(
            checked("--group", group_of(group, fleet)), checked("--topic", topic), partition
        )
        click.echo(
            run_resolve(
                connection(fleet),
                key,
                offset,
                action,
                client_id=checked("--client-id", client_id),
                timeout_s=timeout,
            )
        )

    return command


skip_record = resolve_command(
    "skip-record",
    poison.Action.SKIP,
    "Skip a poison record: the partition's holder moves its position past it (it is never "
    "handled) and goes on. Exit 1 if refused.",
)
retry_record = resolve_command(
    "retry-record",
    poison.Action.RETRY,
    "Retry a parked poison record: its failure count goes back to 0 and the partition's "
    "holder starts its child again. Exit 1 if refused.",
)
