"""The ledger of one `bench/hot.py` run, read as it grows, and the figures taken from it.

Every process that handles records appends lines to ``ledger-<pid>.jsonl`` in one directory
(`bench/hot_handlers.py`); `Ledger.refresh` reads what was appended since the last call, so the
benchmark can follow a run of 100,000 records without reading it again and again.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Ledger:
    """Every line of a directory of ledger files, read incrementally."""

    directory: Path
    rows: list[dict[str, Any]] = field(default_factory=list)
    first: dict[int, dict[str, Any]] = field(default_factory=dict)  # offset -> first handling
    _read: dict[Path, int] = field(default_factory=dict)

    def refresh(self) -> int:
        """Read the lines appended since the last call; return the distinct offsets handled."""
        for path in sorted(self.directory.glob("ledger-*.jsonl")):
            with path.open("rb") as f:
                f.seek(self._read.get(path, 0))
                data = f.read()
            complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits
            self._read[path] = self._read.get(path, 0) + len(complete)
            for line in complete.splitlines():
                row = json.loads(line)
                self.rows.append(row)
                known = self.first.get(row["offset"])
                if known is None or row["end"] < known["end"]:
                    self.first[row["offset"]] = row
        return len(self.first)

    def latest_pid(self) -> int | None:
        """The process that finished a record last (a worker that is handling records now)."""
        return max(self.rows, key=lambda r: r["end"])["pid"] if self.rows else None


def late(row: dict[str, Any]) -> bool:
    """Whether the line was written after its worker's lease or record lock had ended."""
    if "lease_end" in row:
        return bool(row["end"] > row["lease_end"])
    if "acquired" in row:
        return bool(row["end"] > row["acquired"] + row["lock_s"])
    return False


def figures(ledger: Ledger, records: int, launched: float | None = None) -> dict[str, Any]:
    """Throughput, latency from append to handled, records handled twice, missing, late, the
    work's CPU per handling (median, and the tenths p10 and p90);
    with ``launched`` (``time.time()`` as the members were started), the seconds from it to
    the first record of the last worker or slice to start, and processes per slice."""
    firsts = list(ledger.first.values())
    out: dict[str, Any] = {
        "handled": len(firsts),
        "missing": records - len(firsts),
        "lines": len(ledger.rows),
        "handled_twice": len(ledger.rows) - len(firsts),
        "late_lines": sum(1 for r in ledger.rows if late(r)),
        "workers_used": len({r["pid"] for r in ledger.rows}),
    }
    if not firsts:
        return out
    start = min(r["start"] for r in firsts)
    end = max(r["end"] for r in firsts)
    latencies = sorted(r["end"] - r["ts"] / 1000 for r in firsts)
    cpus = [r["cpu"] for r in ledger.rows if "cpu" in r]  # every handling, a repeat's too
    if cpus:  # the work's own CPU per record (a ledger from before the field has none)
        out["work_cpu_us_p50"] = statistics.median(cpus) * 1e6
        if len(cpus) >= 10:  # the tenths: a loop slower throughout, or some calls disturbed
            tenths = statistics.quantiles(cpus, n=10)
            out["work_cpu_us_p10"], out["work_cpu_us_p90"] = tenths[0] * 1e6, tenths[-1] * 1e6
    out.update(
        records_per_s=len(firsts) / max(end - start, 1e-9),
        p50_s=statistics.median(latencies),
        p99_s=latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        first_start=start,
        last_end=end,
    )
    if launched is not None:
        out.update(starts(ledger, launched))
    return out


def starts(ledger: Ledger, launched: float) -> dict[str, Any]:
    """How the run started: seconds from launch until the last of its slices (marshal-run
    with ``--ordering``: the ``slice`` of each line) handled its first record, and processes
    that handled records per slice (1.0: no slice changed hands); without slices, until the
    last process to handle anything handled its first record."""
    first: dict[Any, float] = {}
    by_slice = any(r.get("slice") for r in ledger.rows)
    for r in ledger.rows:
        unit = r.get("slice") if by_slice else r["pid"]
        first[unit] = min(first.get(unit, r["start"]), r["start"])
    out: dict[str, Any] = {"to_all_working_s": max(first.values()) - launched}
    if by_slice:
        pids = {r["pid"] for r in ledger.rows}
        out["slices"] = len(first)
        out["processes_per_slice"] = len(pids) / len(first)
    return out


def after(ledger: Ledger, pid: int, since: float) -> dict[str, int]:
    """What process ``pid`` finished after ``since`` (a SIGCONT): lines, and those late."""
    rows = [r for r in ledger.rows if r["pid"] == pid and r["end"] > since]
    return {"lines": len(rows), "late": sum(1 for r in rows if late(r))}
