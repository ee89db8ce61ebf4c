"""Best-effort commits of the group's positions to Kafka, for `kafka-consumer-groups` and lag
monitors.

The coordination log is where positions live; Kafka's ``__consumer_offsets`` only mirrors them,
so that the usual tools see the group. `OffsetCommitter` is an `Observer`: at each tick (a turn
of the supervisor's loop, at most every 50 ms) it gets the held claims with their positions
(the offsets the heartbeats carry) and commits those that are due, at most once per HB/2 per
partition (as often as heartbeats go out), when the position moved or, unchanged, once a
minute (so that an idle group's offsets do not expire). Nothing here is ever fatal: a failed
commit is logged at debug level (the first one at warning) and counted, and the next due
commit tries again.

The sink (`fleet.offsetsink.KafkaOffsetSink`, which `marshal-admin set-position` writes
through too) commits from a consumer that never joins the group.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import structlog

from marshal_workers.fleet.offsetsink import KafkaOffsetSink, OffsetSink, TopicOffset
from marshal_workers.protocol.members import is_member_key
from marshal_workers.protocol.slicing import split_topic
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.supervisor.observe import ClaimSnapshot, Observer

__all__ = ["REFRESH_S", "OffsetCommitter", "OffsetSink", "TopicOffset"]

Clock = Callable[[], float]
REFRESH_S = 60.0


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
