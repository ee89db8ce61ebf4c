"""report.html: one self-contained page of plots and tables (PNG images inlined as base64).

- a timeline of claims per data partition, coloured by owner, with failovers, AMO losses and
  violations marked on it;
- a histogram of failover and handover durations;
- the longest heartbeat gap of each claim against HB and 2*HB;
- lag (or, without high watermarks, the committed position) over time per partition;
- the summary (a table), the violations with their evidence, the AMO losses, the poison
  records, the groups, the failovers and the claims; an empty one is a sentence.

Times are for a person: UTC clock times with the seconds since the first claim shown
(``22:13:23.520 (+3.52 s)``), never Unix milliseconds; durations in seconds; a column whose
cells are so shown is headed without its ``_ms``. Both time charts have one axis, seconds since
the first claim shown, over the same range, so they line up.

matplotlib runs with the Agg backend (no display needed). Sizes are capped so that a fleet
with thousands of partitions still gives a page a browser opens.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from marshal_workers.audit.checks import unledgered_note
from marshal_workers.audit.model import LagPoint
from marshal_workers.audit.schema import columns
from marshal_workers.audit.slices import SLICE_COLUMNS, slice_summary
from marshal_workers.audit.summary import summarize
from marshal_workers.audit.tables import Row
from marshal_workers.protocol.groupstatus import iso_ms
from marshal_workers.protocol.slicing import split_topic

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


class Clock:
    """Log times for a person: UTC clock times and seconds since the first claim shown.

    The origin is the earliest claim the report shows, not the log's first record: a
    coordination topic that other groups (or weeks of compacted history) used before would
    otherwise leave every chart empty up to that claim."""

    def __init__(self, start_ms: int, end_ms: int, log_start_ms: int | None = None) -> None:
        self.start_ms, self.end_ms = start_ms, max(end_ms, start_ms)
        self.log_start_ms = start_ms if log_start_ms is None else log_start_ms
        day = datetime.fromtimestamp(min(start_ms, self.log_start_ms) / 1000, tz=UTC).date()
        self.one_day = datetime.fromtimestamp(self.end_ms / 1000, tz=UTC).date() == day

    @classmethod
    def of(cls, result: AuditResult) -> Clock:
        """The clock of an audit: from the first claim shown (else the log's first record) to
        the log's end (or ``--until``); for one group (``--group``) whose claims had all
        ended by then, to its last claim's end: the rest of the log is other groups' time."""
        firsts = [int(r[columns("coordination").index("first_log_time_ms")])
                  for r in result.tables["coordination"]]  # fmt: skip
        log_start = min(firsts, default=result.end_ms or 0)
        cols = columns("claims")
        i, j = cols.index("start_ms"), cols.index("end_ms")
        claims = result.tables["claims"]
        starts = [int(r[i]) for r in claims if r[i] is not None]
        start = min(starts, default=log_start)
        end = result.end_ms if result.end_ms is not None else start
        if result.config.window.group is not None and claims:
            ends = [r[j] for r in claims]
            if all(e is not None for e in ends):
                end = min(end, max(int(e) for e in ends))
        return cls(start, end, log_start)

    def seconds(self, ms: float) -> float:
        """Seconds since the first claim shown."""
        return (ms - self.start_ms) / 1000

    def span_s(self) -> float:
        """The time shown in seconds (at least 1, so that an axis has a width)."""
        return max(self.seconds(self.end_ms), 1.0)

    def clock(self, ms: float) -> str:
        """``HH:MM:SS.mmm`` (with the date if the log spans days), UTC."""
        stamp = datetime.fromtimestamp(ms / 1000, tz=UTC)
        text = stamp.strftime("%H:%M:%S.") + f"{int(ms) % 1000:03d}"
        return text if self.one_day else f"{stamp:%Y-%m-%d} {text}"

    def at(self, ms: float) -> str:
        """A log time as ``22:13:23.520 (+3.52 s)``."""
        return f"{self.clock(ms)} (+{self.seconds(ms):.2f} s)"

    def origin(self) -> str:
        """The origin as ``2026-11-27 02:44:37.495 UTC``."""
        return f"{(iso_ms(self.start_ms) or '').replace('T', ' ').rstrip('Z')} UTC"

    def axis_label(self) -> str:
        """The label of every time axis."""
        return f"seconds since the first claim shown, {self.origin()}"


def _time_axis(ax: Any, clock: Clock) -> None:
    """One time axis: seconds since the first claim shown, to the log's end (no offset
    text)."""
    ax.set_xlim(0, clock.span_s())
    ax.ticklabel_format(axis="x", style="plain", useOffset=False)
    ax.set_xlabel(clock.axis_label())


def timeline_figure(result: AuditResult, plt: Any) -> Any:
    """Claims per partition over the log's time (None: no claim)."""
    claims = result.tables["claims"]
    if not claims:
        return None
    cols = {c: i for i, c in enumerate(columns("claims"))}
    lanes: dict[tuple[str, str, int], list[Row]] = defaultdict(list)
    for r in claims:
        lanes[(str(r[cols["group"]]), str(r[cols["topic"]]), int(r[cols["partition"]]))].append(r)
    names = sorted(lanes, key=lane_order)[:MAX_TIMELINE_ROWS]
    clients = sorted({str(r[cols["client_id"]]) for r in claims})
    cmap = plt.get_cmap("tab20" if len(clients) > 10 else "tab10")
    colour = {c: cmap(i % cmap.N) for i, c in enumerate(clients)}
    clock = Clock.of(result)
    end = result.end_ms or max(int(r[cols["start_ms"]]) for r in claims)
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.32 * len(names)))
    for y, lane in enumerate(names):
        for r in lanes[lane]:
            start = int(r[cols["start_ms"]])
            stop = r[cols["end_ms"]]
            stop_ms = end if stop is None else int(stop)
            ax.barh(y, max(stop_ms - start, 1) / 1000, left=clock.seconds(start), height=0.7,
                    color=colour[str(r[cols["client_id"]])], edgecolor="none")  # fmt: skip
    _mark_failovers(result, ax, names, clock)
    _mark_losses(result, ax, names, clock)
    _mark_violations(result, ax, names, clock)
    ax.set_yticks(range(len(names)), [lane_label(name) for name in names], fontsize=7)
    ax.invert_yaxis()
    _time_axis(ax, clock)
    ax.set_title(
        "Claims per partition, coloured by owner "
        "(x: failover, orange v: AMO loss, red +: violation)"
    )
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[c]) for c in clients[:20]]
    ax.legend(handles, clients[:20], loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    return fig


Lanes = Sequence[tuple[str, str, int]]


def _mark_failovers(result: AuditResult, ax: Any, names: Lanes, clock: Clock) -> None:
    cols = {c: i for i, c in enumerate(columns("failovers"))}
    lane = {name: y for y, name in enumerate(names)}
    for r in result.tables["failovers"]:
        y = lane.get((str(r[cols["group"]]), str(r[cols["topic"]]), int(r[cols["partition"]])))
        if y is not None and r[cols["kind"]] == "failover":
            ax.plot(clock.seconds(r[cols["claimed_ms"]]), y, "kx", markersize=6)


def _mark_losses(result: AuditResult, ax: Any, names: Lanes, clock: Clock) -> None:
    cols = {c: i for i, c in enumerate(columns("amo_losses"))}
    lane = {name: y for y, name in enumerate(names)}
    for r in result.tables.get("amo_losses", []):
        y = lane.get((str(r[cols["group"]]), str(r[cols["topic"]]), int(r[cols["partition"]])))
        if y is not None and r[cols["lost_ms"]] is not None:
            ax.plot(clock.seconds(r[cols["lost_ms"]]), y - 0.3, "v", color="darkorange",
                    markersize=6)  # fmt: skip


def _mark_violations(result: AuditResult, ax: Any, names: Lanes, clock: Clock) -> None:
    cols = {c: i for i, c in enumerate(columns("violations"))}
    for r in result.violations[:MAX_TABLE_ROWS]:
        if r[cols["start"]] is None:
            continue
        x = clock.seconds(r[cols["start"]] * 1000)
        for y in violation_lanes(r, names):
            ax.plot(x, y, "r+", markersize=10, markeredgewidth=2)


def lane_order(lane: tuple[str, str, int]) -> tuple[str, str, int, int, str]:
    """Timeline lanes (group, claim topic, partition): a partition's slices under it, by index."""
    group, topic, partition = lane
    data, part = split_topic(topic)
    return group, data, partition, -1 if part is None else part.index, topic


def lane_label(lane: tuple[str, str, int]) -> str:
    """``group/topic/partition``, and the slice for a slice's lane: ``g/orders/0 key.3of8``."""
    group, topic, partition = lane
    data, part = split_topic(topic)
    return f"{group}/{data}/{partition}" + ("" if part is None else f" {part.name}")


def violation_lanes(row: Row, names: Lanes) -> list[int]:
    """The lanes a violation is marked on: its claim's (its slice's; an ALO gap of a whole key
    cut, every slice of the partition)."""
    cols = {c: i for i, c in enumerate(columns("violations"))}
    group, topic, partition, name = (row[cols[c]] for c in ("group", "topic", "partition", "slice"))
    claim = topic if name is None else f"{topic}+{name}"
    out = []
    for y, (g, t, p) in enumerate(names):
        if p != partition or group not in (g, None):
            continue
        data, part = split_topic(t)
        of_cut = part is not None and name == f"{part.ordering.value}.*of{part.count}"
        if t == claim or (of_cut and data == topic):
            out.append(y)
    return out


def _bins(top: float, at_least: float, n: int = 40) -> list[float]:
    """``n`` equal bins from 0 to past the largest value and the reference lines."""
    right = max(top, at_least) * 1.05
    return [right * i / n for i in range(n + 1)]


def _hb_s(result: AuditResult) -> float:
    """The heartbeat interval the histograms mark: the reported group's (--group), else the
    default (the one interval the recorded groups share, when they share one)."""
    group = result.config.window.group
    if group is not None:
        return result.config.group_heartbeat_ms(group) / 1000
    return result.config.heartbeat_interval_ms / 1000


def _count_axis(ax: Any) -> None:
    """Counts of claims: whole numbers on the y axis (no "0.25 claims")."""
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("claims")


def _failover_histogram(result: AuditResult, plt: Any) -> str | None:
    cols = {c: i for i, c in enumerate(columns("failovers"))}
    by_kind: dict[str, list[float]] = defaultdict(list)
    for r in result.tables["failovers"]:
        by_kind[str(r[cols["kind"]])].append(int(r[cols["duration_ms"]]) / 1000)
    if not by_kind:
        return None
    fig, ax = plt.subplots(figsize=(8, 3.5))
    kinds = sorted(by_kind)
    hb = _hb_s(result)
    top = max(max(v) for v in by_kind.values())
    ax.hist([by_kind[k] for k in kinds], bins=_bins(top, 3 * hb), label=kinds, stacked=True)
    ax.axvline(2 * hb, color="grey", linestyle="--", label="2*HB")
    ax.set_xlabel("seconds from the old owner's last heartbeat (or release) to the new claim")
    _count_axis(ax)
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
    hb = _hb_s(result)
    ax.hist(gaps, bins=_bins(max(gaps), 2.5 * hb))
    ax.axvline(hb, color="orange", linestyle="--", label="HB (unknown from here)")
    ax.axvline(2 * hb, color="red", linestyle="--", label="2*HB (stale)")
    ax.set_xlabel("longest gap between valid heartbeats of a claim (s)")
    _count_axis(ax)
    ax.set_title("Heartbeat gaps")
    ax.legend()
    return _png(fig)


def lag_figure(result: AuditResult, plt: Any) -> Any:
    """Lag (or the committed position) per partition over the log's time (None: no point)."""
    points = result.lag_points
    if not points:
        return None
    has_lag = any(p[3] is not None for p in points)
    lines: dict[tuple[str, int], list[LagPoint]] = defaultdict(list)
    for p in points:
        lines[(p[0], p[1])].append(p)
    clock = Clock.of(result)
    fig, ax = plt.subplots(figsize=(12, 4))
    for (topic, partition), pts in sorted(lines.items())[:MAX_LAG_LINES]:
        pts.sort(key=lambda p: p[2])
        ys = [p[3] if has_lag else p[4] for p in pts]
        xs = [clock.seconds(p[2]) for p in pts]
        ax.plot(xs, ys, label=f"{topic}/{partition}", linewidth=1)
    _time_axis(ax, clock)
    ax.set_ylabel("lag (records)" if has_lag else "committed offset")
    title = "Lag against the high watermark at audit time" if has_lag else "Committed position"
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    return fig


_DURATIONS = frozenset({"duration_ms", "max_gap_ms", "mean_gap_ms"})
_UNIX_SECONDS = frozenset({"start", "end"})  # the ledger's times (violations)


def _header(column: str) -> str:
    """A column's name as a heading: without ``_ms`` where its cells are clock times or
    seconds (a heading "start_ms" over "02:44:37.495 (+0.00 s)" reads as a mistake)."""
    return column.removesuffix("_ms")


def _cell(column: str, value: Any, clock: Clock) -> str:
    """A value as a person reads it: log times as clock times, durations in seconds."""
    if value is None:
        return ""
    if column in _DURATIONS:
        return f"{float(value) / 1000:.3f} s"
    if column.endswith("_ms"):
        return clock.at(float(value))
    if column in _UNIX_SECONDS and isinstance(value, int | float):
        return clock.at(float(value) * 1000)
    if column == "evidence":
        return _evidence(str(value), clock)
    return str(value)


def _evidence(text: str, clock: Clock) -> str:
    """A violation's evidence (JSON) with its times as clock times."""

    def readable(item: Any, key: str = "") -> Any:
        if isinstance(item, dict):
            return {k: readable(v, k) for k, v in item.items()}
        if isinstance(item, list):
            return [readable(v, key) for v in item]
        if isinstance(item, int | float) and not isinstance(item, bool):
            if key.endswith("_ms"):
                return clock.at(float(item))
            if key in _UNIX_SECONDS:
                return clock.at(float(item) * 1000)
        return item

    try:
        return json.dumps(readable(json.loads(text)), sort_keys=True)
    except ValueError:
        return text


def _table(title: str, name: str, rows: Sequence[Row], clock: Clock, empty: str) -> str:
    """A table with a heading, or ``empty`` (a sentence) if it has no row."""
    if not rows:
        return f"<h2>{html.escape(title)}</h2><p>{html.escape(empty)}</p>"
    cols = columns(name)
    head = "".join(f"<th>{html.escape(_header(c))}</th>" for c in cols)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(_cell(c, v, clock))}</td>" for c, v in zip(cols, r, strict=True)
        )
        + "</tr>"
        for r in rows[:MAX_TABLE_ROWS]
    )
    more = (
        f"<p>{len(rows) - MAX_TABLE_ROWS} more rows in the Parquet table.</p>"
        if len(rows) > MAX_TABLE_ROWS
        else ""
    )
    return f"<h2>{html.escape(title)} ({len(rows)})</h2><table><tr>{head}</tr>{body}</table>{more}"


def _slices_table(result: AuditResult) -> str:
    """A partition's slices with their holders (only for groups with ordering key or
    unordered; the claims table has every interval)."""
    rows = slice_summary(result.tables["claims"])
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in SLICE_COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape('' if v is None else str(v))}</td>" for v in r)
        + "</tr>"
        for r in rows[:MAX_TABLE_ROWS]
    )  # fmt: skip
    return (
        f"<h2>Slices of partitions ({len(rows)})</h2><p>Ordering key or unordered: each slice "
        "of a partition is claimed on its own (the claims table names it in its topic: "
        f"orders+key.3of8).</p><table><tr>{head}</tr>{body}</table>"
    )


def _counts(counts: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "none"


def _summary_rows(summary: Mapping[str, Any], clock: Clock) -> list[tuple[str, str]]:
    """The summary as (label, value) lines a person reads."""
    s = summary
    intervals = s.get("heartbeat_intervals_ms") or {}
    beats = ", ".join(f"{g} {ms / 1000:g} s" for g, ms in intervals.items())
    fo = s["failover_ms"]
    failovers = str(s["failovers"])
    if fo is not None:
        failovers += (
            f" (old holder's last heartbeat to new claim: min {fo['min'] / 1000:.3f} s, "
            f"median {fo['median'] / 1000:.3f} s, max {fo['max'] / 1000:.3f} s)"
        )
    gap = s["max_heartbeat_gap_ms"]
    losses, poison, ledger = s["amo_losses"], s["poison"], s["ledger"]
    rows = [
        ("Input", str(s["input"])),
        ("Log", f"{clock.clock(clock.log_start_ms)} to {clock.clock(clock.end_ms)} UTC "
                f"({(clock.end_ms - clock.log_start_ms) / 1000:.1f} s), from {s['log_start']}"),
        ("Records", str(s["records"])),
        ("Coordination partitions", str(s["coordination_partitions"])),
        ("Malformed / unverified records", f"{s['malformed']} / {s['unverified']}"),
        ("Heartbeat interval", beats or f"{s['heartbeat_interval_ms'] / 1000:g} s"),
        ("Groups", ", ".join(f"{g['group']} ({g['mode']})" for g in s["groups"]) or "none"),
        ("Claims", f"{s['claims']} ({_counts(s['claims_ended'])})"),
        ("Clients", ", ".join(s["clients"]) or "none"),
        ("Partitions claimed", str(s["partitions_claimed"])),
        ("Members", str(s["members"])),
        ("Failovers", failovers),
        ("Handovers", str(s["handovers"])),
        ("Longest heartbeat gap", "none" if gap is None else f"{gap / 1000:.3f} s"),
        ("AMO reservations", str(s["reservations"])),
        ("AMO losses", f"{losses['records']} records in {losses['ranges']} ranges"
                       + (f" ({_counts(losses['by_cause'])})" if losses["ranges"] else "")),
        ("Poison records", f"{poison['records']} (failures {poison['failures']}, parked "
                           f"{poison['parked']}, retried {poison['retried']}, skipped "
                           f"{poison['skipped']}, still parked {poison['parked_at_end']})"),
        ("Ledger", "none given" if ledger is None else
         f"{ledger['rows']} rows, {ledger['checked']} checked, {ledger['unverifiable']} "
         f"unverifiable, {ledger['incomplete_lines']} incomplete lines, "
         f"{ledger['alo_redeliveries']} ALO redeliveries"
         + (f"; {unledgered_note(ledger['groups_without_rows'])}"
            if ledger.get("groups_without_rows") else "")),
        ("Violations", f"{s['violations']}"
                       + (f" ({_counts(s['violations_by_kind'])})" if s["violations"] else "")),
        ("Verdicts", _counts(s["verdicts"])),
    ]  # fmt: skip
    return rows


def _summary_table(summary: Mapping[str, Any], clock: Clock) -> str:
    lines = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
        for k, v in _summary_rows(summary, clock)
    )
    return f"<table class='summary'>{lines}</table>"


def _has_amo(result: AuditResult) -> bool:
    """Whether a group of the audit runs at most once (or none is known)."""
    modes = {str(r[columns("groups").index("mode")]) for r in result.tables["groups"]}
    return not result.tables["groups"] or "amo" in modes


def _no_losses(result: AuditResult) -> str:
    if not _has_amo(result):
        return "No AMO losses: no group in this audit runs at most once (AMO)."
    if result.check is None:
        return (
            "No AMO records at risk: no holder stopped without releasing after a reservation, "
            "and no release left reserved records behind (give the ledger to know for sure)."
        )
    return (
        "No AMO losses: the ledger shows every reserved record handled (a holder still at "
        "work on its last batch has lost nothing yet)."
    )


def _no_violations(result: AuditResult) -> str:
    check = result.check
    if check is None:
        return (
            "No violations: no ledger was given, and the log alone cannot show one "
            "(the fold refuses every invalid record)."
        )
    return (
        f"No violations: the {check.checked} ledger rows checked show no zombie work, no "
        "overlap, no AMO record handled twice and no ALO record left unhandled."
    )


# Each chart's alt text (what it shows, for whoever cannot see it) and caption (how to read it).
_FIGURE_TEXT: Mapping[str, tuple[str, str]] = {
    "timeline": (
        "Timeline: one row per partition, a bar for each claim coloured by the client that "
        "held it, with marks for failovers, AMO losses and violations.",
        "Claims per partition over the audited time, coloured by owner. A gap between two bars "
        "is time nobody held the partition; x marks a failover (the new claim), an orange v "
        "an AMO loss, a red + a violation (see the tables below).",
    ),
    "failovers": (
        "Histogram of failover and handover durations, stacked by kind, with the 2*HB line.",
        "Seconds from the old owner's last heartbeat (or release) to the new claim: a "
        "graceful handover lands near 0, a failover after a crash near 2*HB (dashed line).",
    ),
    "gaps": (
        "Histogram of the longest gap between valid heartbeats of each claim, with HB and "
        "2*HB lines.",
        "The longest silence of each claim: below HB (orange) its holder was fresh; a claim "
        "past 2*HB (red) was stale and could be taken.",
    ),
    "lag": (
        "Line chart of each partition's lag (or committed position) over the audited time.",
        "Lag against each partition's high watermark at audit time (or, without it, the "
        "committed position) as the heartbeats reported it, on the timeline's time axis.",
    ),
}


def _figure(png: str, alt: str, caption: str) -> str:
    """One chart as a figure: the image with its alt text, and its caption."""
    return (
        f"<figure><img src='data:image/png;base64,{png}' alt='{html.escape(alt, quote=True)}'>"
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 12px; margin-bottom: 1em; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; } img { max-width: 100%; } .bad { color: #b00; } .ok { color: #070; }
table.summary th { text-align: right; }
figure { margin: 1em 0; } figcaption { font-size: 13px; color: #444; max-width: 60em; }
"""


def render(result: AuditResult) -> str:
    """The report page as one HTML string."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    summary = summarize(result)
    clock = Clock.of(result)
    verdict = (
        f"<p class='bad'><b>{summary['violations']} violation(s) found.</b></p>"
        if summary["violations"]
        else "<p class='ok'><b>No violations.</b></p>"
    )
    when = (
        f"<p>Times are UTC clock times, with the seconds since the first claim shown "
        f"({html.escape(clock.origin())}) in brackets.</p>"
    )
    group = result.config.window.group
    title = f"{result.config.source}{'' if group is None else f', group {group}'}"
    parts = [f"<h1>marshal-audit: {html.escape(title)}</h1>", verdict, when]
    figures = [timeline_figure(result, plt), lag_figure(result, plt)]
    plots = [
        (_png(figures[0]) if figures[0] is not None else None, *_FIGURE_TEXT["timeline"]),
        (_failover_histogram(result, plt), *_FIGURE_TEXT["failovers"]),
        (_gap_histogram(result, plt), *_FIGURE_TEXT["gaps"]),
        (_png(figures[1]) if figures[1] is not None else None, *_FIGURE_TEXT["lag"]),
    ]
    plt.close("all")
    parts += [_figure(png, alt, caption) for png, alt, caption in plots if png]
    parts.append(f"<h2>Summary</h2>{_summary_table(summary, clock)}")
    t = result.tables
    parts += [
        _table("Violations", "violations", result.violations, clock, _no_violations(result)),
        _table("AMO losses" if result.check is not None or not _has_amo(result)
               else "AMO records at risk (no ledger)",
               "amo_losses", t.get("amo_losses", []), clock, _no_losses(result)),
        _table("Poison records: failures, parked, retried, skipped", "poison",
               t.get("poison", []), clock,
               "No poison records: no handler failure was counted in the log."),
        _table("Groups", "groups", t["groups"], clock, "No group in the log."),
        _table("Failovers and handovers", "failovers", t["failovers"], clock,
               "No failovers or handovers: no partition changed hands."),
        _slices_table(result),
        _table("Claims", "claims", t["claims"], clock, "No claim in the log."),
    ]  # fmt: skip
    body = "\n".join(parts)
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>marshal-audit</title>"
        f"<style>{_STYLE}</style></head><body>{body}</body></html>"
    )


def write_report(result: AuditResult, path: Path) -> Path:
    """Write report.html; return its path."""
    path.write_text(render(result), "utf-8")
    return path
