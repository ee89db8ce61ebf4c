"""`marshal-admin topic list` and `topic describe`: data topics, their partitions and
watermarks, and which groups of the coordination log work on them.

The groups come from the coordination log, folded as the workers fold it: the whole log with
the command's fold settings, then again with each other set of settings groups record (their
heartbeat interval above all), each such group's claims taken from that fold, as its members
fold them (`connection.refolds`: a claim won by a rival once the holder went stale by the
group's interval was rejected by a fold with a longer one, which showed the stale holder).
A group works on a topic if it has claims on it; each claim is taken from its home by the group's
placement now (a moved group's old coordination partitions keep a frozen copy of its claims from
before the move, which the view leaves out, as `status` does). Internal topics (``__``-prefixed: the
coordination log, Kafka's own) are not listed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

from marshal_workers.admin.connection import (
    ADMIN_CLIENT_ID,
    MAX_REFOLDS,
    Connection,
    admin_session,
    reach_timeout,
    recorded_settings,
    refolds,
    some_of,
)
from marshal_workers.common.errors import MarshalError
from marshal_workers.log.topicadmin import admin_client, cluster_metadata
from marshal_workers.protocol.members import is_member_key
from marshal_workers.protocol.rationalizer import World, claim_label, coordinated_here
from marshal_workers.protocol.slicing import split_topic


@dataclass(frozen=True, slots=True)
class Work:
    """One group's claim on a partition (a slice's, with ``slice``)."""

    group: str
    partition: int
    slice: str | None
    holder: str | None
    state: str
    offset: int | None


def work_by_topic(
    worlds: Mapping[int, World], default_hb_ms: int, now_ms: int, only: str | None = None
) -> dict[str, list[Work]]:
    """Every group's (or ``only``'s) claims on each data topic, judged at ``now_ms`` with each
    group's recorded heartbeat interval (``default_hb_ms`` for a group with none recorded).
    Each claim from its home now, as the group's members take it: a moved group's claims keep
    their state from before the move on their old coordination partitions (released, frozen,
    until the cleaner), which is not theirs any more."""
    out: dict[str, list[Work]] = {}
    hb_of: dict[str, int] = {}
    for world in worlds.values():
        for key, state in world.claims.items():
            if is_member_key(key) or (only is not None and key.group != only):
                continue
            if not coordinated_here(world, key):  # left here by a move: its home is elsewhere
                continue
            if key.group not in hb_of:
                recorded = recorded_settings(worlds, key.group)
                hb_of[key.group] = recorded.heartbeat_interval_ms if recorded else default_hb_ms
            topic, part = split_topic(key.topic)
            label = claim_label(state, now_ms, hb_of[key.group])
            shown = label if state.certain else f"{label}?"
            name = part.name if part else None
            work = Work(key.group, key.partition, name, state.holder_client, shown, state.committed)
            out.setdefault(topic, []).append(work)
    for works in out.values():
        works.sort(key=lambda w: (w.partition, w.group, w.slice or ""))
    return out


class TopicView:
    """The cluster's topics and the coordination log's groups, read once."""

    def __init__(self, conn: Connection, timeout_s: float) -> None:
        self.conn, self.timeout_s = conn, timeout_s
        self.admin = admin_client(conn.bootstrap_servers, conn.kafka)
        reach_s = reach_timeout(timeout_s)  # as long as the log's open waits for it
        self.meta = cluster_metadata(self.admin, conn.bootstrap_servers, None, reach_s)
        self.note = ""
        self.work: dict[str, list[Work]] = {}
        if conn.coordination_topic not in self.meta.topics:
            self.note = f"(no coordination topic {conn.coordination_topic}: no groups known)"
            return
        with admin_session(conn, ADMIN_CLIENT_ID, timeout_s) as session:
            now = int(time.time() * 1000)
            self.work = work_by_topic(session.worlds, conn.heartbeat_interval_ms, now)
            groups = {g for world in session.worlds.values() for g in world.group_settings}
            recorded = {g: found for g in groups if (found := recorded_settings(session.worlds, g))}
        sets, left = refolds(conn, recorded)
        if left:
            self._say(left, f"more than {MAX_REFOLDS} sets of settings recorded")
        for adopted, names in sets:
            try:
                with admin_session(adopted, ADMIN_CLIENT_ID, timeout_s, read_only=True) as again:
                    now = int(time.time() * 1000)
                    for group in names:
                        own = work_by_topic(again.worlds, adopted.heartbeat_interval_ms, now, group)
                        self._replace(group, own)
            except MarshalError as exc:  # the first fold's claims of those groups are shown
                self._say(names, str(exc))

    def _say(self, groups: list[str], why: str) -> None:
        """A note: ``groups`` are shown as the command's settings judge them, and why."""
        said = f"(groups {some_of(groups)} judged with the command's settings: {why})"
        self.note = f"{self.note}\n{said}" if self.note else said

    def _replace(self, group: str, own: dict[str, list[Work]]) -> None:
        """``group``'s claims from its own fold in place of the first fold's."""
        for topic in {*self.work, *own}:
            kept = [w for w in self.work.get(topic, []) if w.group != group]
            self.work[topic] = sorted(
                [*kept, *own.get(topic, [])], key=lambda w: (w.partition, w.group, w.slice or "")
            )

    def topics(self) -> list[str]:
        """The data topics, by name (internal ones and the coordination topic left out)."""
        coordination = self.conn.coordination_topic
        return sorted(t for t in self.meta.topics if not t.startswith("__") and t != coordination)

    def partitions(self, topic: str) -> list[int]:
        meta = self.meta.topics.get(topic)
        if meta is None or meta.error is not None:
            raise MarshalError(f"topic {topic} does not exist on {self.conn.bootstrap_servers}")
        return sorted(meta.partitions)

    def watermarks(self, topic: str) -> dict[int, tuple[int | None, int | None]]:
        """Each partition's low and high watermark (None: its leader did not answer)."""
        parts = self.partitions(topic)
        out: dict[int, tuple[int | None, int | None]] = {}
        ends: list[dict[int, int | None]] = []
        for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):  # type: ignore[no-untyped-call]
            futures = self.admin.list_offsets(
                {TopicPartition(topic, p): spec for p in parts}, request_timeout=self.timeout_s
            )
            found: dict[int, int | None] = {}
            for tp, future in futures.items():
                try:
                    offset = int(future.result(timeout=self.timeout_s).offset)
                except (KafkaException, TimeoutError):
                    offset = -1
                found[tp.partition] = offset if offset >= 0 else None
            ends.append(found)
        for p in parts:
            out[p] = (ends[0].get(p), ends[1].get(p))
        return out


def list_topics(conn: Connection, as_json: bool, timeout_s: float) -> str:
    """`topic list`: each data topic, its partition count and the groups working on it."""
    view = TopicView(conn, timeout_s)
    rows = [
        (t, len(view.partitions(t)), sorted({w.group for w in view.work.get(t, [])}))
        for t in view.topics()
    ]
    if as_json:
        listed = [{"topic": t, "partitions": n, "groups": g} for t, n, g in rows]
        return json.dumps({"topics": listed, "note": view.note or None})
    table = [["TOPIC", "PARTITIONS", "GROUPS"]]
    table += [[t, str(n), ", ".join(g) or "-"] for t, n, g in rows]
    lines = _columns(table) if rows else ["(no data topics)"]
    return "\n".join([*lines, *([view.note] if view.note else [])])


def describe_topic(conn: Connection, topic: str, as_json: bool, timeout_s: float) -> str:
    """`topic describe`: each partition's watermarks and every group's claim on it."""
    view = TopicView(conn, timeout_s)
    marks = view.watermarks(topic)
    work = view.work.get(topic, [])
    parts: list[dict[str, Any]] = []
    for p, (low, high) in marks.items():
        claims = [
            {**{k: v for k, v in asdict(w).items() if k != "partition"},
             "lag": high - w.offset if high is not None and w.offset is not None else None}
            for w in work
            if w.partition == p
        ]  # fmt: skip
        parts.append({"partition": p, "low": low, "high": high, "claims": claims})
    groups = sorted({w.group for w in work})
    if as_json:
        return json.dumps({"topic": topic, "groups": groups, "partitions": parts,
                           "note": view.note or None})  # fmt: skip
    table = [["PARTITION", "LOW", "HIGH", "GROUP", "SLICE", "HOLDER", "STATE", "OFFSET", "LAG"]]
    for part in parts:
        cells = [str(part["partition"]), _cell(part["low"]), _cell(part["high"])]
        if not part["claims"]:
            table.append([*cells, "-", "-", "-", "-", "-", "-"])
        for c in part["claims"]:
            table.append([*cells, c["group"], _cell(c["slice"]), _cell(c["holder"]),
                          c["state"], _cell(c["offset"]), _cell(c["lag"])])  # fmt: skip
    head = f"topic {topic}: {len(parts)} partition(s); groups: {', '.join(groups) or '(none)'}"
    return "\n".join([head, *_columns(table), *([view.note] if view.note else [])])


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def _columns(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
