"""report.html: one self-contained page of plots and tables (PNG images inlined as base64).

- a timeline of claims per data partition, coloured by owner, with failovers and violations
  marked on it;
- a histogram of failover and handover durations;
- the longest heartbeat gap of each claim against HB and 2*HB;
- lag (or, without high watermarks, the committed position) over time per partition;
- the summary, the groups, the violations with their evidence, the failovers.

matplotlib runs with the Agg backend (no display needed). Sizes are capped so that a fleet
with thousands of partitions still gives a page a browser opens.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from marshal_workers.audit.model import LagPoint
from marshal_workers.audit.schema import columns
from marshal_workers.audit.summary import summarize
from marshal_workers.audit.tables import Row

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from marshal_workers.audit.model import AuditResult


MAX_TIMELINE_ROWS = 64
MAX_LAG_LINES = 24
LAG_BUCKETS = 300
MAX_TABLE_ROWS = 200


def lag_points(lag_rows: Iterable[Row], buckets: int = LAG_BUCKETS) -> list[LagPoint]:
    """The lag table reduced to at most ``buckets`` points per partition (the last of each)."""
    cols = columns("lag")
    ti, pi, tm, li, oi = (
        cols.index(c) for c in ("topic", "partition", "log_time_ms", "lag", "offset")
    )
    rows = list(lag_rows)
    if not rows:
        return []
    lo = min(int(r[tm]) for r in rows)
    hi = max(int(r[tm]) for r in rows)
    width = max(1, (hi - lo) // buckets + 1)
    last: dict[tuple[str, int, int], LagPoint] = {}
    for r in rows:
        t = int(r[tm])
        key = (str(r[ti]), int(r[pi]), (t - lo) // width)
        have = last.get(key)
        if have is None or t >= have[2]:
            last[key] = (key[0], key[1], t, r[li], int(r[oi]))
    return sorted(last.values())


def lag_points_spark(lag: DataFrame, buckets: int = LAG_BUCKETS) -> list[LagPoint]:
    """`lag_points` done by Spark on the written lag table (the last point of each bucket)."""
    bounds = lag.selectExpr("min(log_time_ms) AS lo", "max(log_time_ms) AS hi").collect()[0]
    if bounds["lo"] is None:
        return []
    lo, hi = int(bounds["lo"]), int(bounds["hi"])
    width = max(1, (hi - lo) // buckets + 1)
    reduced = lag.selectExpr(
        "topic", "partition", f"CAST((log_time_ms - {lo}) / {width} AS BIGINT) AS bucket",
        "struct(log_time_ms, lag, offset) AS point",
    ).groupBy("topic", "partition", "bucket").agg({"point": "max"})  # fmt: skip
    out = []
    for r in reduced.collect():
        point = r["max(point)"]
        out.append((r["topic"], int(r["partition"]), int(point[0]), point[1], int(point[2])))
    return sorted(out)


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _day(ms: float) -> float:
    """Unix ms as a matplotlib date number (days since 1970-01-01, its default epoch)."""
    return ms / 86_400_000


def _date_axis(ax: Any) -> None:
    import matplotlib.dates as mdates  # noqa: PLC0415

    locator = mdates.AutoDateLocator()  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
    ax.set_xlabel("log time (UTC)")


def _timeline(result: AuditResult, plt: Any) -> str | None:
    claims = result.tables["claims"]
    if not claims:
        return None
    cols = {c: i for i, c in enumerate(columns("claims"))}
    lanes: dict[tuple[str, str, int], list[Row]] = defaultdict(list)
    for r in claims:
        lanes[(str(r[cols["group"]]), str(r[cols["topic"]]), int(r[cols["partition"]]))].append(r)
    names = sorted(lanes)[:MAX_TIMELINE_ROWS]
    clients = sorted({str(r[cols["client_id"]]) for r in claims})
    cmap = plt.get_cmap("tab20" if len(clients) > 10 else "tab10")
    colour = {c: cmap(i % cmap.N) for i, c in enumerate(clients)}
    end = result.end_ms or max(int(r[cols["start_ms"]]) for r in claims)
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.32 * len(names)))
    for y, lane in enumerate(names):
        for r in lanes[lane]:
            start = int(r[cols["start_ms"]])
            stop = r[cols["end_ms"]]
            stop_ms = end if stop is None else int(stop)
            ax.barh(y, _day(max(stop_ms - start, 1)), left=_day(start), height=0.7,
                    color=colour[str(r[cols["client_id"]])], edgecolor="none")  # fmt: skip
    _mark_failovers(result, ax, names)
    _mark_violations(result, ax, names)
    ax.set_yticks(range(len(names)), [f"{g}/{t}/{p}" for g, t, p in names], fontsize=7)
    ax.invert_yaxis()
    _date_axis(ax)
    ax.set_title("Claims per partition, coloured by owner (x: failover, red +: violation)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[c]) for c in clients[:20]]
    ax.legend(handles, clients[:20], loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    return _png(fig)


def _mark_failovers(result: AuditResult, ax: Any, names: Sequence[tuple[str, str, int]]) -> None:
    cols = {c: i for i, c in enumerate(columns("failovers"))}
    lane = {name: y for y, name in enumerate(names)}
    for r in result.tables["failovers"]:
        y = lane.get((str(r[cols["group"]]), str(r[cols["topic"]]), int(r[cols["partition"]])))
        if y is not None and r[cols["kind"]] == "failover":
            ax.plot(_day(r[cols["claimed_ms"]]), y, "kx", markersize=6)


def _mark_violations(result: AuditResult, ax: Any, names: Sequence[tuple[str, str, int]]) -> None:
    cols = {c: i for i, c in enumerate(columns("violations"))}
    for r in result.violations[:MAX_TABLE_ROWS]:
        for y, (group, topic, partition) in enumerate(names):
            same = r[cols["topic"]] == topic and r[cols["partition"]] == partition
            if same and r[cols["group"]] in (group, None) and r[cols["start"]] is not None:
                ax.plot(_day(r[cols["start"]] * 1000), y, "r+", markersize=10, markeredgewidth=2)


def _bins(top: float, at_least: float, n: int = 40) -> list[float]:
    """``n`` equal bins from 0 to past the largest value and the reference lines."""
    right = max(top, at_least) * 1.05
    return [right * i / n for i in range(n + 1)]


def _failover_histogram(result: AuditResult, plt: Any) -> str | None:
    cols = {c: i for i, c in enumerate(columns("failovers"))}
    by_kind: dict[str, list[float]] = defaultdict(list)
    for r in result.tables["failovers"]:
        by_kind[str(r[cols["kind"]])].append(int(r[cols["duration_ms"]]) / 1000)
    if not by_kind:
        return None
    fig, ax = plt.subplots(figsize=(8, 3.5))
    kinds = sorted(by_kind)
    hb = result.config.heartbeat_interval_ms / 1000
    top = max(max(v) for v in by_kind.values())
    ax.hist([by_kind[k] for k in kinds], bins=_bins(top, 3 * hb), label=kinds, stacked=True)
    ax.axvline(2 * hb, color="grey", linestyle="--", label="2*HB")
    ax.set_xlabel("seconds from the old owner's last heartbeat (or release) to the new claim")
    ax.set_ylabel("claims")
    ax.set_title("Failovers and handovers")
    ax.legend()
    return _png(fig)


def _gap_histogram(result: AuditResult, plt: Any) -> str | None:
    cols = {c: i for i, c in enumerate(columns("heartbeat_gaps"))}
    gaps = [int(r[cols["max_gap_ms"]]) / 1000 for r in result.tables["heartbeat_gaps"]
            if r[cols["max_gap_ms"]] is not None]  # fmt: skip
    if not gaps:
        return None
    fig, ax = plt.subplots(figsize=(8, 3.5))
    hb = result.config.heartbeat_interval_ms / 1000
    ax.hist(gaps, bins=_bins(max(gaps), 2.5 * hb))
    ax.axvline(hb, color="orange", linestyle="--", label="HB (unknown from here)")
    ax.axvline(2 * hb, color="red", linestyle="--", label="2*HB (stale)")
    ax.set_xlabel("longest gap between valid heartbeats of a claim (s)")
    ax.set_ylabel("claims")
    ax.set_title("Heartbeat gaps")
    ax.legend()
    return _png(fig)


def _lag_plot(result: AuditResult, plt: Any) -> str | None:
    points = result.lag_points
    if not points:
        return None
    has_lag = any(p[3] is not None for p in points)
    lines: dict[tuple[str, int], list[LagPoint]] = defaultdict(list)
    for p in points:
        lines[(p[0], p[1])].append(p)
    fig, ax = plt.subplots(figsize=(12, 4))
    for (topic, partition), pts in sorted(lines.items())[:MAX_LAG_LINES]:
        pts.sort(key=lambda p: p[2])
        ys = [p[3] if has_lag else p[4] for p in pts]
        ax.plot([_day(p[2]) for p in pts], ys, label=f"{topic}/{partition}", linewidth=1)
    _date_axis(ax)
    ax.set_ylabel("lag (records)" if has_lag else "committed offset")
    title = "Lag against the high watermark at audit time" if has_lag else "Committed position"
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    return _png(fig)


def _table(title: str, name: str, rows: Sequence[Row]) -> str:
    cols = columns(name)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape('' if v is None else str(v))}</td>" for v in r)
        + "</tr>"
        for r in rows[:MAX_TABLE_ROWS]
    )
    more = (
        f"<p>{len(rows) - MAX_TABLE_ROWS} more rows in the Parquet table.</p>"
        if len(rows) > MAX_TABLE_ROWS
        else ""
    )
    return f"<h2>{html.escape(title)} ({len(rows)})</h2><table><tr>{head}</tr>{body}</table>{more}"


_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 12px; margin-bottom: 1em; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; } img { max-width: 100%; } .bad { color: #b00; } .ok { color: #070; }
pre { background: #f6f6f6; padding: 1em; }
"""


def render(result: AuditResult) -> str:
    """The report page as one HTML string."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    summary = summarize(result)
    verdict = (
        f"<p class='bad'><b>{summary['violations']} violation(s) found.</b></p>"
        if summary["violations"]
        else "<p class='ok'><b>No violations.</b></p>"
    )
    parts = [f"<h1>marshal-audit: {html.escape(str(result.config.source))}</h1>", verdict]
    plots = [
        _timeline(result, plt), _failover_histogram(result, plt),
        _gap_histogram(result, plt), _lag_plot(result, plt),
    ]  # fmt: skip
    plt.close("all")
    parts += [f"<p><img src='data:image/png;base64,{p}'></p>" for p in plots if p]
    parts.append(f"<h2>Summary</h2><pre>{html.escape(json.dumps(summary, indent=2))}</pre>")
    parts.append(_table("Violations", "violations", result.violations))
    parts.append(_table("Groups", "groups", result.tables["groups"]))
    parts.append(_table("Failovers and handovers", "failovers", result.tables["failovers"]))
    parts.append(
        _table("Poison records: failures, parked, retried, skipped", "poison",
               result.tables.get("poison", []))
    )  # fmt: skip
    parts.append(_table("Claims", "claims", result.tables["claims"]))
    body = "\n".join(parts)
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>marshal-audit</title>"
        f"<style>{_STYLE}</style></head><body>{body}</body></html>"
    )


def write_report(result: AuditResult, path: Path) -> Path:
    """Write report.html; return its path."""
    path.write_text(render(result), "utf-8")
    return path
