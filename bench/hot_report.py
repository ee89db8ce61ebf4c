"""The tables and the plot of `bench/hot.py`, from its JSON document (``summary``: per handler,
system and N, medians over rounds; ``faults``: one run per system and fault)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

NAMES = {
    "partition": "marshal partition (ALO)",
    "unordered": "marshal unordered",
    "key": "marshal key",
    "share-default": "share group, defaults",
    "share-tuned": "share group, tuned",
    "plain": "plain loop",
}


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
    rows = [["handler", "system", "N", "records/s", "p50 append→handled", "p99",
             "handled twice", "processes handled", "per slice", "launch→all working",
             "broker bytes/record: workers", "supervisors"]]  # fmt: skip
    order = list(NAMES)
    keys = sorted(doc["summary"], key=lambda k: (_split_key(k)[0], order.index(_split_key(k)[1]),
                                                 _split_key(k)[2]))  # fmt: skip
    for name in keys:
        handler, system, n = _split_key(name)
        row = doc["summary"][name]
        rate = _num(row["records_per_s"], "{:,.0f}")
        if row["rounds_ok"] < row["rounds"]:
            rate += f" [{row['rounds_ok']}/{row['rounds']} rounds]"
        rows.append([handler, NAMES[system], str(n), rate, _num(row["p50_s"], "{:.1f} s"),
                     _num(row["p99_s"], "{:.1f} s"), _num(row["handled_twice"], "{:.0f}"),
                     _num(row["workers_used"], "{:.0f}"),
                     _num(row.get("processes_per_slice"), "{:.2f}"),
                     _num(row.get("to_all_working_s"), "{:.2f} s"),
                     _num(row.get("worker_bytes_per_record"), "{:,.0f}"),
                     _num(row.get("supervisor_bytes_per_record"), "{:,.0f}")])  # fmt: skip
    head = (
        f"{doc['records']:,} keyed records on one partition (producer batches of "
        f"{doc['produce_batch']}), {doc['rounds']} round(s), medians; io = {doc['io_ms']:g} ms "
        f"sleep, cpu = {doc['cpu_iters']} loop turns (~{doc['cpu_us']:g} µs); marshal HB "
        f"{doc['heartbeat_s']:g} s; share-tuned: lock {doc.get('tuned_lock_ms', 15000)} ms, "
        f"max.poll.records {doc.get('tuned_poll_records', 10)}"
    )
    out = [head, "", *_markdown(rows)]
    if doc["faults"]:
        out += ["", "fault runs (io handler):", "", *_markdown(_fault_rows(doc["faults"]))]
    if not doc["ordering_available"]:
        out += ["", "marshal-run has no --ordering here: unordered and key were not run"]
    return "\n".join(out)


def _fault_rows(faults: dict[str, dict[str, Any]]) -> list[list[str]]:
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
        rows.append([NAMES[system], n, kind, str(res.get("handled_twice", "-")),
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
        for system, label in NAMES.items():
            points = sorted((n, row["records_per_s"]) for k, row in doc["summary"].items()
                            for h, s, n in [_split_key(k)]
                            if h == handler and s == system and row["records_per_s"])  # fmt: skip
            if not points:
                continue
            if len(points) == 1 and system in ("partition", "plain"):
                plain = system == "plain"
                ax.axhline(points[0][1], linestyle="--" if plain else ":", linewidth=1.5,
                           label=f"{label} (1 worker)",
                           color="#555555" if plain else "#c0392b")  # fmt: skip
                continue
            ax.plot([p[0] for p in points], [p[1] for p in points], "o-", label=label)
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
