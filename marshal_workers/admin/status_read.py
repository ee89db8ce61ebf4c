"""Reading a group's status from a cluster that may be partly down (`status`, `status --watch`).

`marshal-admin status` must degrade, never go silent: with a broker down it shows what it
could read and says what it could not. `StatusReader` keeps one coordination log open, folds
it as far as it can within the timeout (a coordination partition that cannot be read to its
end is named, with how many records it is behind), asks every data partition's end one by one
(a partition without a leader, or whose end cannot be read, is named and shows no lag), and
returns the `GroupStatus` with the list of what was unavailable. Every event folded also goes
to an `AmoLosses`, which keeps each partition's last at-most-once loss. Refreshing folds only
what arrived since, so `--watch` costs one round of requests per refresh.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

from marshal_workers.admin.connection import (
    Connection,
    fold_settings_differ,
    for_group,
    open_group_log,
    unknown_group,
)
from marshal_workers.clients.rdkafka import error_text
from marshal_workers.common.errors import MarshalError
from marshal_workers.log.interface import LogError
from marshal_workers.log.topicadmin import admin_client
from marshal_workers.protocol.amolosses import AmoLosses
from marshal_workers.protocol.groupstatus import (
    GroupStatus,
    group_known,
    group_status,
    group_topics,
    render_table,
)


class StatusReader:
    """One group's status, refreshed from an open coordination log (the caller closes it)."""

    def __init__(self, conn: Connection, group: str, timeout_s: float) -> None:
        self.conn = conn
        self.group = group
        self.timeout_s = timeout_s
        # the group's view, as its members fold it: other groups' records are counted only; a
        # placed group's partitions only (`open_group_log`)
        # an unreadable home: every partition, what cannot be read listed (`locate_group`)
        self.log, self.reader, _ = open_group_log(
            conn, group, timeout_s, home_unreadable_spread=True
        )
        self.losses = AmoLosses(conn.heartbeat_interval_ms)
        self.admin = admin_client(conn.bootstrap_servers, conn.kafka)

    def close(self) -> None:
        """Close the coordination log."""
        self.log.close()

    def refresh(self, now_ms: int | None = None) -> GroupStatus:
        """Fold what arrived, read the data topics' ends, and judge freshness at ``now_ms``
        (default: the wall clock); what could not be read is listed in ``unavailable``."""
        problems: list[str] = []
        self._catch_up(problems)
        adopted = for_group(self.conn, self.reader.worlds, self.group)
        if fold_settings_differ(self.conn, adopted):  # the group's recorded settings: fold again
            self.close()
            self.conn = adopted
            self.log, self.reader, _ = open_group_log(
                adopted, self.group, self.timeout_s, home_unreadable_spread=True
            )
            self.losses = AmoLosses(adopted.heartbeat_interval_ms)
            problems = []
            self._catch_up(problems)
            self.conn = for_group(adopted, self.reader.worlds, self.group)
        topics = group_topics(self.reader.worlds, self.group)
        highs = self._ends(topics, problems)
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        hb = self.conn.heartbeat_interval_ms
        status = group_status(self.group, self.reader.worlds, hb, now, highs, self.losses)
        return replace(status, unavailable=tuple(problems))

    def _catch_up(self, problems: list[str]) -> None:
        topic = self.conn.coordination_topic
        deadline = time.monotonic() + self.timeout_s
        targets: dict[int, int] | None = None
        failure: LogError | None = None
        while targets is None:  # a leader that just died: retried until one is elected
            try:
                targets = self.log.end_offsets(max(0.5, min(5.0, deadline - time.monotonic())))
            except LogError as exc:
                failure = exc
                if time.monotonic() >= deadline:
                    break
                with contextlib.suppress(LogError):  # fold what the others deliver meanwhile
                    self.losses.add_all(self.reader.poll(0.5))
        if targets is None:
            problems.append(f"the end of {topic} (folded what arrived): {failure}")
            deadline = time.monotonic() + 1.0
        while targets is None or not self.reader.caught_up_to(targets):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                events = self.reader.poll(min(remaining, 0.5))
            except LogError as exc:
                problems.append(f"reading {topic}: {exc}")
                return
            self.losses.add_all(events)
            if targets is None and not events:
                return  # no end known: folded until the log went quiet
        if targets is not None and not self.reader.caught_up_to(targets):
            worlds = self.reader.worlds
            behind = {
                p: end - worlds[p].next_offset
                for p, end in sorted(targets.items())
                if worlds[p].next_offset < end
            }
            problems.append(
                f"{topic} not read to its end within {self.timeout_s:.0f}s "
                f"(records behind per partition: {behind}): claims there may be out of date"
            )

    def _ends(self, topics: Iterable[str], problems: list[str]) -> dict[tuple[str, int], int]:
        """Each data partition's end, one by one; the ones that fail go to ``problems``. Each
        topic's metadata is asked for by name (one request for every topic is answered with the
        whole cluster's)."""
        specs: dict[TopicPartition, Any] = {}
        for topic in sorted(set(topics)):
            try:
                meta = self.admin.list_topics(topic, timeout=self.timeout_s).topics.get(topic)
            except KafkaException as exc:  # (the cluster's, not the topic's: no more asked)
                problems.append(f"lag: cannot read topic metadata: {error_text(exc)}")
                return {}
            if meta is None or meta.error is not None:
                why = "missing" if meta is None else error_text(meta.error)
                problems.append(f"lag of {topic}: {why}")
                continue
            for p, pmeta in sorted(meta.partitions.items()):
                if pmeta.leader < 0:
                    problems.append(f"lag of {topic}[{p}]: no leader")
                    continue
                specs[TopicPartition(topic, p)] = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        if not specs:
            return {}
        futures = self.admin.list_offsets(specs, request_timeout=self.timeout_s)
        out: dict[tuple[str, int], int] = {}
        for tp, future in futures.items():
            try:
                end = int(future.result(timeout=self.timeout_s).offset)
            except (KafkaException, TimeoutError) as exc:
                problems.append(f"lag of {tp.topic}[{tp.partition}]: {error_text(exc)}")
                continue
            if end < 0:  # librdkafka's OFFSET_INVALID: the leader did not answer in time
                problems.append(f"lag of {tp.topic}[{tp.partition}]: its leader did not answer")
                continue
            out[(tp.topic, tp.partition)] = end
        return out


class UnknownGroupError(MarshalError):
    """The log has no record of the group (exit 1); ``answer``: the JSON `status --json`
    prints all the same."""

    def __init__(self, message: str, answer: str) -> None:
        super().__init__(message)
        self.answer = answer


def run_status(
    conn: Connection, group: str, as_json: bool, timeout_s: float, now_ms: int | None = None
) -> str:
    """The group's status as one JSON object or a table; freshness at ``now_ms`` (wall clock).
    What could not be read (a broker down) is shown as such, never left out silently."""
    reader = StatusReader(conn, group, timeout_s)
    try:
        status = reader.refresh(now_ms)
        if status.complete and not group_known(reader.reader.worlds, group):
            # read to the end and never named: a typo or another fleet's topic (not an empty
            # table and exit 0); a partial read shows what it could, as ever. --json answers
            # JSON all the same (a script reads stdout), the line on stderr, exit 1.
            error = unknown_group(conn, group)
            raise UnknownGroupError(error, json.dumps({**status.to_json(), "known": False,
                                                  "error": error}))  # fmt: skip
    finally:
        reader.close()
    if as_json:
        return json.dumps(status.to_json())
    return render_table(status)
