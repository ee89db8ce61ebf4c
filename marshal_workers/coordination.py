"""The supervisor's side of the coordination log: writes, verdicts on them, and log time.

`Coordinator` appends this client's messages (each write counts only once acknowledged, so
its position is known), folds the log up to its own record when a decision hangs on it, and
remembers when each heartbeat was sent, so that a heartbeat folded as valid can extend the
lease by exactly what that heartbeat proves (DESIGN.md section 3).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from marshal_workers import events as ev
from marshal_workers.config import RunConfig
from marshal_workers.coordlog import Appended, CoordinationLog, LogError
from marshal_workers.observe import Observer
from marshal_workers.protocol import (
    ClaimingMessages,
    ClaimingPartition,
    ClaimKey,
    Heartbeat,
    Message,
    ReleasingPartition,
    claim_key,
    coordination_partition,
    encode,
    record_key,
)
from marshal_workers.rationalizer import ClaimState
from marshal_workers.reader import LogReader

Clock = Callable[[], float]
LATE_HEARTBEATS_KEPT = 64  # per claim; beyond that a late heartbeat is simply not credited


class Coordinator:
    """Writes this client's messages and folds the log for the supervisor."""

    def __init__(
        self,
        config: RunConfig,
        log: CoordinationLog,
        reader: LogReader,
        observer: Observer,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
    ) -> None:
        self.config = config
        self.log = log
        self.reader = reader
        self.observer = observer
        self.clock = clock
        self.wall = wall
        self.hb = config.heartbeat_interval
        self._sent: dict[tuple[int, int], float] = {}
        # wp-safety (issue 9 item 8): send times of heartbeats whose append timed out, oldest
        # first, per claim. The producer still delivers them (in order) when a stall ends; the
        # n-th of ours folded without a known position is credited with the oldest time left,
        # never a later one, so a lease is never longer than the heartbeat proves.
        self._late: dict[ClaimKey, list[float]] = {}
        self._seen_log_time = (0, clock())
        self._log = structlog.get_logger().bind(group=config.group, client_id=config.client_id)

    # ---- messages ---------------------------------------------------------------------------

    def _fields(self, key: ClaimKey) -> tuple[int, str, str, str, str, int]:
        c = self.config
        return (int(self.wall()), c.instance_id, c.client_id, key.group, key.topic, key.partition)

    def claiming(self, key: ClaimKey) -> ClaimingPartition:
        """This client's claim on ``key``."""
        return ClaimingPartition(*self._fields(key))

    def heartbeat_msg(self, key: ClaimKey, position: int) -> Heartbeat:
        """This client's heartbeat on ``key`` at ``position``."""
        return Heartbeat(*self._fields(key), position)

    def releasing(self, key: ClaimKey, position: int) -> ReleasingPartition:
        """This client's release of ``key`` at ``position``."""
        return ReleasingPartition(*self._fields(key), position)

    def reserving(self, key: ClaimKey, end: int) -> ClaimingMessages:
        """This client's AMO reservation of ``key`` up to ``end``."""
        return ClaimingMessages(*self._fields(key), end)

    # ---- writes -----------------------------------------------------------------------------

    def partition_of(self, key: ClaimKey) -> int:
        """The coordination partition of a claim."""
        return coordination_partition(
            key.topic, key.partition, self.log.num_partitions, self.config.partitioner
        )

    def send(self, msg: Message, timeout_s: float) -> Appended | None:
        """Append and wait for the acknowledgement; None (logged) if it failed."""
        key = claim_key(msg)
        started = self.clock()
        try:
            appended = self.log.append(
                self.partition_of(key), record_key(msg), encode(msg), timeout_s
            )
        except LogError as exc:
            self.observer.coordination_write(type(msg).__name__, self.clock() - started, False)
            if isinstance(msg, Heartbeat):
                late = self._late.setdefault(key, [])
                if len(late) < LATE_HEARTBEATS_KEPT:
                    late.append(started)
            self._log.warning(
                "coordination write failed",
                message=type(msg).__name__,
                topic=msg.topic,
                partition=msg.partition,
                error=str(exc),
            )
            return None
        self.observer.coordination_write(type(msg).__name__, self.clock() - started, True)
        if isinstance(msg, Heartbeat):
            self._sent[(appended.partition, appended.offset)] = started
        return appended

    def heartbeat(self, key: ClaimKey, position: int) -> None:
        """Send a heartbeat without waiting for its verdict (it extends the lease when folded)."""
        self.send(self.heartbeat_msg(key, position), timeout_s=max(0.2, min(1.0, self.hb / 4)))

    def send_and_fold(self, msg: Message) -> tuple[ev.Event | None, list[ev.Event]]:
        """Append, then fold up to that record: (the verdict on it, every event folded on the
        way, the verdict included). The verdict is None if the write or the fold failed."""
        # bounded: the loop (and with it the supervisor's lease checks) waits meanwhile
        appended = self.send(msg, timeout_s=max(1.0, min(5.0, self.hb)))
        if appended is None:
            return None, []
        try:
            verdict, folded = self.reader.wait_for(
                appended, timeout_s=max(1.0, min(5.0, 2 * self.hb))
            )
        except LogError as exc:
            self._log.warning("own record not folded", error=str(exc))
            return None, []
        self._note_log_time()
        return verdict, [*folded, verdict]

    def poll(self) -> list[ev.Event]:
        """Fold whatever the log delivered since the last call (without waiting)."""
        events = self.reader.poll(0)
        if events:
            self._note_log_time()
        horizon = self.clock() - 4 * self.hb
        for position in [p for p, at in self._sent.items() if at < horizon]:
            del self._sent[position]
        return events

    def sent_at(self, event: ev.Event) -> float | None:
        """When this client sent the heartbeat ``event`` is the verdict on (None: not ours).

        An accepted heartbeat of this instance whose append had timed out is credited with the
        oldest such send time of its claim (see ``_late``)."""
        found = self._sent.pop((event.coord_partition, event.coord_offset), None)
        if (
            found is None
            and isinstance(event, ev.HeartbeatAccepted)
            and event.instance_id == self.config.instance_id
            and event.client_id == self.config.client_id
        ):
            late = self._late.get(event.key)
            if late:
                found = late.pop(0)
        return found

    # ---- the folded world -------------------------------------------------------------------

    def view(self) -> dict[ClaimKey, ClaimState]:
        """Every claim the fold knows, across coordination partitions."""
        view: dict[ClaimKey, ClaimState] = {}
        for world in self.reader.worlds.values():
            view.update(world.claims)
        return view

    def _note_log_time(self) -> None:
        latest = max((w.log_time for w in self.reader.worlds.values()), default=0)
        if latest > self._seen_log_time[0]:
            self._seen_log_time = (latest, self.clock())

    def now_ms(self) -> int:
        """An estimate of the log's current time: the newest log time plus time since."""
        seen, at = self._seen_log_time
        return seen + int((self.clock() - at) * 1000)

    def catch_up(self, timeout_s: float) -> int:
        """Fold the whole log as it is now; return how many records that was."""
        folded = self.reader.catch_up(timeout_s)
        self._note_log_time()
        return folded
