"""What an audit is asked to do (`AuditConfig`) and what it found (`AuditResult`).

Also the two steps both pipelines share once the fold is done: `finish_small` settles the
small tables against the end of the log, and `claim_index` prepares them for the checks.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marshal_workers.audit.amo import log_losses, loss_order
from marshal_workers.audit.checks import CheckStats, ClaimIndex
from marshal_workers.audit.exitcodes import AuditUsageError
from marshal_workers.audit.finalize import (
    log_end_ms,
    merge_coordination,
    merge_groups,
    settle,
    settle_reserved,
)
from marshal_workers.audit.heartbeats import Heartbeats, from_records, given_problem
from marshal_workers.audit.placed import Placed
from marshal_workers.audit.schema import columns
from marshal_workers.audit.session import SessionOptions
from marshal_workers.audit.tables import Row, Window
from marshal_workers.config.runconfig import DEFAULT_ADMIN_CLIENT_IDS
from marshal_workers.protocol.rationalizer import RationalizerConfig
from marshal_workers.protocol.wire import Partitioner

SMALL = (
    "claims", "membership", "failovers", "heartbeat_gaps", "poison", "amo_reserved", "groups",
    "coordination",
)  # fmt: skip
"""Tables the fold makes with a row per claim or less (``amo_losses`` derives from them)."""
"""Tables with a row per claim or less: collected to the driver, settled, written there."""


@dataclass(frozen=True, slots=True)
class KafkaInput:
    """The coordination topic on a Kafka cluster."""

    bootstrap_servers: str
    topic: str = "__marshal"
    kafka: Mapping[str, str] = field(default_factory=dict)  # the fleet's [kafka] (librdkafka)

    def __str__(self) -> str:
        return f"{self.topic} on {self.bootstrap_servers}"


@dataclass(frozen=True, slots=True)
class FileInput:
    """A ``marshal-admin dump --json`` file (or the same columns in Parquet)."""

    path: Path

    def __str__(self) -> str:
        return str(self.path)


@dataclass(frozen=True, slots=True)
class AuditConfig:
    """Everything one audit needs (the CLI only builds this)."""

    source: KafkaInput | FileInput
    out: Path
    heartbeat_interval_ms: int = 10_000  # groups without recorded settings (`heartbeats`)
    partitioner: Partitioner = Partitioner.SPEC
    admin_client_ids: frozenset[str] | None = frozenset(DEFAULT_ADMIN_CLIENT_IDS)
    ledgers: tuple[Path, ...] = ()
    ledger_topic: str | None = None
    window: Window = field(default_factory=Window)
    modes: Mapping[str, str] = field(default_factory=dict)
    tolerance_s: float = 0.0
    session: SessionOptions = field(default_factory=SessionOptions)
    report: bool = True
    heartbeat_given: str | None = None  # where the interval was given (a flag...), None: not
    heartbeats: Heartbeats | None = None  # each group's, read from the log (`with_heartbeats`)

    def with_heartbeats(self, settings: Iterable[Placed]) -> AuditConfig:
        """The audit with each group's heartbeat interval read from its settings records,
        annotated with their partitions' log times (`heartbeats`, `placed`); AuditUsageError if
        a given interval disagrees with the log's."""
        given = self.heartbeat_interval_ms if self.heartbeat_given is not None else None
        found = from_records(settings, given, self.heartbeat_interval_ms, self.admin_client_ids)
        if self.heartbeat_given is not None:
            problem = given_problem(
                found, self.heartbeat_interval_ms, self.heartbeat_given, self.window.group
            )
            if problem is not None:
                raise AuditUsageError(problem)
        return dataclasses.replace(self, heartbeat_interval_ms=found.default_ms, heartbeats=found)

    def group_heartbeat_ms(self, group: str) -> int:
        """The heartbeat interval a group's claims are settled with (its newest recorded)."""
        if self.heartbeats is None:
            return self.heartbeat_interval_ms
        return self.heartbeats.of_group(group)

    def absolute(self) -> AuditConfig:
        """The same audit with every path absolute: the driver JVM runs in a directory of
        its own (`session.jvm_working_directory`), so relative paths would miss."""
        source = self.source
        if isinstance(source, FileInput):
            source = FileInput(source.path.absolute())
        return dataclasses.replace(
            self,
            source=source,
            out=self.out.absolute(),
            ledgers=tuple(p.absolute() for p in self.ledgers),
        )

    def rationalizer(self, num_partitions: int | None) -> RationalizerConfig:
        """The fold's configuration: the workers' (heartbeat interval, partitioner, admins)."""
        return RationalizerConfig(
            self.heartbeat_interval_ms,
            num_partitions=num_partitions,
            partitioner=self.partitioner,
            admin_client_ids=self.admin_client_ids,
        )

    @property
    def has_ledger(self) -> bool:
        """Whether any ledger is to be checked."""
        return bool(self.ledgers) or self.ledger_topic is not None


LagPoint = tuple[str, int, int, int | None, int]  # topic, partition, log time ms, lag, offset


@dataclass(slots=True)
class AuditResult:
    """The small tables and the checks of one audit (the big tables are on disk)."""

    config: AuditConfig
    tables: dict[str, list[Row]]
    end_ms: int | None
    index: ClaimIndex
    lag_points: list[LagPoint] = field(default_factory=list)
    check: CheckStats | None = None
    report_path: Path | None = None

    @property
    def violations(self) -> list[Row]:
        """Every violation row."""
        return self.tables.get("violations", [])

    @property
    def verdicts(self) -> dict[str, int]:
        """Reported events per verdict, over every coordination partition."""
        i = columns("coordination").index("verdicts")
        total: dict[str, int] = {}
        for row in self.tables["coordination"]:
            for name, n in json.loads(row[i]).items():
                total[name] = total.get(name, 0) + n
        return dict(sorted(total.items()))


def finish_small(
    small: Mapping[str, list[Row]], config: AuditConfig
) -> tuple[dict[str, list[Row]], int | None, ClaimIndex]:
    """Settle open intervals against the log's end, merge group parts (counting the claim
    keys of ``group_keys`` once), keep ``--group``'s.

    Also returns the index the ledger checks need, built from every group's claims: a
    ledger row of another group must be recognised as such, not taken for zombie work."""
    end = config.window.until_ms or log_end_ms(small.get("coordination", []))
    hb, window = config.group_heartbeat_ms, config.window
    out = {name: list(small.get(name, [])) for name in SMALL}
    out["coordination"] = merge_coordination(out["coordination"])
    if end is not None:
        out["claims"] = settle(out["claims"], end, hb, window)
        out["membership"] = settle(out["membership"], end, hb, window)
    out["amo_reserved"] = settle_reserved(out["amo_reserved"], out["claims"])
    out["groups"] = merge_groups(out["groups"], small.get("group_keys", []), config.modes)
    index = claim_index(out)
    if window.group is not None:
        for name in (
            "claims", "membership", "failovers", "heartbeat_gaps", "poison", "amo_reserved",
            "groups",
        ):  # fmt: skip
            out[name] = [r for r in out[name] if r[0] == window.group]
    out["coordination"].sort()
    out["poison"].sort(key=lambda r: (r[0], r[1], r[2], r[4], r[5], r[6]))
    for name in ("claims", "membership", "failovers", "heartbeat_gaps"):
        out[name].sort(key=_order(name))
    out["amo_reserved"].sort(key=lambda r: (r[0], r[1], r[2], r[10] or 0, str(r)))
    out["amo_losses"] = sorted(log_losses(out["amo_reserved"]), key=loss_order)
    return out, end, index


def _order(name: str) -> Callable[[Row], tuple[Any, ...]]:
    cols = columns(name)
    keys = [cols.index(c) for c in ("group", "topic", "partition") if c in cols]
    time_col = cols.index("claimed_ms" if name == "failovers" else "start_ms")

    def key(row: Row) -> tuple[Any, ...]:
        return (*(row[k] for k in keys), row[time_col], str(row))

    return key


def claim_index(tables: Mapping[str, list[Row]]) -> ClaimIndex:
    """The claim intervals, group modes and gapped partitions the ledger checks need."""
    gcols, ccols = columns("groups"), columns("coordination")
    modes = {str(r[0]): str(r[gcols.index("mode")]) for r in tables["groups"]}
    gapped = [int(r[0]) for r in tables["coordination"] if r[ccols.index("gap_seen")]]
    return ClaimIndex.build(
        tables["claims"], modes, gapped, tables.get("poison", ()), tables.get("amo_reserved", ())
    )
