"""What can only be decided once every coordination partition is folded (pure).

- `settle`: an interval still open at the end of its partition is *stale* if its last valid
  heartbeat is more than 2*HB before the end of the whole log (or ``--until``), else *still
  held*. The end of the log is the newest log time over all partitions (`log_end_ms`), not
  the reader's clock, so an audit of the same log always says the same.
- `settle_reserved`: an AMO interval still open at the end of its partition ended as its claim
  settled (stale, or still held: its last batch is work in progress, see `amo`).
- `merge_groups`: each coordination partition counts its own part of a group; a claim interval
  (or pause) lives on exactly one partition, so those counts add up. Its data partitions and
  members do not: a group moved to another placement claimed the same keys on its old home
  partition and on its new one, so they are counted once, from the claim keys each part names
  (``group_keys``). A group is AMO if any part saw a reservation.
- `merge_coordination`: the fold per claim (`claimfold`) counts each coordination partition
  in parts, one per claim (and per group, and one for the rest); they add up to one row.
- `add_lag`: the data partitions' high watermarks (read once, at audit time) against each
  heartbeat's committed position.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from marshal_workers.audit.schema import columns
from marshal_workers.audit.tables import Row, Window
from marshal_workers.protocol.members import is_member_key
from marshal_workers.protocol.slicing import data_topic
from marshal_workers.protocol.wire import ClaimKey

_CLAIM = {name: i for i, name in enumerate(columns("claims"))}
_GROUP = {name: i for i, name in enumerate(columns("groups"))}
_LAG = {name: i for i, name in enumerate(columns("lag"))}
_COORD = {name: i for i, name in enumerate(columns("coordination"))}


def log_end_ms(coordination: Iterable[Row]) -> int | None:
    """The newest log time of any coordination partition (None for an empty log)."""
    ends = [r[_COORD["last_log_time_ms"]] for r in coordination]
    return max(ends) if ends else None


def settle(
    claim_rows: Iterable[Row], end_ms: int, hb_ms: int | Callable[[str], int], window: Window
) -> list[Row]:
    """Claims or membership rows with every open interval decided (stale or still held);
    ``hb_ms``: the heartbeat interval, or each group's (a function of the group)."""
    hb_of = hb_ms if callable(hb_ms) else (lambda _group, ms=hb_ms: ms)
    ended, end, last_hb, start = (
        _CLAIM["ended"],
        _CLAIM["end_ms"],
        _CLAIM["last_heartbeat_ms"],
        _CLAIM["start_ms"],
    )
    out: list[Row] = []
    for row in claim_rows:
        if row[ended] is not None:
            out.append(row)
            continue
        values = list(row)
        last = values[last_hb]
        hb = hb_of(values[_CLAIM["group"]])
        if end_ms - last > 2 * hb:
            values[ended], values[end] = "stale", last + 2 * hb
        else:
            values[ended] = "still_held"
        if window.wants_span(values[start], values[end]):
            out.append(tuple(values))
    return out


_RES = {name: i for i, name in enumerate(columns("amo_reserved"))}


def settle_reserved(reserved: Iterable[Row], settled_claims: Iterable[Row]) -> list[Row]:
    """`amo_reserved` rows whose interval was open at the end of its partition, ended as their
    claim settled: ``stale`` (``refused`` if the log refused a later commit of the holder's)
    with the claim's end, or ``still_held``; rows outside the window go with their claim."""
    settled: dict[tuple[object, ...], tuple[str, int | None]] = {}
    names = ("group", "topic", "partition", "client_id", "instance_id", "token")
    for c in settled_claims:
        if c[_CLAIM["ended"]] in ("stale", "still_held"):
            who = tuple(c[_CLAIM[n]] for n in names)
            settled[who] = (c[_CLAIM["ended"]], c[_CLAIM["end_ms"]])
    out: list[Row] = []
    ended, end = _RES["ended"], _RES["end_ms"]
    for row in reserved:
        if row[ended] is not None:
            out.append(row)
            continue
        found = settled.get(tuple(row[_RES[n]] for n in names))
        if found is None:
            continue  # its claim is outside the window
        values = list(row)
        refused = found[0] == "stale" and row[_RES["refused_offset"]] is not None
        values[ended], values[end] = "refused" if refused else found[0], found[1]
        out.append(tuple(values))
    return out


def merge_groups(
    parts: Iterable[Row], keys: Iterable[Row], modes: Mapping[str, str] | None = None
) -> list[Row]:
    """One ``groups`` row per group from the per-partition parts and their claim keys
    (``group_keys`` rows); ``modes`` overrides mode."""
    merged: dict[str, list[Any]] = {}
    for part in parts:
        name = part[_GROUP["group"]]
        assert isinstance(name, str)
        have = merged.get(name)
        if have is None:
            merged[name] = list(part)
            continue
        if part[_GROUP["mode"]] == "amo":
            have[_GROUP["mode"]] = "amo"
        for col in ("claims", "failovers", "handovers", "pauses"):
            i = _GROUP[col]
            have[i] = int(have[i]) + int(part[i])
    distinct = _distinct_keys(keys)
    for name, row in merged.items():
        data, members = distinct.get(name, (set(), set()))
        row[_GROUP["partitions"]], row[_GROUP["members"]] = len(data), len(members)
        override = (modes or {}).get(name) or (modes or {}).get("*")
        if override:
            row[_GROUP["mode"]] = override
    return [tuple(merged[name]) for name in sorted(merged)]


def _distinct_keys(keys: Iterable[Row]) -> dict[str, tuple[set[ClaimKey], set[ClaimKey]]]:
    """Each group's data claim keys and member claim keys, over every coordination partition."""
    out: dict[str, tuple[set[ClaimKey], set[ClaimKey]]] = {}
    for group, topic, partition in keys:
        key = ClaimKey(str(group), str(topic), int(partition))
        data, members = out.setdefault(key.group, (set(), set()))
        (members if is_member_key(key) else data).add(key)
    return out


def merge_coordination(parts: Iterable[Row]) -> list[Row]:
    """One ``coordination`` row per coordination partition from its parts: records, malformed,
    unverified and verdicts add up, the first and last offsets (with their log times) are the
    least and the greatest, and a gap anywhere is the partition's."""
    c = _COORD
    merged: dict[int, list[Any]] = {}
    for part in parts:
        have = merged.get(part[c["coord_partition"]])
        if have is None:
            merged[part[c["coord_partition"]]] = list(part)
            continue
        if part[c["first_offset"]] < have[c["first_offset"]]:
            have[c["first_offset"]] = part[c["first_offset"]]
            have[c["first_log_time_ms"]] = part[c["first_log_time_ms"]]
        if part[c["last_offset"]] > have[c["last_offset"]]:
            have[c["last_offset"]] = part[c["last_offset"]]
            have[c["last_log_time_ms"]] = part[c["last_log_time_ms"]]
        for col in ("records", "malformed", "unverified"):
            have[c[col]] = int(have[c[col]]) + int(part[c[col]])
        have[c["gap_seen"]] = bool(have[c["gap_seen"]] or part[c["gap_seen"]])
        verdicts: dict[str, int] = json.loads(have[c["verdicts"]])
        for name, n in json.loads(part[c["verdicts"]]).items():
            verdicts[name] = verdicts.get(name, 0) + n
        have[c["verdicts"]] = json.dumps(verdicts, sort_keys=True)
    return [tuple(merged[p]) for p in sorted(merged)]


def add_lag(lag_rows: Iterable[Row], watermarks: Mapping[tuple[str, int], int]) -> list[Row]:
    """Lag rows with ``high_watermark`` and ``lag`` filled in where the watermark is known.

    A slice's row (topic ``orders+key.3of8``) is measured against its data partition's
    watermark: an upper bound, since the slice owes only some of the records above it."""
    topic, partition, offset = _LAG["topic"], _LAG["partition"], _LAG["offset"]
    out: list[Row] = []
    for row in lag_rows:
        high = watermarks.get((data_topic(row[topic]), row[partition]))
        if high is None:
            out.append(row)
            continue
        committed = row[offset]
        assert isinstance(committed, int)
        out.append((*row[:-2], high, high - committed))
    return out
