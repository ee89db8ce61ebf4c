"""One admin client's handle on the coordination log: its messages, their verdicts, log time.

`marshal-admin release-group` and `set-position` write as an *admin client* (``--client-id``,
default ``marshal-admin``) with an instance id of their own. A write counts only once folded:
`AdminSession.write` appends the message to its coordination partition, folds the log up to
it, and returns the rationalizer's verdict on it, the same verdict every worker reaches.

Log time is the broker's clock. `now_ms` estimates it as the newest log time seen since the
session started writing, plus the time elapsed since (before any such record: the wall clock).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from marshal_workers.common.errors import MarshalError
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.interface import CoordinationLog, LogError
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.placement import Placement, spread
from marshal_workers.protocol.rationalizer import ClaimState, World
from marshal_workers.protocol.wire import (
    ClaimingMessages,
    ClaimingPartition,
    ClaimKey,
    Heartbeat,
    Message,
    ReleaseGroup,
    ReleasingPartition,
    claim_key,
    encode,
    record_key,
)

Clock = Callable[[], float]


class AdminError(MarshalError):
    """A coordination write of the admin failed or was not folded in time."""


class AdminSession:
    """Writes one admin client's messages and folds the log up to each of them."""

    def __init__(
        self,
        log: CoordinationLog,
        reader: FoldedLog,
        client_id: str,
        *,
        instance_id: str | None = None,
        wall: Clock = time.time,
        monotonic: Clock = time.monotonic,
        write_timeout_s: float = 10.0,
        fold_timeout_s: float = 30.0,
        placement: Placement | None = None,
    ) -> None:
        self.log = log
        self.reader = reader
        # where the group acted on is coordinated (None: spread over every partition)
        self.placement = placement
        self.client_id = client_id
        self.instance_id = instance_id or f"admin-{uuid.uuid4().hex[:12]}"
        self.wall = wall
        self.monotonic = monotonic
        self.write_timeout_s = write_timeout_s
        self.fold_timeout_s = fold_timeout_s
        self._anchor: tuple[int, float] | None = None  # (log time, monotonic time seen)

    # ---- the folded log ---------------------------------------------------------------------

    @property
    def hb_ms(self) -> int:
        """The heartbeat interval the log is folded with."""
        return self.reader.config.heartbeat_interval_ms

    @property
    def worlds(self) -> dict[int, World]:
        """The folded coordination partitions."""
        return self.reader.worlds

    def partition_of(self, key: ClaimKey) -> int:
        """The coordination partition of a claim (by the session's placement, if placed)."""
        if self.placement is not None:
            return self.placement.partition_of(key.topic, key.partition)
        cfg = self.reader.config
        return spread(self.log.num_partitions, cfg.partitioner).partition_of(
            key.topic, key.partition
        )

    def state(self, key: ClaimKey) -> ClaimState | None:
        """What the fold says about a claim now."""
        return self.worlds[self.partition_of(key)].claims.get(key)

    def holds(self, key: ClaimKey) -> bool:
        """Whether this session's instance holds ``key`` and is not stale (by `now_ms`)."""
        state = self.state(key)
        return (
            state is not None
            and state.certain
            and state.holder_client == self.client_id
            and state.holder_instance == self.instance_id
            and state.last_heartbeat is not None
            and self.now_ms() - state.last_heartbeat <= 2 * self.hb_ms
        )

    def catch_up(self, timeout_s: float) -> None:
        """Fold the whole log as it is now (AdminError if that takes too long)."""
        try:
            self.reader.catch_up(timeout_s)
        except LogError as exc:
            raise AdminError(str(exc)) from None

    def poll(self, timeout_s: float) -> list[ev.Event]:
        """Fold what arrives within ``timeout_s``."""
        try:
            events = self.reader.poll(timeout_s)
        except LogError as exc:
            raise AdminError(str(exc)) from None
        for e in events:
            self._saw(e.log_time)
        return events

    def _saw(self, log_time: int) -> None:
        if self._anchor is None or log_time > self._anchor[0]:
            self._anchor = (log_time, self.monotonic())

    def now_ms(self) -> int:
        """An estimate of the log's current time (see the module docstring)."""
        if self._anchor is None:
            return int(self.wall() * 1000)
        seen, at = self._anchor
        return seen + int((self.monotonic() - at) * 1000)

    # ---- messages ---------------------------------------------------------------------------

    def _fields(self, key: ClaimKey) -> tuple[int, str, str, str, str, int]:
        return (
            int(self.wall()),
            self.instance_id,
            self.client_id,
            key.group,
            key.topic,
            key.partition,
        )

    def claiming(self, key: ClaimKey) -> ClaimingPartition:
        """This admin's claim on ``key``."""
        return ClaimingPartition(*self._fields(key))

    def heartbeat(self, key: ClaimKey, offset: int) -> Heartbeat:
        """This admin's heartbeat on ``key`` with ``offset``."""
        return Heartbeat(*self._fields(key), offset)

    def releasing(self, key: ClaimKey, offset: int) -> ReleasingPartition:
        """This admin's release of ``key`` at ``offset``."""
        return ReleasingPartition(*self._fields(key), offset)

    def reserving(self, key: ClaimKey, offset: int) -> ClaimingMessages:
        """This admin's AMO reservation of ``key`` up to ``offset``."""
        return ClaimingMessages(*self._fields(key), offset)

    def release_group(self, group: str, expire_time_s: int) -> ReleaseGroup:
        """This admin's pause of ``group`` until ``expire_time_s`` (Unix seconds, log time)."""
        return ReleaseGroup(*self._fields(ClaimKey(group, "", 0)), expire_time_s)

    # ---- writes -----------------------------------------------------------------------------

    def write(self, msg: Message, partition: int | None = None) -> ev.Event:
        """Append ``msg`` (to ``partition``, else its claim's coordination partition), fold up
        to it, and return the verdict on it. AdminError if either step fails."""
        if partition is None:
            partition = self.partition_of(claim_key(msg))
        what = f"{type(msg).__name__} on coordination partition {partition}"
        try:
            appended = self.log.append(
                partition, record_key(msg), encode(msg), self.write_timeout_s
            )
            verdict, folded = self.reader.wait_for(appended, self.fold_timeout_s)
        except LogError as exc:
            raise AdminError(f"{what}: {exc}") from None
        for e in folded:
            self._saw(e.log_time)
        self._saw(verdict.log_time)
        return verdict
