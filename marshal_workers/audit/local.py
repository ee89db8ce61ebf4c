"""The whole audit in one process, without Spark: the reference the Spark pipeline must match.

Same fold, same table builder, same settling and checks as `pipeline.run`; only nobody
distributes anything. The tests hold the Spark output to this, and the benchmark uses it as
the single-process baseline. Everything stays in memory, so it suits small logs only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from marshal_workers.audit.amo import date_abandoned, loss_order
from marshal_workers.audit.checks import check_ledger
from marshal_workers.audit.finalize import add_lag
from marshal_workers.audit.fold import FoldSettings, fold_records
from marshal_workers.audit.model import AuditConfig, AuditResult, finish_small
from marshal_workers.audit.placed import annotated_log
from marshal_workers.audit.report import lag_points
from marshal_workers.audit.tables import Row
from marshal_workers.common.ledgerfile import LedgerRow
from marshal_workers.protocol.wire import CoordRecord

BIG = ("events", "reservations", "lag")


def run_local(
    records: Iterable[CoordRecord],
    config: AuditConfig,
    ledger: Iterable[LedgerRow] | None = None,
    watermarks: Mapping[tuple[str, int], int] | None = None,
    num_partitions: int | None = None,
) -> tuple[AuditResult, dict[str, list[Row]]]:
    """The audit's result and every table, the big ones included."""
    records = list(records)
    if config.heartbeats is None:
        config = config.with_heartbeats(annotated_log(records))
    settings = FoldSettings(
        config.rationalizer(num_partitions), config.window, heartbeats=config.heartbeats
    )
    raw = fold_records(records, settings)
    tables, end_ms, index = finish_small(raw, config)
    big = {name: raw.get(name, []) for name in BIG}
    big["lag"] = add_lag(big["lag"], watermarks or {})
    result = AuditResult(config, tables, end_ms, index, lag_points(big["lag"]))
    tables["violations"] = []
    if ledger is not None:
        ledger = list(ledger)
        found, stats = check_ledger(ledger, index, config.tolerance_s, config.window)
        losses = date_abandoned([tuple(r) for r in stats.amo_losses], big["reservations"])
        tables["amo_losses"] = sorted(losses, key=loss_order)
        tables["violations"] = found
        result.check = stats
    return result, {**tables, **big}
