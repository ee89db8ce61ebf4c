"""The tables and the plot of `bench/hot.py`, from its JSON document (``summary``: per handler,
system and N, medians over rounds, with `compare`'s ratios; ``faults``: one run per system and
fault)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hot_setup import CHILD_READS, SHARE, ordering_of

NAMES = {
    "partition": "marshal partition (ALO)",
    "unordered": "marshal unordered",
    "key": "marshal key",
    "unordered-child": "marshal unordered, child reads",
    "key-child": "marshal key, child reads",
    "share-default": "share group, defaults",
    "share-tuned": "share group, tuned",
    "plain": "plain loop",
}
COLORS = {
    "partition": "#c0392b",
    "unordered": "tab:blue",
    "key": "tab:orange",
    "unordered-child": "tab:blue",
    "key-child": "tab:orange",
    "share-default": "tab:green",
    "share-tuned": "tab:purple",
    "plain": "#555555",
}


def label(doc: dict[str, Any], system: str) -> str:
    """The system's name in tables and the plot; where marshal-run has ``--slice-reads``, the
    ordering systems without ``-child`` are its host reads (`hot_setup.launch` passes it)."""
    if system in ("unordered", "key") and doc.get("slice_reads_available"):
        return f"{NAMES[system]}, host reads"
    return NAMES[system]


def compare(summary: dict[str, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per handler, system and N: ``to_best_share``, its records/s over the better of the two
    share groups' at the same handler and N (none for the share groups themselves, or where
    neither ran); ``reads_per_record``, the bytes the broker sent its workers per handled record
    over the plain loop's (which reads the partition once) with the same handler, else with
    any (none where the plain loop did not run)."""
    once = {_split_key(k)[0]: row["worker_bytes_per_record"] for k, row in summary.items()
            if _split_key(k)[1] == "plain" and row.get("worker_bytes_per_record")}  # fmt: skip
    out: dict[str, dict[str, float | None]] = {}
    for name, row in summary.items():
        handler, system, n = _split_key(name)
        shares = [summary.get(f"{handler}/{s}/{n}", {}).get("records_per_s") for s in SHARE]
        best = max((x for x in shares if x), default=None)
        rate = row.get("records_per_s")
        plain = once.get(handler, next(iter(once.values()), None))
        received = row.get("worker_bytes_per_record")
        out[name] = {
            "to_best_share": rate / best if rate and best and system not in SHARE else None,
            "reads_per_record": received / plain if received is not None and plain else None,
        }
    return out


def _cpu_note(doc: dict[str, Any]) -> str:
    """How the cpu handler's loop count was set: calibrated for ``cpu_us``, or given."""
    cpu_us = doc.get("cpu_us")
    return f"~{cpu_us:g} µs" if cpu_us is not None else "as given"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _markdown(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"
             for r in rows]  # fmt: skip
    lines.insert(1, "| " + " | ".join("-" * w for w in widths) + " |")
    return lines


def _split_key(name: str) -> tuple[str, str, int]:
    handler, system, n = name.split("/")
    return handler, system, int(n)


def table(doc: dict[str, Any]) -> str:
    """Markdown: the runs (records/s, latency from append, handled twice, processes that
    handled), then the fault runs."""
    rows = [["handler", "system", "N", "records/s", "x best share", "p50 append→handled", "p99",
             "handled twice", "processes handled", "per slice", "launch→all working",
             "broker bytes/record: workers", "reads/record", "supervisors"]]  # fmt: skip
    order = list(NAMES)
    keys = sorted(doc["summary"], key=lambda k: (_split_key(k)[0], order.index(_split_key(k)[1]),
                                                 _split_key(k)[2]))  # fmt: skip
    for name in keys:
        handler, system, n = _split_key(name)
        row = doc["summary"][name]
        rate = _num(row["records_per_s"], "{:,.0f}")
        if row["rounds_ok"] < row["rounds"]:
            rate += f" [{row['rounds_ok']}/{row['rounds']} rounds]"
        rows.append([handler, label(doc, system), str(n), rate,
                     _num(row.get("to_best_share"), "{:.2f}"), _num(row["p50_s"], "{:.1f} s"),
                     _num(row["p99_s"], "{:.1f} s"), _num(row["handled_twice"], "{:.0f}"),
                     _num(row["workers_used"], "{:.0f}"),
                     _num(row.get("processes_per_slice"), "{:.2f}"),
                     _num(row.get("to_all_working_s"), "{:.2f} s"),
                     _num(row.get("worker_bytes_per_record"), "{:,.0f}"),
                     _num(row.get("reads_per_record"), "{:.2f}"),
                     _num(row.get("supervisor_bytes_per_record"), "{:,.0f}")])  # fmt: skip
    head = (
        f"{doc['records']:,} keyed records on one partition (producer batches of "
        f"{doc['produce_batch']}), {doc['rounds']} round(s), medians; io = {doc['io_ms']:g} ms "
        f"sleep, cpu = {doc['cpu_iters']} loop turns ({_cpu_note(doc)}); marshal HB "
        f"{doc['heartbeat_s']:g} s; share-tuned: lock {doc.get('tuned_lock_ms', 15000)} ms, "
        f"max.poll.records {doc.get('tuned_poll_records', 10)}"
    )
    out = [head, "", *_markdown(rows)]
    reads = _slice_read_rows(doc["summary"])
    if len(reads) > 1:
        out += [
            "",
            "slice reads, host (one reader per partition per member) against child (each"
            " slice's child reads the partition), side by side:",
            "",
            *_markdown(reads),
        ]
    if doc["faults"]:
        out += ["", "fault runs (io handler):", "", *_markdown(_fault_rows(doc, doc["faults"]))]
    if not doc["ordering_available"]:
        out += ["", "marshal-run has no --ordering here: the ordering systems were not run"]
    elif not doc.get("slice_reads_available"):
        out += [
            "",
            "marshal-run has no --slice-reads here: unordered-child and key-child were"
            " not run; unordered and key read as this marshal-run does (each slice's child)",
        ]
    return "\n".join(out)


def _slice_read_rows(summary: dict[str, dict[str, Any]]) -> list[list[str]]:
    """Per handler, N and ordering run both ways: host reads beside child reads."""
    rows = [["handler", "N", "ordering", "records/s: host", "child", "host / child",
             "reads/record: host", "child", "x best share: host", "child"]]  # fmt: skip
    order = list(NAMES)
    for handler, system, n in sorted((_split_key(k) for k in summary),
                                     key=lambda x: (x[0], x[2], order.index(x[1]))):  # fmt: skip
        name = f"{handler}/{system}/{n}"
        if system not in CHILD_READS or f"{handler}/{ordering_of(system)}/{n}" not in summary:
            continue
        child, host = summary[name], summary[f"{handler}/{ordering_of(system)}/{n}"]
        both = host["records_per_s"] and child["records_per_s"]
        rows.append([handler, str(n), ordering_of(system),
                     _num(host["records_per_s"], "{:,.0f}"),
                     _num(child["records_per_s"], "{:,.0f}"),
                     _num(host["records_per_s"] / child["records_per_s"] if both else None,
                          "{:.2f}"),
                     _num(host.get("reads_per_record"), "{:.2f}"),
                     _num(child.get("reads_per_record"), "{:.2f}"),
                     _num(host.get("to_best_share"), "{:.2f}"),
                     _num(child.get("to_best_share"), "{:.2f}")])  # fmt: skip
    return rows


def _fault_rows(doc: dict[str, Any], faults: dict[str, dict[str, Any]]) -> list[list[str]]:
    rows = [["system", "N", "fault", "handled twice", "missing", "what followed"]]
    for name, res in faults.items():
        system, n, kind = name.split("/")
        fault = res.get("fault", {})
        if not fault.get("struck"):
            what = "the fault never struck" + (f" ({res['error']})" if "error" in res else "")
        elif kind == "kill":
            pause = fault.get("longest_pause_s")
            what = f"killed {len(fault['pids'])} processes; longest pause in progress after it " + (
                f"{pause:.1f} s" if pause is not None else "-"
            )
        else:
            cont = fault["after_cont"]
            pause = fault.get("longest_pause_s")
            what = (
                f"stopped {fault['stopped_s']:.0f} s; longest pause "
                + (f"{pause:.1f} s" if pause is not None else "-")
                + f"; after SIGCONT it finished {cont['lines']} records, {cont['late']} after"
                " its lock/lease ended"
            )
        if "error" in res:
            what += f" [{res['error']}]"
        rows.append([label(doc, system), n, kind, str(res.get("handled_twice", "-")),
                     str(res.get("missing", "-")), what])  # fmt: skip
    return rows


def plot(doc: dict[str, Any], path: Path) -> Path:
    """records/s against N, one panel per handler, a line per system (a system with one worker
    whatever N is a dashed level). Returns the path written."""
    import matplotlib  # noqa: PLC0415 (only when plotting)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    handlers = sorted({_split_key(k)[0] for k in doc["summary"]})
    fig, axes = plt.subplots(1, max(1, len(handlers)), figsize=(6 * max(1, len(handlers)), 4.5))
    axes = axes if len(handlers) > 1 else [axes]
    ns = sorted({_split_key(k)[2] for k in doc["summary"]})
    for ax, handler in zip(axes, handlers, strict=False):
        for system in NAMES:
            points = sorted((n, row["records_per_s"]) for k, row in doc["summary"].items()
                            for h, s, n in [_split_key(k)]
                            if h == handler and s == system and row["records_per_s"])  # fmt: skip
            if not points:
                continue
            if len(points) == 1 and system in ("partition", "plain"):
                plain = system == "plain"
                ax.axhline(points[0][1], linestyle="--" if plain else ":", linewidth=1.5,
                           label=f"{label(doc, system)} (1 worker)",
                           color=COLORS[system])  # fmt: skip
                continue
            ax.plot([p[0] for p in points], [p[1] for p in points],
                    "s--" if system in CHILD_READS else "o-", color=COLORS[system],
                    label=label(doc, system))  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_xlabel("workers N (over 2 members)")
        ax.set_ylabel("records/s (first handled to last)")
        ax.set_title(f"{handler} handler, {doc['records']:,} records on one partition", fontsize=9)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.resolve()
