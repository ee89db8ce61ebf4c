"""The ``--json`` summary of an audit: counts a person or a deployment gate can read.

A stable interface (keys are only ever added)::

    {"input", "out", "report", "heartbeat_interval_ms", "heartbeat_intervals_ms": {GROUP: MS},
     "records", "coordination_partitions",
     "log_start", "log_end", "malformed", "unverified", "verdicts": {VERDICT: N},
     "groups": [{"group", "mode", "partitions", "members", "claims", "failovers",
                 "handovers", "pauses"}],
     "claims", "claims_ended": {ENDED: N}, "clients", "partitions_claimed", "members",
     "failovers", "handovers", "failover_ms": {"min", "median", "max"} | null,
     "max_heartbeat_gap_ms", "reservations",
     "poison": {"records", "failures", "parked", "retried", "skipped", "parked_at_end"},
     "amo_losses": {"ranges", "records", "by_cause": {CAUSE: N}},
     "ledger": {"rows", "incomplete_lines", "checked", "unverifiable", "alo_redeliveries",
                "groups_without_rows": [GROUP]} | null,
     "violations", "violations_by_kind": {KIND: N},
     "violation_examples": [{"kind", "group", "topic", "partition", "offset", "client_id",
                             "pid", "token", "detail"}]}

``heartbeat_interval_ms`` is null when every group recorded its own interval and they differ.
Times are ISO-8601 UTC. ``violations`` is 0 exactly when the exit status is 0.
"""

from __future__ import annotations

from collections import Counter
from statistics import median
from typing import TYPE_CHECKING, Any

from marshal_workers.audit.schema import columns
from marshal_workers.protocol.groupstatus import iso_ms

if TYPE_CHECKING:
    from marshal_workers.audit.model import AuditConfig, AuditResult

EXAMPLES = 20


def _col(table: str, name: str) -> int:
    return columns(table).index(name)


def violation_line(row: tuple[Any, ...]) -> str:
    """A violation as one line for stderr."""
    return f"violation {row[_col('violations', 'kind')]}: {row[_col('violations', 'detail')]}"


def poison_summary(rows: list[tuple[Any, ...]]) -> dict[str, int]:
    """Poison records (distinct failing data records) and what became of them: failures
    counted, records ever parked, retried or skipped by an operator, and still parked at the
    end of the log (their newest poison row parks them)."""
    action = _col("poison", "action")
    record: dict[tuple[Any, ...], list[str]] = {}
    for r in rows:  # in log order per partition (`model.finish_small`)
        record.setdefault((r[0], r[1], r[2], r[3]), []).append(str(r[action]))
    return {
        "records": len(record),
        "failures": sum(1 for r in rows if r[action] in ("failed", "parked")),
        "parked": sum(1 for a in record.values() if "parked" in a),
        "retried": sum(1 for a in record.values() if "retried" in a),
        "skipped": sum(1 for a in record.values() if "skipped" in a),
        "parked_at_end": sum(1 for a in record.values() if a[-1] == "parked"),
    }


def loss_summary(rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    """AMO ranges reserved and never committed: how many, their records nobody handled (all of
    them without a ledger; ranges of unknown start count none), and how many per cause."""
    count, cause = _col("amo_losses", "count"), _col("amo_losses", "cause")
    handled = _col("amo_losses", "handled")
    return {
        "ranges": len(rows),
        "records": sum(int(r[count]) - int(r[handled] or 0) for r in rows if r[count] is not None),
        "by_cause": dict(sorted(Counter(str(r[cause]) for r in rows).items())),
    }


def _default_interval(config: AuditConfig, groups: list[str]) -> int | None:
    """The interval of the groups without recorded settings (the given or the default), or
    None if every reported group recorded its own and they differ: no group was judged with
    it, and a single figure would misname them (`heartbeat_intervals_ms` has each)."""
    recorded = config.heartbeats.newest_ms if config.heartbeats is not None else {}
    if any(g not in recorded for g in groups):
        return config.heartbeat_interval_ms
    intervals = {recorded[g] for g in groups}
    if len(intervals) > 1:
        return None
    return intervals.pop() if intervals else config.heartbeat_interval_ms


def summarize(result: AuditResult) -> dict[str, Any]:
    """The summary of an audit (see the module docstring)."""
    t = result.tables
    coord = t["coordination"]
    claims = t["claims"]
    fo = t["failovers"]
    durations = sorted(
        int(r[_col("failovers", "duration_ms")])
        for r in fo
        if r[_col("failovers", "kind")] == "failover"
    )
    gaps = [r[_col("heartbeat_gaps", "max_gap_ms")] for r in t["heartbeat_gaps"]]
    gaps = [g for g in gaps if g is not None]
    violations = result.violations
    kinds = Counter(str(r[0]) for r in violations)
    vcols = columns("violations")
    examples = [
        {c: r[vcols.index(c)] for c in ("kind", "group", "topic", "partition", "offset",
                                         "client_id", "pid", "token", "detail")}
        for r in violations[:EXAMPLES]
    ]  # fmt: skip
    check = result.check
    ledger = None
    if check is not None:
        ledger = {
            "rows": check.ledger_rows + check.incomplete_lines,
            "incomplete_lines": check.incomplete_lines,
            "checked": check.checked,
            "unverifiable": check.unverifiable,
            "alo_redeliveries": check.alo_redeliveries,
            # groups the ledger has no row of: ALO not checked for gaps, AMO losses at risk
            # as the log shows them (`audit.checks`)
            "groups_without_rows": list(check.unledgered),
        }
    gcols = columns("groups")
    return {
        "input": str(result.config.source),
        "out": str(result.config.out),
        "report": None if result.report_path is None else str(result.report_path),
        "heartbeat_interval_ms": _default_interval(result.config, [str(r[0]) for r in t["groups"]]),
        "heartbeat_intervals_ms": {
            str(r[0]): result.config.group_heartbeat_ms(str(r[0])) for r in t["groups"]
        },
        "records": sum(int(r[_col("coordination", "records")]) for r in coord),
        "coordination_partitions": len(coord),
        "log_start": iso_ms(
            min((int(r[_col("coordination", "first_log_time_ms")]) for r in coord), default=None)
        ),
        "log_end": iso_ms(result.end_ms),
        "malformed": sum(int(r[_col("coordination", "malformed")]) for r in coord),
        "unverified": sum(int(r[_col("coordination", "unverified")]) for r in coord),
        "verdicts": result.verdicts,
        "groups": [dict(zip(gcols, r, strict=True)) for r in t["groups"]],
        "claims": len(claims),
        "claims_ended": dict(
            sorted(Counter(str(r[_col("claims", "ended")]) for r in claims).items())
        ),
        "clients": sorted({str(r[_col("claims", "client_id")]) for r in claims}),
        "partitions_claimed": len({(r[0], r[1], r[2]) for r in claims}),
        "members": len({(r[0], r[_col("membership", "client_id")]) for r in t["membership"]}),
        "failovers": len(durations),
        "handovers": sum(1 for r in fo if r[_col("failovers", "kind")] == "handover"),
        "failover_ms": {"min": durations[0], "median": median(durations), "max": durations[-1]}
        if durations
        else None,
        "max_heartbeat_gap_ms": max(gaps) if gaps else None,
        "reservations": result.verdicts.get("MessagesClaimed", 0),
        "poison": poison_summary(t.get("poison", [])),
        "amo_losses": loss_summary(t.get("amo_losses", [])),
        "ledger": ledger,
        "violations": len(violations),
        "violations_by_kind": dict(sorted(kinds.items())),
        "violation_examples": examples,
    }
