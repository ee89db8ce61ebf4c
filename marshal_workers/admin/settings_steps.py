"""The steps that `group-settings --change` and `--move` share: the group's recorded settings,
who still holds or runs, waiting for them, and recording new settings on partitions.

Each reads the session's fold (`AdminSession.worlds`): every partition it follows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from marshal_workers.admin.pause import lift_pause
from marshal_workers.admin.session import AdminError, AdminSession
from marshal_workers.common.errors import MarshalError
from marshal_workers.log.interface import LogError
from marshal_workers.protocol.members import is_claimable, is_live, is_member_key
from marshal_workers.protocol.metadata import (
    GroupSettings,
    describe_slicing,
    settings_records,
)
from marshal_workers.protocol.wire import ClaimKey

# Seconds a settings change's pause allows beyond its waits: recording the settings on every
# partition and folding them (`--change` and `--move` alike).
SETTLE_BUDGET_S = 30.0

Progress = Callable[[str], None]


def recorded(session: AdminSession, group: str) -> GroupSettings | None:
    """The group's settings as recorded (the first followed partition's), or None."""
    found = [
        w.group_settings[group]
        for _, w in sorted(session.worlds.items())
        if group in w.group_settings
    ]
    return found[0] if found else None


def describe(settings: GroupSettings) -> str:
    """The settings as one line."""
    ids = settings.admin_client_ids
    admins = "*" if ids is None else ",".join(sorted(ids)) or "(none)"
    return (
        f"heartbeat_interval={settings.heartbeat_interval_ms / 1000:g}s "
        f"partitioner={settings.partitioner.value} admin_client_ids={admins}"
        f"{'' if settings.slicing is None else ' ordering=' + describe_slicing(settings.slicing)}"
        f"{'' if settings.mode is None else ' mode=' + settings.mode.value}"
    )


def data_busy(session: AdminSession, group: str, hb_ms: int) -> list[ClaimKey]:
    """The group's data claims that could not be claimed now (judged with ``hb_ms``), this
    session's own aside."""
    now = session.now_ms()
    return sorted(
        key
        for world in session.worlds.values()
        for key, state in world.claims.items()
        if key.group == group
        and not is_member_key(key)
        and not is_claimable(state, now, hb_ms)
        and not session.holds(key)
    )


def live_members(session: AdminSession, group: str, hb_ms: int) -> set[tuple[ClaimKey, str]]:
    """The group's live member claims, with their holder instance."""
    now = session.now_ms()
    return {
        (key, state.holder_instance or "?")
        for world in session.worlds.values()
        for key, state in world.claims.items()
        if key.group == group and is_member_key(key) and is_live(state, now, hb_ms)
    }


def wait_until_none(
    session: AdminSession,
    busy: Callable[[], list[str]],
    timeout_s: float,
    what: str,
    progress: Progress,
) -> None:
    """Fold the log until ``busy()`` is empty (MarshalError after ``timeout_s``), saying what
    is still waited for whenever that changes."""
    deadline = session.monotonic() + timeout_s
    shown: list[str] | None = None
    while True:
        left = busy()
        if not left:
            return
        if left != shown:
            shown = left
            progress(f"waiting for {what}: {', '.join(left)}")
        remaining = deadline - session.monotonic()
        if remaining <= 0:
            raise MarshalError(f"gave up after {timeout_s:.0f}s waiting for {what}: {left}")
        session.poll(min(0.2, remaining))


def wait_for_holders(
    session: AdminSession, group: str, hb_ms: int, timeout_s: float, what: str, progress: Progress
) -> None:
    """Under this admin's pause: wait until every data claim of ``group`` is released or stale
    by ``hb_ms``; if they do not in ``timeout_s``, lift the pause and stop, nothing changed."""
    try:
        wait_until_none(
            session, lambda: [str(k) for k in data_busy(session, group, hb_ms)], timeout_s, what,
            progress,
        )  # fmt: skip
    except MarshalError as exc:
        lift_pause(session, group)
        raise MarshalError(f"{exc}; nothing changed; pause lifted") from None


def record_settings(
    session: AdminSession, settings: GroupSettings, partitions: Iterable[int] | None = None
) -> None:
    """Append ``settings`` to ``partitions`` in that order (else every partition the session
    follows: a placed group's home and window) as its records (`settings_records`), and fold
    up to each."""
    records = settings_records(settings)
    for p in sorted(session.worlds) if partitions is None else partitions:
        try:
            for key, value in records:
                appended = session.log.append(p, key, value, session.write_timeout_s)
                session.reader.wait_for(appended, session.fold_timeout_s)
        except LogError as exc:
            raise AdminError(f"recording the settings on partition {p}: {exc}") from None
