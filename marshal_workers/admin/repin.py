"""`marshal-admin repin-partition-count`: the way back from a forged pinned partition count.

The coordination topic's partition count is pinned by a CoordinationTopic record on partition
0 (`metadata`). A record with another count, written by anyone who may write the topic, makes
every new member exit 4 and `init` refuse, although the topic never changed: only a new
record with the right count brings the fleet back. This command writes it, for the count the
broker's metadata shows, once the log's claims say that re-pinning moves none of them
(`pinning`): if the claims of any group are coordinated for the recorded count and not for the
broker's, the topic really gained (or lost) partitions, and the command refuses (move the
fleet to a new topic instead: docs/operating.md). It says what it found and what it wrote; it
folds the log to its own record and checks the fold took it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace

import click

from marshal_workers.admin.connection import Connection
from marshal_workers.admin.options import connection, read_timeout_option
from marshal_workers.common.errors import MarshalError
from marshal_workers.config.toolconfig import FleetSettings, fleet_options
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.interface import LogError
from marshal_workers.log.kafkalog import KafkaLog
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.groupstatus import iso_ms
from marshal_workers.protocol.metadata import (
    METADATA_PARTITION,
    TOPIC_RECORD_KEY,
    TopicRecord,
    encode_metadata,
)
from marshal_workers.protocol.pinning import PinEvidence, pin_evidence

REPIN_CLIENT_ID = "marshal-admin-repin"
SHOWN_GROUPS = 5


def _groups(names: tuple[str, ...]) -> str:
    more = f" and {len(names) - SHOWN_GROUPS} more" if len(names) > SHOWN_GROUPS else ""
    return ", ".join(names[:SHOWN_GROUPS]) + more


def describe(evidence: PinEvidence) -> str:
    """What the claims say, as one line."""
    parts = [f"the claims of {len(evidence.agree)} group(s) fit {evidence.actual} partitions"]
    if evidence.agree:
        parts[0] += f" ({_groups(evidence.agree)})"
    if evidence.recorded_only:
        parts.append(
            f"{len(evidence.recorded_only)} fit only the recorded {evidence.recorded} "
            f"({_groups(evidence.recorded_only)})"
        )
    if evidence.neither:
        parts.append(
            f"{len(evidence.neither)} fit neither count and are no evidence (a hostile "
            f"writer's, or another partitioner's: {_groups(evidence.neither)})"
        )
    return "; ".join(parts)


def run_repin(
    conn: Connection, *, dry_run: bool, timeout_s: float, out: Callable[[str], None]
) -> None:
    """Check, then (unless ``dry_run``) re-pin the count the broker shows; MarshalError (exit
    1) if there is no record, or the claims say the topic changed, or the write fails."""
    topic = conn.coordination_topic
    log = KafkaLog(conn.bootstrap_servers, topic, REPIN_CLIENT_ID, extra_config=conn.kafka)
    try:
        actual = log.num_partitions
        # folded without the home check (num_partitions None): misplaced claims must show
        reader = FoldedLog(log, replace(conn.rationalizer_config(actual), num_partitions=None))
        reader.catch_up(timeout_s)
        record = reader.worlds[METADATA_PARTITION].topic_record
        if record is None:
            raise MarshalError(
                f"{topic} has no pinned partition count: `marshal-admin init` records it"
            )
        out(
            f"{topic} on {conn.bootstrap_servers}: the broker's metadata shows {actual} "
            f"partition(s); the pinned count is {record.partitions} (written by client "
            f"{record.client_id}, instance {record.instance_id}, clock "
            f"{iso_ms(record.unix_sec * 1000)})"
        )
        if record.partitions == actual:
            out("nothing to do: the pinned count is the broker's")
            return
        evidence = pin_evidence(reader.worlds, record.partitions, actual, conn.partitioner)
        out(describe(evidence))
        if not evidence.safe:
            raise MarshalError(
                f"refusing to re-pin {topic} at {actual}: the claims of "
                f"{_groups(evidence.recorded_only)} are coordinated for the recorded "
                f"{record.partitions} partitions, not {actual}, so the topic's count really "
                "changed and re-pinning would move them; move the fleet to a new coordination "
                "topic (docs/operating.md, 'Changing the coordination topic')"
            )
        if dry_run:
            out(f"would re-pin {topic} at {actual} partitions (--dry-run: nothing written)")
            return
        _write(log, reader, actual, record.placed, timeout_s)
        out(
            f"re-pinned {topic} at {actual} partitions: members refused with exit 4 may be "
            "started again"
        )
    except LogError as exc:
        raise MarshalError(str(exc)) from None
    finally:
        log.close()


def _write(log: KafkaLog, reader: FoldedLog, count: int, placed: bool, timeout_s: float) -> None:
    """Append the CoordinationTopic record (of the version the old one had) and fold to it;
    MarshalError unless the fold took it."""
    instance = f"repin-{uuid.uuid4().hex[:12]}"
    pin = TopicRecord(int(time.time()), instance, REPIN_CLIENT_ID, count, placed=placed)
    appended = log.append(METADATA_PARTITION, TOPIC_RECORD_KEY, encode_metadata(pin), timeout_s)
    verdict, _ = reader.wait_for(appended, timeout_s)
    if not (isinstance(verdict, ev.TopicRecorded) and verdict.record == pin):
        raise MarshalError(f"the log did not take the new pin: {verdict}")


@click.command("repin-partition-count")
@fleet_options
@click.option("--dry-run", is_flag=True, help="Check and say what would be written; write nothing.")
@read_timeout_option
def repin_partition_count(*, fleet: FleetSettings, dry_run: bool, timeout: float) -> None:
    """Re-pin the coordination topic's partition count at the count the broker shows, after a
    forged (or mistaken) CoordinationTopic record made members exit 4 and init refuse.

    Refused (exit 1) when the log's claims are coordinated for the recorded count and not the
    broker's: then the topic really changed, and the fleet must move to a new topic
    (docs/operating.md, 'Changing the coordination topic')."""
    run_repin(connection(fleet), dry_run=dry_run, timeout_s=timeout, out=click.echo)
