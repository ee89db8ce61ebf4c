"""The status view of a consumer group, built from folded worlds (pure: no I/O, no clock).

Freshness is judged at ``now_ms``, a parameter. `marshal-admin status` passes the reader's
wall clock: the question it answers is "is the holder alive *now*", and on an idle log the
newest log time would show a dead holder as fresh forever. This is a view for humans, never a
decision: decisions are the fold's, on log time only.

The JSON form (`GroupStatus.to_json`) is a stable interface::

    {"group": G, "as_of": ISO, "claims": [{"topic", "partition", "client_id", "instance_id",
     "state", "offset", "reserved", "fencing_token", "last_heartbeat", "lag", "certain",
     "slice": {"name", "ordering", "index", "count"} | null,
     "amo_last_loss": {"start", "end", "records", "cause", "lost_at", "reserved_at",
     "client_id", "instance_id", "fencing_token", "successor_client_id"} | null}],
     "amo_losses": {"ranges", "records"} | null,
     "paused_until": ISO | null, "paused_by": str | null, "malformed": N,
     "other_groups_records": N, "complete": bool, "unavailable": [str]}

``malformed`` counts the malformed records among those the reader folded; `marshal-admin
status --group G` folds G's as its members do (`rationalizer`, "One group's view"):
``other_groups_records`` counts the records of other groups it skipped, undecoded.

``complete`` is false when part of the cluster could not be read (a broker down): the rest is
shown, and ``unavailable`` says what is missing (the table ends with the same list).

``offset`` is the committed position (the next offset to read, at-least-once view);
``reserved`` the at-most-once reservation; ``lag`` = high watermark - offset when both are
known. ``fencing_token`` is the holder's token (for a released claim: the last holder's).
A released claim has no client or instance. An *uncertain* claim (history compacted)
shows its last activity as ``last_heartbeat``.

Under ordering ``key`` or ``unordered`` a data partition is cut into slices, each claimed on
its own (`slicing`): a slice's claim has ``topic`` the data topic and ``slice``
``{"name": "key.3of8", "ordering": "key", "index": 3, "count": 8}`` (null for a whole
partition), and a partition's slices are listed together, by index. A slice's ``offset`` is
its position (every record of the slice below it handled or reserved) and its ``lag`` the
partition's high watermark minus that position: an upper bound, since the slice takes only
some of the records above it.

At most once (`amolosses`): ``amo_last_loss`` is the partition's newest range of reserved
records that may never have been handled, *up to* ``records`` of them (the log does not say
how far a crashed child got; the audit's ledger does), with its cause and when the holder's
right ended (``lost_at``, log time); ``amo_losses`` counts the group's ranges and records over
the log read (null: the group never reserved, it runs at least once). A clean run shows 0.
Both count each claim where its group's members take it from, its home now: after a move, the
claim's records left on its old coordination partition (until the cleaner) are its history
before the move, not the claim's (`amolosses`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from marshal_workers.protocol.amolosses import AmoLoss, AmoLosses
from marshal_workers.protocol.members import is_live, is_member_key
from marshal_workers.protocol.rationalizer import World, claim_label, coordinated_here, pause_of
from marshal_workers.protocol.recordfailures import PoisonState, active
from marshal_workers.protocol.slicing import Slice, slice_topic, split_topic
from marshal_workers.protocol.unclaimed import Unclaimed, why_unclaimed
from marshal_workers.protocol.wire import ClaimKey

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_ms(ms: int | None) -> str | None:
    """Milliseconds since the epoch as ISO-8601 UTC with milliseconds (``...Z``), or None; a
    time no date can show (outside the years 1 to 9999) as ``<N ms>``."""
    if ms is None:
        return None
    try:
        stamp = _EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        return f"<{ms} ms>"
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


@dataclass(frozen=True, slots=True)
class ClaimStatus:
    """One topic-partition of the group as the log shows it."""

    topic: str
    partition: int
    client_id: str | None
    instance_id: str | None
    state: str
    offset: int | None
    reserved: int | None
    fencing_token: int | None
    last_heartbeat_ms: int | None
    lag: int | None
    certain: bool
    poison: PoisonState | None = None  # a record failing (or parked) at the claim's position
    slice: Slice | None = None  # the slice of the partition the claim covers (None: all of it)
    amo_last_loss: AmoLoss | None = None  # AMO: the newest range that may not have been handled
    unclaimed: Unclaimed | None = None  # released because of its failing record: why, until

    @property
    def claim_topic(self) -> str:
        """The claim's own topic field (``orders+key.3of8`` for a slice): one per claim."""
        return self.topic if self.slice is None else slice_topic(self.topic, self.slice)

    @property
    def order(self) -> tuple[str, int, str, int, int]:
        """Topic and partition, then a partition's slices by index after the whole claim."""
        part = self.slice
        if part is None:
            return self.topic, self.partition, "", 0, -1
        return self.topic, self.partition, part.ordering.value, part.count, part.index

    def slice_json(self) -> dict[str, object] | None:
        """The slice as a JSON object (None: a whole partition)."""
        part = self.slice
        if part is None:
            return None
        return {
            "name": part.name,
            "ordering": part.ordering.value,
            "index": part.index,
            "count": part.count,
        }

    def to_json(self) -> dict[str, object]:
        """The claim as a JSON object."""
        out: dict[str, object] = {
            "topic": self.topic,
            "partition": self.partition,
            "client_id": self.client_id,
            "instance_id": self.instance_id,
            "state": self.state,
            "offset": self.offset,
            "reserved": self.reserved,
            "fencing_token": self.fencing_token,
            "last_heartbeat": iso_ms(self.last_heartbeat_ms),
            "lag": self.lag,
            "certain": self.certain,
            "slice": self.slice_json(),
            "amo_last_loss": loss_json(self.amo_last_loss),
        }
        if self.unclaimed is not None:
            u = self.unclaimed
            out["unclaimed"] = {
                "why": u.why.value,
                "offset": u.offset,
                "by": u.by,
                "since": iso_ms(u.since_ms),
                "until": iso_ms(u.until_ms),
            }
        if self.poison is not None:  # only while a record fails at the claim's position
            out["poison"] = {
                "offset": self.poison.offset,
                "failures": self.poison.failures,
                "parked": self.poison.parked,
                "last_error": self.poison.error,
                "since": iso_ms(self.poison.log_time),
            }
        return out


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """Every claim of a group, its pause, and how many malformed records the log holds."""

    group: str
    as_of_ms: int
    claims: tuple[ClaimStatus, ...]
    paused_until_ms: int | None
    paused_by: str | None
    malformed: int
    members: tuple[str, ...] = ()
    unavailable: tuple[str, ...] = ()  # what could not be read (a broker down): never silent
    amo_losses: tuple[int, int] | None = None  # AMO: ranges lost and at most how many records
    other_groups: int = 0  # records of other groups, skipped by a reader of this group's view

    @property
    def complete(self) -> bool:
        """Whether everything could be read."""
        return not self.unavailable

    def to_json(self) -> dict[str, object]:
        """The status as one JSON object."""
        return {
            "complete": self.complete,
            "unavailable": list(self.unavailable),
            "group": self.group,
            "as_of": iso_ms(self.as_of_ms),
            "members": list(self.members),
            "claims": [c.to_json() for c in self.claims],
            "paused_until": iso_ms(self.paused_until_ms),
            "paused_by": self.paused_by,
            "malformed": self.malformed,
            "other_groups_records": self.other_groups,
            "amo_losses": None
            if self.amo_losses is None
            else {"ranges": self.amo_losses[0], "records": self.amo_losses[1]},
        }


def loss_json(loss: AmoLoss | None) -> dict[str, object] | None:
    """An AMO loss as a JSON object (None stays None)."""
    if loss is None:
        return None
    return {
        "start": loss.start,
        "end": loss.end,
        "records": loss.records,
        "cause": loss.cause,
        "lost_at": iso_ms(loss.lost_ms),
        "reserved_at": iso_ms(loss.reserved_ms),
        "client_id": loss.client_id,
        "instance_id": loss.instance_id,
        "fencing_token": loss.token,
        "successor_client_id": loss.successor,
    }


def describe_loss(loss: AmoLoss) -> str:
    """One line: ``up to N records (range a-b, cause, at T, holder C/I token K; next owner S)``."""
    count = "an unknown number of" if loss.records is None else str(loss.records)
    start = "?" if loss.start is None else str(loss.start)
    after = f"; next owner {loss.successor}" if loss.successor else ""
    return (
        f"up to {count} records (range {start}-{loss.end}, {loss.cause}, at "
        f"{iso_ms(loss.lost_ms)}, holder {loss.client_id}/{loss.instance_id} token "
        f"{loss.token}{after})"
    )


def group_known(worlds: Mapping[int, World], group: str) -> bool:
    """Whether the log names ``group`` at all: a claim or member record, a pause, settings or
    a failing record of it."""
    return any(
        group in world.pauses
        or group in world.group_settings
        or any(key.group == group for key in world.claims)
        or any(key.group == group for key in world.poison)
        for world in worlds.values()
    )


def group_topics(worlds: Mapping[int, World], group: str) -> set[str]:
    """The data topics the group has claims on (to ask their high watermarks); a slice's
    claim is on its data topic."""
    return {
        split_topic(key.topic)[0]
        for world in worlds.values()
        for key in world.claims
        if key.group == group and not is_member_key(key)
    }


def group_status(
    group: str,
    worlds: Mapping[int, World],
    heartbeat_interval_ms: int,
    now_ms: int,
    high_watermarks: Mapping[tuple[str, int], int],
    losses: AmoLosses | None = None,
) -> GroupStatus:
    """The status of ``group`` at ``now_ms`` (see the module docstring for which clock); with
    ``losses`` (fed every event of the same log) each partition's last AMO loss."""
    claims: list[ClaimStatus] = []
    paused_until: int | None = None
    paused_by: str | None = None
    members: set[str] = set()
    for world in worlds.values():
        for key, state in world.claims.items():
            if key.group != group:
                continue
            if is_member_key(key):  # announcements, not partitions: listed as members
                if is_live(state, now_ms, heartbeat_interval_ms) and state.holder_client:
                    members.add(state.holder_client)
                continue
            if not coordinated_here(world, key):  # a claim whose home the group moved
                continue
            held = state.holder_client is not None
            offset = state.committed
            topic, part = split_topic(key.topic)
            high = high_watermarks.get((topic, key.partition))
            claims.append(
                ClaimStatus(
                    topic=topic,
                    partition=key.partition,
                    client_id=state.holder_client if held else None,
                    instance_id=state.holder_instance if held else None,
                    state=claim_label(state, now_ms, heartbeat_interval_ms),
                    offset=offset,
                    reserved=state.reserved,
                    fencing_token=state.token,
                    last_heartbeat_ms=state.last_seen,
                    lag=high - offset if high is not None and offset is not None else None,
                    certain=state.certain,
                    poison=active(world.poison.get(key), offset),
                    slice=part,
                    amo_last_loss=None
                    if losses is None
                    else losses.last_loss(key, now_ms, world.partition),
                    unclaimed=why_unclaimed(
                        state, active(world.poison.get(key), offset), heartbeat_interval_ms
                    ),
                )
            )
        pause = pause_of(world, group, now_ms)
        if pause is not None and (paused_until is None or pause.until_ms > paused_until):
            paused_until, paused_by = pause.until_ms, pause.client_id
    claims.sort(key=lambda c: c.order)
    malformed = sum(world.malformed for world in worlds.values())
    amo = None
    if losses is not None and losses.is_amo(group):

        def on_its_home(partition: int, key: ClaimKey) -> bool:
            world = worlds.get(partition)
            return world is not None and coordinated_here(world, key)

        amo = losses.totals(group, now_ms, on_its_home)
    return GroupStatus(
        group,
        now_ms,
        tuple(claims),
        paused_until,
        paused_by,
        malformed,
        tuple(sorted(members)),
        amo_losses=amo,
        other_groups=sum(world.other_groups for world in worlds.values()),
    )


_COLUMNS = (
    "TOPIC",
    "PARTITION",
    "STATE",
    "CLIENT",
    "INSTANCE",
    "OFFSET",
    "RESERVED",
    "TOKEN",
    "LAST HEARTBEAT",
    "LAG",
)


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def _lost_cell(loss: AmoLoss | None) -> str:
    """The AMO LOST column: 0, or up to how many records the partition's last loss was."""
    if loss is None:
        return "0"
    return f"<={'?' if loss.records is None else loss.records}"


Trends = Mapping[tuple[str, int], str]


def lag_trends(
    previous: Mapping[tuple[str, int], int | None], status: GroupStatus, elapsed_s: float
) -> dict[tuple[str, int], str]:
    """Per partition, how its lag moved since ``previous`` (``elapsed_s`` ago): ``+120
    (+40/s)`` growing, ``-30 (-10/s)`` shrinking, ``=`` steady, ``-`` unknown."""
    out: dict[tuple[str, int], str] = {}
    for c in status.claims:
        key = (c.claim_topic, c.partition)
        before = previous.get(key)
        if before is None or c.lag is None:
            out[key] = "-"
            continue
        delta = c.lag - before
        if delta == 0:
            out[key] = "="
            continue
        rate = f" ({delta / elapsed_s:+.0f}/s)" if elapsed_s > 0 else ""
        out[key] = f"{delta:+d}{rate}"
    return out


def lags(status: GroupStatus) -> dict[tuple[str, int], int | None]:
    """Each claim's lag (a partition's, or a slice's), to compute the next refresh's trends."""
    return {(c.claim_topic, c.partition): c.lag for c in status.claims}


def _of_slice(c: ClaimStatus) -> str:
    return "" if c.slice is None else f" slice {c.slice.name}"


def render_table(status: GroupStatus, trends: Trends | None = None) -> str:
    """The status as plain-text columns, with a header line and a footer; with ``trends``
    (`lag_trends`, for ``--watch``) a LAG TREND column after LAG."""
    sliced = any(c.slice is not None for c in status.claims)
    amo = status.amo_losses is not None
    columns = (*_COLUMNS[:7], *(["AMO LOST"] if amo else []), *_COLUMNS[7:])
    columns = columns if not sliced else (*columns[:2], "SLICE", *columns[2:])
    columns = columns if trends is None else (*columns, "LAG TREND")
    rows = [
        [
            c.topic,
            str(c.partition),
            *([] if not sliced else [_cell(c.slice and c.slice.name)]),
            c.state if c.certain else f"{c.state}?",
            _cell(c.client_id),
            _cell(c.instance_id),
            _cell(c.offset),
            _cell(c.reserved),
            *([_lost_cell(c.amo_last_loss)] if amo else []),
            _cell(c.fencing_token),
            _cell(iso_ms(c.last_heartbeat_ms)),
            _cell(c.lag),
            *([] if trends is None else [trends.get((c.claim_topic, c.partition), "-")]),
        ]
        for c in status.claims
    ]
    widths = [max(len(row[i]) for row in [list(columns), *rows]) for i in range(len(columns))]
    lines = [f"group {status.group} as of {iso_ms(status.as_of_ms)}"]
    lines.append(f"live members: {', '.join(status.members) or '(none)'}")
    if status.paused_until_ms is not None:
        lines.append(f"paused by {status.paused_by} until {iso_ms(status.paused_until_ms)}")
    for row in [list(columns), *rows]:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if not rows:
        lines.append("(no claims)")
    for c in status.claims:
        p = c.poison
        if p is not None:
            what = "PARKED on poison record" if p.parked else "failing record"
            lines.append(
                f"{what}: {c.topic}/{c.partition}{_of_slice(c)} offset {p.offset}, "
                f"{p.failures} failures, "
                f"last error: {p.error}"
                + (" (marshal-admin skip-record or retry-record)" if p.parked else "")
            )
    for c in status.claims:
        if c.unclaimed is not None:
            lines.append(f"{c.topic}/{c.partition}{_of_slice(c)}: {c.unclaimed.describe(iso_ms)}")
    for c in status.claims:
        if c.amo_last_loss is not None:
            loss = describe_loss(c.amo_last_loss)
            lines.append(f"AMO last loss {c.topic}/{c.partition}{_of_slice(c)}: {loss}")
    if status.amo_losses is not None:
        ranges, records = status.amo_losses
        lines.append(
            f"AMO losses in the log: {ranges} range{'s' if ranges != 1 else ''}, up to "
            f"{records} record{'s' if records != 1 else ''}"
            + (" (at risk: the log does not say how far a crashed child got)" if ranges else "")
            + "; what members saw lost themselves (a handler that failed or timed out, runs"
            " reserved for a child that had ended or whose lease had run out) is in their"
            " amo_records_lost lines and marshal_amo_lost_records_total"
        )
    footer = f"malformed records in the log: {status.malformed}"
    if status.other_groups:
        other = status.other_groups
        footer += f" (of this group's; records of other groups, counted not decoded: {other})"
    if any(not c.certain for c in status.claims):
        footer += "  (? = history compacted: activity only)"
    lines.append(footer)
    if sliced:
        lines.append(
            "SLICE: ordering.INDEXofCOUNT, each slice claimed on its own; a slice's LAG is the "
            "partition's high watermark - its OFFSET, an upper bound (it takes only some records)"
        )
    if status.unavailable:
        lines.append("INCOMPLETE: could not read:")
        lines.extend(f"  - {what}" for what in status.unavailable)
    return "\n".join(lines)
