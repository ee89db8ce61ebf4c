"""`marshal-admin status --watch [SECONDS]`: the status table, refreshed, with lag trends.

On a terminal each refresh replaces the last (the screen is cleared and the table drawn from
the top, as `watch` does); anywhere else (a pipe, a file, a log) each refresh is appended
after a blank line, never cleared. Each refresh folds only what arrived in the coordination log
since the last one (`StatusReader`) and shows, per partition, how its lag moved since the
previous refresh, in records and records per second: how an operator watches a rebalance or a
failover drain. With ``--json`` each refresh is one JSON object per line, each claim with its
``lag_trend``. ``--count N`` stops after N refreshes; Ctrl-C stops at any time (exit 0).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from marshal_workers.admin.operations import Connection
from marshal_workers.admin.statusread import StatusReader
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
    previous: dict[tuple[str, int], int | None] | None = None
    previous_at = 0.0
    refreshes = 0
    try:
        while True:
            status = reader.refresh()
            at = monotonic()
            trends = lag_trends(previous or {}, status, at - previous_at)
            if as_json:
                data = status.to_json()
                for claim in data["claims"]:  # type: ignore[attr-defined]
                    claim["lag_trend"] = trends.get((claim["topic"], claim["partition"]), "-")
                out(json.dumps(data))
            else:
                table = f"every {interval_s:g}s\n{render_table(status, trends)}"
                out(CLEAR + table if tty else table + "\n")
            previous, previous_at = lags(status), at
            refreshes += 1
            if count is not None and refreshes >= count:
                return
            sleep(interval_s)
    finally:
        reader.close()
