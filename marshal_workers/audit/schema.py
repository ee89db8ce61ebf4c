"""The audit's output tables: their names, columns, types and meanings, in one place.

Every table is a list of (column, type, description); `docs/audit.md`
documents the same columns. Types are ``string``, ``long``, ``double`` and ``boolean``; all
times named ``*_ms`` are log time (the broker's LogAppendTime) in Unix milliseconds, and the
ledger's ``start``/``end`` are the handler host's ``time.time()`` in seconds.

Inside Spark the fold emits every table at once, as *packed* rows (`PACKED_DDL`): the table's
name and one Arrow IPC batch of its rows. Spark keeps those few wide rows, and each table is
unpacked into its own columns only where it is written (`spark_jobs.table`).
"""

from __future__ import annotations

from typing import Final

Column = tuple[str, str, str]  # name, type, description

CLAIM_TOPIC: Final = "claim topic: the data topic, a slice's with its slice (`orders+key.3of8`)"

_CLAIM_COLUMNS: Final[tuple[Column, ...]] = (
    ("group", "string", "consumer group"),
    ("topic", "string", CLAIM_TOPIC + " (membership: the member pseudo-topic)"),
    ("partition", "long", "data partition"),
    ("client_id", "string", "holder's client id"),
    ("instance_id", "string", "holder's instance id"),
    ("token", "long", "fencing token: the coordination offset of the winning claim"),
    ("coord_partition", "long", "coordination partition the claim lives on"),
    ("start_ms", "long", "log time the claim was won (or the instance took over)"),
    ("end_ms", "long", "log time the claim ended; null while still held"),
    ("ended", "string", "released, taken_over, replaced, stale or still_held"),
    ("successor_client_id", "string", "who took over (taken_over, replaced)"),
    ("last_heartbeat_ms", "long", "log time of the last valid heartbeat (the win counts)"),
    ("heartbeats", "long", "valid heartbeats during the interval"),
    ("first_offset", "long", "first committed position heartbeated in the interval"),
    ("last_offset", "long", "last committed position (heartbeat or release)"),
    ("reserved_offset", "long", "last at-most-once reservation end (exclusive)"),
    ("by_admin", "boolean", "held by the client that paused the group (set-position)"),
)

TABLES: Final[dict[str, tuple[Column, ...]]] = {
    "events": (
        ("coord_partition", "long", "coordination partition of the record"),
        ("coord_offset", "long", "offset of the record in its coordination partition"),
        ("log_time_ms", "long", "log time the fold used (LogAppendTime, never decreasing)"),
        ("verdict", "string", "event name: ClaimGranted, HeartbeatRejected, Malformed, ..."),
        ("reason", "string", "why a record was rejected or is malformed"),
        ("message_type", "string", "wire type: Heartbeat, ClaimingPartition, ..."),
        ("group", "string", "consumer group"),
        (
            "topic",
            "string",
            CLAIM_TOPIC
            + ", a member's pseudo-topic (null: ReleaseGroup, Malformed, settings records)",
        ),
        ("partition", "long", "data partition (null where topic is)"),
        ("client_id", "string", "sender's client id"),
        ("instance_id", "string", "sender's instance id"),
        ("offset", "long", "offset the message carries (heartbeat, release, reservation)"),
        ("token", "long", "fencing token of the claim the event concerns, when valid"),
        ("until_ms", "long", "ReleaseGroup: the pause's end in Unix ms"),
    ),
    "claims": _CLAIM_COLUMNS,
    "membership": _CLAIM_COLUMNS,
    "failovers": (
        ("group", "string", "consumer group"),
        ("topic", "string", CLAIM_TOPIC),
        ("partition", "long", "data partition"),
        ("kind", "string", "failover (the old holder went stale) or handover (it released)"),
        ("old_client_id", "string", "previous holder"),
        ("old_instance_id", "string", "previous holder's instance (null: history compacted)"),
        ("old_token", "long", "previous claim's token (null: history compacted)"),
        ("old_last_seen_ms", "long", "previous holder's last valid heartbeat, or its release"),
        ("new_client_id", "string", "new holder"),
        ("new_instance_id", "string", "new holder's instance"),
        ("new_token", "long", "new claim's token"),
        ("claimed_ms", "long", "log time of the new holder's winning claim"),
        ("duration_ms", "long", "claimed_ms - old_last_seen_ms"),
    ),
    "heartbeat_gaps": (
        ("group", "string", "consumer group"),
        ("topic", "string", CLAIM_TOPIC),
        ("partition", "long", "data partition"),
        ("client_id", "string", "holder's client id"),
        ("instance_id", "string", "holder's instance id"),
        ("token", "long", "fencing token"),
        ("start_ms", "long", "start of the claim interval"),
        ("heartbeats", "long", "valid heartbeats in the interval"),
        ("max_gap_ms", "long", "longest time between valid heartbeats (the win counts)"),
        ("max_gap_at_ms", "long", "log time of the heartbeat that ended the longest gap"),
        ("mean_gap_ms", "double", "mean time between valid heartbeats"),
        ("gaps_over_interval", "long", "gaps >= the heartbeat interval (claim was 'unknown')"),
    ),
    "reservations": (
        ("group", "string", "consumer group"),
        ("topic", "string", CLAIM_TOPIC),
        ("partition", "long", "data partition"),
        ("client_id", "string", "holder's client id"),
        ("instance_id", "string", "holder's instance id"),
        ("token", "long", "fencing token"),
        ("log_time_ms", "long", "log time of the ClaimingMessages record"),
        ("start_offset", "long", "first reserved offset (null: no position known yet)"),
        ("end_offset", "long", "first offset not reserved"),
        ("count", "long", "end_offset - start_offset"),
    ),
    "lag": (
        ("group", "string", "consumer group"),
        ("topic", "string", CLAIM_TOPIC),
        ("partition", "long", "data partition"),
        ("client_id", "string", "holder's client id"),
        ("token", "long", "fencing token"),
        ("log_time_ms", "long", "log time of the valid heartbeat"),
        ("offset", "long", "committed position it carries (next offset to read)"),
        ("high_watermark", "long", "the data partition's high watermark at audit time, if known"),
        ("lag", "long", "high_watermark - offset, if the watermark is known"),
    ),
    "poison": (
        ("group", "string", "consumer group"),
        ("topic", "string", CLAIM_TOPIC),
        ("partition", "long", "data partition"),
        ("offset", "long", "offset of the failing (poison) record"),
        ("log_time_ms", "long", "log time of the RecordFailed or PoisonResolved record"),
        ("coord_partition", "long", "coordination partition of that record"),
        ("coord_offset", "long", "its offset in the coordination partition"),
        ("client_id", "string", "writer: the holder that failed, or the operator"),
        ("instance_id", "string", "writer's instance id"),
        ("action", "string", "failed, parked (nobody tries it), retried or skipped (operator)"),
        ("failures", "long", "failures counted by the fold after this record"),
        ("error", "string", "the handler's last error"),
    ),
    "amo_reserved": (
        ("group", "string", "consumer group"),
        ("topic", "string", CLAIM_TOPIC),
        ("partition", "long", "data partition"),
        ("client_id", "string", "holder's client id"),
        ("instance_id", "string", "holder's instance id"),
        ("token", "long", "fencing token of its claim"),
        ("first_offset", "long", "first offset the interval reserved (null: unknown)"),
        ("last_batch_offset", "long", "first offset of its last reservation (null: unknown)"),
        ("end_offset", "long", "end of its last reservation (exclusive)"),
        ("committed_offset", "long", "its last committed position (heartbeat or release)"),
        ("reserved_ms", "long", "log time of its last reservation"),
        ("end_ms", "long", "log time its holder's right ended; null while still held"),
        ("ended", "string", "as claims.ended, or refused or released_under_pause (see amo_losses)"),
        ("successor_client_id", "string", "who took over (taken_over, refused, replaced)"),
        ("refused_offset", "long", "refused: the holder's commit that came after its lease"),
        ("at_risk_offset", "long", "first offset of its last two reservations (null: unknown)"),
    ),
    "amo_losses": (
        ("group", "string", "consumer group"),
        ("topic", "string", CLAIM_TOPIC),
        ("partition", "long", "data partition"),
        ("client_id", "string", "the holder that reserved the range"),
        ("instance_id", "string", "its instance id"),
        ("token", "long", "fencing token of its claim"),
        ("start_offset", "long", "first offset lost (null: unknown)"),
        ("end_offset", "long", "first offset after the lost ones"),
        ("count", "long", "records reserved and lost (of an unordered slice: its own offsets)"),
        ("handled", "long", "of these, records the ledger shows handled (null: no ledger)"),
        (
            "reserved_ms",
            "long",
            "log time of the holder's last reservation (abandoned: the range's)",
        ),
        (
            "lost_ms",
            "long",
            "log time the holder's right ended (null: it still holds the claim; "
            "abandoned: its first reservation past the range, else the claim's end)",
        ),
        (
            "cause",
            "string",
            "taken_over, lease_expired, refused, replaced, released[_under_pause], abandoned",
        ),
        ("successor_client_id", "string", "who took the partition over"),
        ("detail", "string", "why the range was lost, in one sentence"),
    ),
    "groups": (
        ("group", "string", "consumer group"),
        ("mode", "string", "amo if the group ever reserved messages, else alo (or --mode)"),
        ("partitions", "long", "data partitions ever claimed"),
        ("members", "long", "clients that held a member claim"),
        ("claims", "long", "claim intervals on data partitions"),
        ("failovers", "long", "claims won from a stale holder"),
        ("handovers", "long", "claims won after a release"),
        ("pauses", "long", "accepted ReleaseGroup records"),
    ),
    "coordination": (
        ("coord_partition", "long", "coordination partition"),
        ("records", "long", "records folded"),
        ("first_offset", "long", "first offset read"),
        ("last_offset", "long", "last offset read"),
        ("first_log_time_ms", "long", "log time of the first record"),
        ("last_log_time_ms", "long", "log time of the last record"),
        ("malformed", "long", "malformed or misplaced records (counted, skipped)"),
        ("unverified", "long", "records on claims whose history was compacted away"),
        ("gap_seen", "boolean", "offsets had gaps (compaction): some claims are uncertain"),
        ("verdicts", "string", "JSON object: reported events per verdict"),
    ),
    "violations": (
        (
            "kind",
            "string",
            "zombie_work, overlap, amo_duplicate, alo_gap, wrong_slice, "
            "offset_overlap or key_order",
        ),
        ("group", "string", "consumer group (null if neither a claim nor the row names it)"),
        ("topic", "string", "data topic"),
        ("partition", "long", "data partition"),
        ("offset", "long", "the record's offset (alo_gap: first missing offset)"),
        ("client_id", "string", "ledger: the handling client"),
        ("pid", "long", "ledger: the handling process"),
        ("token", "long", "ledger: the fencing token the handler was given"),
        ("start", "double", "ledger: handling started (Unix seconds, handler host clock)"),
        ("end", "double", "ledger: handling ended (Unix seconds)"),
        ("detail", "string", "what is wrong, in one sentence"),
        ("evidence", "string", "JSON: the ledger rows and claim intervals involved"),
        (
            "slice",
            "string",
            "the slice of the partition (key.3of8; alo_gap of a key cut: "
            "key.*of8); null: a whole partition",
        ),
    ),
}

PARTS: Final[dict[str, tuple[Column, ...]]] = {
    "group_keys": (
        ("group", "string", "consumer group"),
        ("topic", "string", "claim's topic field: data topic (or slice), or member pseudo-topic"),
        ("partition", "long", "data partition (0 for a member claim)"),
    ),
}
"""What the fold hands the driver besides the tables, and the audit never writes: each group's
claim keys on a coordination partition (`tables.Tables.finish`). A group moved to another
placement claimed the same keys on two partitions, so its ``groups`` parts cannot add up their
counts of partitions and members: `finalize.merge_groups` counts the keys once."""

STREAMED: Final = ("events", "reservations", "lag")
"""Tables with a row per record or heartbeat: written by Spark straight from the fold."""


def described(table: str) -> tuple[Column, ...]:
    """The columns of a table, or of one of the fold's `PARTS`."""
    return TABLES[table] if table in TABLES else PARTS[table]


def columns(table: str) -> tuple[str, ...]:
    """The column names of a table (or part), in order."""
    return tuple(name for name, _, _ in described(table))


def ddl(table: str) -> str:
    """A Spark DDL schema string for a table (or part)."""
    return ", ".join(f"`{name}` {kind}" for name, kind, _ in described(table))


PACKED_DDL: Final = "`table` string, `rows` long, `data` binary"
"""How table rows travel out of the fold inside Spark: one row per batch of one table, the
batch serialized as Arrow IPC (see `arrow.pack`)."""
