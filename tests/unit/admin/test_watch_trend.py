"""`status --watch`'s lag trend spans a heartbeat: a member's position moves only with its
heartbeats (every HB/2), so a watch refreshed more often than that compares with a refresh at
least HB/2 old, and a partition that moves is never shown steady ('=')."""

from __future__ import annotations

from typing import Any

import pytest

from marshal_workers.admin import status_watch as watch
from marshal_workers.admin.connection import Connection
from marshal_workers.protocol.groupstatus import ClaimStatus, GroupStatus

HB_MS = 10_000


class Clock:
    """The watch's time: each sleep moves it on."""

    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def monotonic(self) -> float:
        return self.now


class Reader:
    """A partition draining a backlog of 1,000 records at 10 a second, nothing produced: its
    member heartbeats its position every HB/2 = 5 s, so the lag the log shows drops by 50 at
    each heartbeat and stands still between."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def refresh(self) -> GroupStatus:
        t = self.clock.now
        committed = int(10 * (t // 5) * 5)  # the position of the last heartbeat
        claim = ClaimStatus("orders", 0, "c1", "i1", "fresh", committed, None, 1, None,
                            1000 - committed, True)  # fmt: skip
        return GroupStatus("g", int(t * 1000), (claim,), None, None, 0)

    def close(self) -> None:
        pass


def trends(monkeypatch: pytest.MonkeyPatch, interval_s: float, count: int) -> list[str]:
    clock = Clock()
    monkeypatch.setattr(watch, "StatusReader", lambda conn, group, timeout: Reader(clock))
    out: list[Any] = []
    conn = Connection("127.0.0.1:1", heartbeat_interval_ms=HB_MS)
    watch.watch_status(conn, "g", interval_s=interval_s, count=count, timeout_s=1,
                       as_json=True, tty=False, out=out.append, sleep=clock.sleep,
                       monotonic=clock.monotonic)  # fmt: skip
    import json  # noqa: PLC0415

    return [json.loads(line)["claims"][0]["lag_trend"] for line in out]


def test_a_watch_faster_than_hb_2_never_shows_a_moving_partition_steady(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Refreshed every second with HB = 10 s: past the first HB/2 every trend spans a
    heartbeat and so never reads '=' for a partition that is being drained."""
    seen = trends(monkeypatch, 1.0, 16)
    assert seen[0] == "-"
    assert "=" not in seen[6:], seen


def test_a_watch_slower_than_hb_2_compares_with_the_last_refresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Refreshed every 6 s (more than HB/2): each trend is against the refresh before."""
    seen = trends(monkeypatch, 6.0, 4)
    assert seen[0] == "-" and all(t != "-" for t in seen[1:])
