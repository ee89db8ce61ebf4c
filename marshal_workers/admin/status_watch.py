"""`marshal-admin status --watch [SECONDS]`: the status table, refreshed, with lag trends.

On a terminal each refresh replaces the last (the screen is cleared and the table drawn from
the top, as `watch` does); anywhere else (a pipe, a file, a log) each refresh is appended after
a blank line, never cleared. Each refresh folds only what arrived in the coordination log since
the last one (`StatusReader`) and shows, per partition, how its lag moved since the previous
refresh, in records and records per second: how an operator watches a rebalance or a failover
drain. The log shows a member's position only as of its last heartbeat (every HB/2), so a trend
compares with the newest refresh at least HB/2 old (`LagHistory`): between two refreshes closer
than that a partition being drained would show '=' though it moves. With ``--json`` each
refresh is one JSON object per line, each claim with its ``lag_trend``. ``--count N`` stops
after N refreshes; Ctrl-C stops at any time (exit 0).
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable

from marshal_workers.admin.connection import Connection
from marshal_workers.admin.status_read import StatusReader
from marshal_workers.protocol.groupstatus import lag_trends, lags, render_table

CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen


def watch_status(
    conn: Connection,
    group: str,
    *,
    interval_s: float,
    count: int | None,
    timeout_s: float,
    as_json: bool,
    tty: bool,
    out: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> None:
    """Refresh ``count`` times (None: until interrupted), ``interval_s`` apart."""
    reader = StatusReader(conn, group, timeout_s)
    history = LagHistory(conn.heartbeat_interval_ms / 2000)
    refreshes = 0
    try:
        while True:
            status = reader.refresh()
            at = monotonic()
            previous_at, previous = history.baseline(at)
            trends = lag_trends(previous, status, at - previous_at)
            if as_json:
                data = status.to_json()
                for claim in data["claims"]:  # type: ignore[attr-defined]
                    claim["lag_trend"] = trends.get((claim["topic"], claim["partition"]), "-")
                out(json.dumps(data))
            else:
                table = f"every {interval_s:g}s\n{render_table(status, trends)}"
                out(CLEAR + table if tty else table + "\n")
            history.add(at, lags(status))
            refreshes += 1
            if count is not None and refreshes >= count:
                return
            sleep(interval_s)
    finally:
        reader.close()


Lags = dict[tuple[str, int], int | None]


class LagHistory:
    """The lags of the recent refreshes, to compare the next one with."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s  # HB/2: the log shows a position once per heartbeat
        self._samples: deque[tuple[float, Lags]] = deque()

    def add(self, at: float, lags: Lags) -> None:
        """A refresh's lags at ``at``; those no baseline needs any more are dropped."""
        self._samples.append((at, lags))
        while len(self._samples) > 1 and at - self._samples[1][0] >= self.window_s:
            self._samples.popleft()

    def baseline(self, at: float) -> tuple[float, Lags]:
        """What a refresh at ``at`` compares with: the newest refresh at least HB/2 before
        it, else the oldest there is (the watch's first HB/2); nothing on the first."""
        if not self._samples:
            return at, {}
        older = [s for s in self._samples if at - s[0] >= self.window_s]
        return older[-1] if older else self._samples[0]
