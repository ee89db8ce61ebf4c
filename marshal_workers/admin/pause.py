"""Pausing a group (ReleaseGroup) and lifting the pause, on every coordination partition.

A group's claims spread over every coordination partition, and the rationalizer folds each
partition on its own, so a pause is one ReleaseGroup per coordination partition. While it is in
force (until MsgExpireTime, in log time), the group's holders release their partitions and only
the pausing client may claim. A ReleaseGroup whose expire time has passed lifts the pause.

Only admin clients may pause a group: when the fleet's ``admin_client_ids`` is set (it is by
default: ``marshal-admin``), the fold refuses anyone else's ReleaseGroup, and `write_pause`
reports the refusal. That verdict is only as good as this command's admin list, which must be
the fleet's (see docs/operating.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from marshal_workers.admin.session import AdminError, AdminSession
from marshal_workers.common.errors import MarshalError
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.groupstatus import iso_ms
from marshal_workers.protocol.rationalizer import pause_of

LIFT = 0  # a MsgExpireTime long past: lifts the pause
SKEW_TOLERANCE_MS = 2_000


@dataclass(frozen=True, slots=True)
class PauseOutcome:
    """The verdicts on one ReleaseGroup written to every coordination partition."""

    group: str
    expire_time_s: int
    verdicts: tuple[ev.Event, ...]

    @property
    def accepted(self) -> bool:
        """Whether every coordination partition took the ReleaseGroup."""
        return bool(self.verdicts) and all(isinstance(v, ev.GroupPaused) for v in self.verdicts)

    @property
    def refusal(self) -> str | None:
        """Why a partition refused it (the first reason), or None."""
        for v in self.verdicts:
            if not isinstance(v, ev.GroupPaused):
                return str(getattr(v, "reason", type(v).__name__))
        return None

    @property
    def until_ms(self) -> int:
        """When the pause ends, in log time (ms)."""
        return self.expire_time_s * 1000

    @property
    def log_time(self) -> int:
        """The log time of the last verdict (when the pause was in place everywhere)."""
        return max((v.log_time for v in self.verdicts), default=0)

    @property
    def in_force(self) -> bool:
        """Whether the pause is accepted and had not expired when written."""
        return self.accepted and self.until_ms > self.log_time

    def summary(self) -> str:
        """One line saying what the log decided."""
        n = len(self.verdicts)
        where = f"on all {n} coordination partitions" if n != 1 else "on its coordination partition"
        if not self.accepted:
            return f"refused: {self.refusal} (pausing group {self.group})"
        if not self.in_force:
            return f"pause of group {self.group} lifted {where}"
        seconds = (self.until_ms - self.log_time) / 1000
        return (
            f"group {self.group} paused until {iso_ms(self.until_ms)} (broker time, "
            f"{seconds:.0f}s from now) {where}"
        )


def write_pause(session: AdminSession, group: str, expire_time_s: int) -> PauseOutcome:
    """Write ReleaseGroup(``expire_time_s``) to every coordination partition the session
    follows (a placed group's: its home and window), in order, and return the verdicts.
    AdminError if a write fails (the partitions before it are paused)."""
    verdicts: list[ev.Event] = []
    for partition in sorted(session.worlds):
        try:
            verdicts.append(session.write(session.release_group(group, expire_time_s), partition))
        except AdminError as exc:
            done = [v.coord_partition for v in verdicts if isinstance(v, ev.GroupPaused)]
            raise AdminError(f"{exc} (the ReleaseGroup landed on partitions {done})") from None
    return PauseOutcome(group, expire_time_s, tuple(verdicts))


def pause_for(session: AdminSession, group: str, seconds: float) -> PauseOutcome:
    """Pause ``group`` for ``seconds`` of log time from now.

    The expire time is computed on the session's estimate of log time; if the broker's time
    on the verdict shows that estimate off by more than a little (the admin's clock is skewed,
    with nothing fresher to go by), the pause is written again on the broker's time."""
    if seconds <= 0:
        return lift_pause(session, group)
    outcome = write_pause(session, group, _expire(session, seconds))
    if outcome.accepted:
        first = outcome.verdicts[0]
        actual_ms = outcome.until_ms - first.log_time
        if abs(actual_ms - seconds * 1000) > SKEW_TOLERANCE_MS:
            outcome = write_pause(session, group, _expire(session, seconds))
    return outcome


def _expire(session: AdminSession, seconds: float) -> int:
    return math.ceil((session.now_ms() + seconds * 1000) / 1000)


def lift_pause(session: AdminSession, group: str) -> PauseOutcome:
    """Lift a pause: a ReleaseGroup that expired long ago, on every coordination partition."""
    return write_pause(session, group, LIFT)


def pause_until(session: AdminSession, group: str) -> int:
    """When the group's pause by this admin ends on every followed partition (log time, ms;
    0 if one has none in force)."""
    now = session.now_ms()
    ends = []
    for world in session.worlds.values():
        pause = pause_of(world, group, now)
        if pause is None or pause.client_id != session.client_id:
            return 0
        ends.append(pause.until_ms)
    return min(ends, default=0)


def pause_in_force(session: AdminSession, group: str) -> tuple[str, int] | None:
    """The client id and the end (log time, ms) of the group's pause in force on the followed
    partitions (the one that ends last), or None."""
    now = session.now_ms()
    found = [p for w in session.worlds.values() if (p := pause_of(w, group, now)) is not None]
    if not found:
        return None
    last = max(found, key=lambda p: p.until_ms)
    return last.client_id, last.until_ms


def others_pause(session: AdminSession, group: str, what: str) -> None:
    """Refuse (MarshalError, one line) if another client's pause of the group is in force: a
    pause of this client's would replace it (any admin's ReleaseGroup does), and the lift at
    the end would end it (a stopped move's hold of days, an operator's pause)."""
    now = session.now_ms()
    for world in session.worlds.values():  # any partition: a pause may be split (a partial write)
        pause = pause_of(world, group, now)
        if pause is not None and pause.client_id != session.client_id:
            raise MarshalError(
                f"group {group} is paused by {pause.client_id} until {iso_ms(pause.until_ms)} "
                f"(log time) on partition {world.partition}: {what}; run it with --client-id "
                f"{pause.client_id}, or once that pause ends"
            )
