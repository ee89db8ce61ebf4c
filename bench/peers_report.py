"""The table and the plot of `bench/peers.py`, from its JSON document (``summary``: per setting
and system, medians over rounds and the median ratio to the plain loop)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

NAMES = {
    "plain": "plain one-process loop",
    "plain2": "two plain loops (reference)",
    "alo": "marshal ALO",
    "amo": "marshal AMO",
    "amo-batch": "AMO, a batch per reservation",
    "amo-narrow": "AMO, window 2000",
    "arroyo": "Arroyo (2 procs)",
    "alo-base": "ALO, baseline build",
    "amo-base": "AMO, baseline build",
}


def rate(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1e6:
        return f"{value / 1e6:.2f}M/s"
    return f"{value / 1e3:.1f}k/s"


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def megabytes(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} MB"


def cell(row: dict[str, Any] | None, system: str) -> str:
    if row is None or row["records_per_s"] is None:
        return "no figure"
    text = rate(row["records_per_s"])
    if system != "plain" and row["ratio_to_plain"] is not None:
        text += f" ({row['ratio_to_plain']:.2f}x)"
    if row["rounds_ok"] < row["rounds"]:
        text += f" [{row['rounds_ok']}/{row['rounds']} rounds]"
    return text


def table(doc: dict[str, Any]) -> str:
    """A Markdown table: throughput (ratio to the plain loop) per setting, then per setting the
    launch to the first record and to every partition, the peak RSS of a process that ran the
    handler (a marshal child, an Arroyo worker, the plain loop) and the largest RSS of any
    process of the system (a supervisor, Arroyo's consumer) when it was done."""
    summary: dict[str, dict[str, Any]] = doc["summary"]
    systems = [s for s in NAMES if any(s in by for by in summary.values())]
    rows = [["setting", *(NAMES[s] for s in systems)]]
    notes: list[str] = []
    for key, by_system in summary.items():
        rows.append([doc["settings"][key]["label"], *(cell(by_system.get(s), s) for s in systems)])
    for key, by_system in summary.items():
        for name, label, show in (
            ("launch_to_first_s", "launch to first record", seconds),
            ("launch_to_every_partition_s", "launch to every partition", seconds),
            ("handler_rss_mb", "peak RSS of a handler process", megabytes),
            ("max_rss_mb", "largest RSS of any process", megabytes),
        ):
            values = [show(by_system[s][name]) if s in by_system else "-" for s in systems]
            rows.append([f"{label} ({key})", *values])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"
             for r in rows]  # fmt: skip
    lines.insert(1, "| " + " | ".join("-" * w for w in widths) + " |")
    pairs = [("alo", "plain2"), ("amo", "plain2"), ("plain2", "plain"),
             ("amo", "alo"), ("amo-batch", "alo"), ("amo-narrow", "alo"), ("alo", "arroyo"),
             ("amo", "arroyo"), ("amo-base", "alo-base"), ("amo", "amo-base"),
             ("alo", "alo-base")]  # fmt: skip
    for key, by_system in summary.items():
        found = [
            f"{NAMES[a]} / {NAMES[b]} {by_system[a]['ratios'][b]:.2f}x"
            for a, b in pairs
            if a in by_system and by_system[a]["ratios"].get(b) is not None
        ]
        if found:
            notes.append(f"{key}: " + "; ".join(found))
    head = (
        f"{doc['partitions']} partitions, {doc['rounds']} interleaved round(s), medians; "
        f"work handler {doc['work_iters']} loop turns (~{doc['work_us']:g} µs); "
        "ratios to the plain loop of the same round"
    )
    tail = "\n\nother ratios (medians of round-by-round ratios):\n" + "\n".join(notes)
    return head + "\n\n" + "\n".join(lines) + (tail if notes else "") + cores_line(doc)


def cores_line(doc: dict[str, Any]) -> str:
    """What two bare processes of the work loop got against one just before the rounds and just
    after them (`bench/cores.py`, one round each), if measured: the reference for the CPU-bound
    ratios, as noisy as any one round."""
    cores = doc.get("cores") or {}
    got = [f"{cores[k]:.2f}x {k}" for k in ("before", "after") if cores.get(k) is not None]
    if not got:
        return ""
    return (
        "\n\nwhat the cores gave two bare processes of the work loop against one "
        "(bench/cores.py, one round each; the CPU-bound ratios' reference): " + ", ".join(got)
    )


def plot(doc: dict[str, Any], path: Path) -> Path:
    """Throughput per system, one panel per setting (their scales differ): each round a dot,
    the median a bar labelled with its ratio to the plain loop. Returns the path written."""
    import matplotlib  # noqa: PLC0415 (only when plotting)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    from matplotlib.ticker import FuncFormatter  # noqa: PLC0415

    summary: dict[str, dict[str, Any]] = doc["summary"]
    fig, axes = plt.subplots(1, max(1, len(summary)), figsize=(6 * max(1, len(summary)), 4.5))
    axes = axes if len(summary) > 1 else [axes]
    for ax, (key, by_system) in zip(axes, summary.items(), strict=False):
        systems = [s for s in NAMES if s in by_system]
        medians = [by_system[s]["records_per_s"] or 0.0 for s in systems]
        bars = ax.bar(range(len(systems)), medians, color="#8fb3d9", edgecolor="#2b5d8c")
        for i, system in enumerate(systems):
            runs = doc["runs"][key][system]
            dots = [r["records_per_s"] for r in runs if "error" not in r]
            ax.plot([i] * len(dots), dots, "o", color="#2b5d8c", markersize=4)
            ratio = by_system[system]["ratio_to_plain"]
            label = rate(medians[i] or None)
            if system != "plain" and ratio is not None:
                label += f"\n{ratio:.2f}x"
            ax.annotate(label, (bars[i].get_x() + bars[i].get_width() / 2, medians[i]),
                        ha="center", va="bottom", fontsize=8)  # fmt: skip
        ax.set_xticks(range(len(systems)), [NAMES[s] for s in systems], rotation=15, fontsize=8)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: rate(v) if v else "0"))
        ax.set_ylabel("records/s (first record handled to last)")
        ax.set_title(doc["settings"][key]["label"], fontsize=9)
        ax.set_ylim(0, max([*medians, 1.0]) * 1.25)
    fig.suptitle(
        f"{doc['partitions']} partitions, {doc['rounds']} interleaved round(s): median bar, "
        "each round a dot, ratio to the plain loop",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.resolve()
