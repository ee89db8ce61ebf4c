"""Best-effort commits of the group's positions to Kafka, for `kafka-consumer-groups` and lag
monitors.

The coordination log is where positions live; Kafka's ``__consumer_offsets`` only mirrors them,
so that the usual tools see the group. `OffsetCommitter` is an `Observer`: at each turn of the
supervisor's loop it gets the held claims with their positions (the offsets the heartbeats
carry) and commits those that are due, at most once per HB/2 per partition (as often as
heartbeats go out), when the position moved or, unchanged, once a minute (so that an idle
group's offsets do not expire). Nothing here is ever fatal: a failed commit is logged at
debug level (the first one at warning) and counted, and the next due commit tries again.

The commits come from a consumer that never joins the group: ``group.id`` is the group, it
never subscribes, and it commits explicit offsets (generation -1, no member id: a "simple
consumer" commit). The broker accepts such commits while the group has no live members, which
is the case for a Marshal group (its children never subscribe either). If some other consumer
subscribes with the same group id, the broker refuses the commits (UNKNOWN_MEMBER_ID) while that
consumer is a member: counted as failures, harmless to the fleet.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from marshal_workers.clients import roles
from marshal_workers.clients.kafkaconfig import client_config
from marshal_workers.clients.rdkafka import RDKAFKA_LOG, error_text
from marshal_workers.protocol.members import is_member_key
from marshal_workers.protocol.slicing import split_topic
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.supervisor.observe import ClaimSnapshot, Observer

Clock = Callable[[], float]
TopicOffset = tuple[str, int, int]  # topic, partition, next offset to read
ResultCallback = Callable[[Sequence[tuple[str, int]], str | None], None]
REFRESH_S = 60.0


class OffsetSink(Protocol):
    """Where commits go: Kafka (`KafkaOffsetSink`) or a fake in tests."""

    def commit(self, offsets: Sequence[TopicOffset]) -> None:
        """Start committing; the outcome is reported later through the result callback."""
        ...

    def serve(self) -> None:
        """Deliver the outcomes of earlier commits (without blocking)."""
        ...

    def close(self) -> None:
        """Release the client."""
        ...


class KafkaOffsetSink:
    """Commits offsets of ``group`` with a consumer that never joins it (created on first use)."""

    def __init__(
        self,
        bootstrap_servers: str,
        group: str,
        extra_config: Mapping[str, str] | None = None,
        on_result: ResultCallback | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.group = group
        self.extra_config = dict(extra_config or {})
        self.on_result = on_result
        self._consumer: Consumer | None = None

    def _open(self) -> Consumer:
        if self._consumer is None:
            fixed: dict[str, Any] = {
                "client.id": f"marshal-offsets-{uuid.uuid4().hex[:8]}",
                "group.id": self.group,  # the group itself: that is what the commits are for
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "on_commit": self._on_commit,
            }
            self._consumer = roles.offsets(
                client_config(self.bootstrap_servers, self.extra_config, fixed=fixed)
            )
        return self._consumer

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if self.on_result is None:
            return
        failed = [(tp.topic, tp.partition) for tp in partitions if tp.error is not None]
        if err is not None:
            self.on_result([(tp.topic, tp.partition) for tp in partitions], error_text(err))
        elif failed:
            first = next(tp.error for tp in partitions if tp.error is not None)
            self.on_result(failed, error_text(first))

    def commit(self, offsets: Sequence[TopicOffset]) -> None:
        """Commit asynchronously; a failure to even start is reported at once."""
        try:
            self._open().commit(
                offsets=[TopicPartition(t, p, o) for t, p, o in offsets], asynchronous=True
            )
        except Exception as exc:  # best effort: a client or config failure must not escape
            if self.on_result is not None:
                self.on_result(
                    [(t, p) for t, p, _ in offsets], error_text(exc.args[0] if exc.args else exc)
                )

    def commit_now(self, offsets: Sequence[TopicOffset]) -> str | None:
        """Commit and wait for the answer; return the error text, or None if all were taken."""
        try:
            consumer = self._open()
            done = consumer.commit(
                offsets=[TopicPartition(t, p, o) for t, p, o in offsets], asynchronous=False
            )
        except KafkaException as exc:
            return error_text(exc.args[0] if exc.args else exc)
        except Exception as exc:  # best effort, as above
            return str(exc)
        errors = [tp.error for tp in done or [] if tp.error is not None]
        return error_text(errors[0]) if errors else None

    def serve(self) -> None:
        """Deliver commit outcomes (a consumer that never subscribes only serves callbacks)."""
        if self._consumer is not None:
            try:
                self._consumer.poll(0)
            except Exception as exc:  # best effort
                RDKAFKA_LOG.debug("offset committer poll failed: %s", exc)

    def close(self) -> None:
        """Close the consumer, if one was opened."""
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            try:
                consumer.close()
            except Exception as exc:  # best effort
                RDKAFKA_LOG.debug("offset committer close failed: %s", exc)


@dataclass(slots=True)
class _Committed:
    position: int | None  # None: the last commit failed, so commit again when due
    at: float


class OffsetCommitter(Observer):
    """Mirrors the held claims' positions into Kafka's committed offsets (see module doc)."""

    def __init__(
        self,
        sink: OffsetSink,
        heartbeat_interval_s: float,
        clock: Clock = time.monotonic,
        refresh_s: float = REFRESH_S,
    ) -> None:
        self.sink = sink
        self.min_interval = heartbeat_interval_s / 2
        self.refresh_s = max(refresh_s, self.min_interval)
        self.clock = clock
        self.commits = 0  # partition offsets sent
        self.failures = 0  # partition offsets the broker (or the client) refused
        self._last: dict[tuple[str, int], _Committed] = {}
        self._warned = False
        self._log = structlog.get_logger()

    @classmethod
    def for_kafka(
        cls,
        bootstrap_servers: str,
        group: str,
        heartbeat_interval_s: float,
        extra_config: Mapping[str, str] | None = None,
    ) -> OffsetCommitter:
        """A committer writing to the group's offsets on a real broker."""
        sink = KafkaOffsetSink(bootstrap_servers, group, extra_config)
        committer = cls(sink, heartbeat_interval_s)
        sink.on_result = committer.failed
        return committer

    def due(self, claims: Mapping[ClaimKey, ClaimSnapshot], now: float) -> list[TopicOffset]:
        """The positions to commit now (pure but for the bookkeeping it reads)."""
        out: list[TopicOffset] = []
        for key, snap in claims.items():
            if is_member_key(key) or snap.phase == "lost":
                continue  # a lost claim's position may be older than its new owner's
            if split_topic(key.topic)[1] is not None:
                continue  # a slice's position is not the partition's: Kafka has no place for it
            if snap.position < 0:
                continue  # no position yet (a claim just won): nothing to commit, and Kafka
                # answers -1 with "Local: No offset stored", a warning on every first start
            last = self._last.get((key.topic, key.partition))
            if last is not None:
                waited = now - last.at
                if waited < self.min_interval:
                    continue
                if last.position == snap.position and waited < self.refresh_s:
                    continue
            out.append((key.topic, key.partition, snap.position))
        return out

    def tick(self, claims: Mapping[ClaimKey, ClaimSnapshot], healthy: bool) -> None:
        """Commit what is due, then deliver earlier outcomes."""
        now = self.clock()
        held = {(k.topic, k.partition) for k in claims}
        for gone in [tp for tp in self._last if tp not in held]:
            del self._last[gone]  # released or lost: a later owner starts afresh
        offsets = self.due(claims, now)
        if offsets:
            for topic, partition, position in offsets:
                self._last[(topic, partition)] = _Committed(position, now)
            self.commits += len(offsets)
            self.sink.commit(offsets)
        self.sink.serve()

    def failed(self, partitions: Sequence[tuple[str, int]], error: str | None) -> None:
        """The broker refused these commits: count them and try again when next due."""
        self.failures += len(partitions)
        for tp in partitions:
            last = self._last.get(tp)
            if last is not None:
                last.position = None
        if not self._warned:
            self._warned = True
            self._log.warning(
                "offset_commit_failed",
                error=error,
                note="best effort: coordination is unaffected; further failures are logged at "
                "debug level",
            )
        else:
            self._log.debug("offset_commit_failed", error=error, partitions=len(partitions))

    def close(self) -> None:
        """Close the sink."""
        self.sink.close()
