"""`marshal-audit`: parse the options into an `AuditConfig`, then call `pipeline.run`.

Exit codes (see `exitcodes`): 0 no violation, 1 violations found, 2 usage or configuration
error, 3 the audit could not run. Errors are one line on stderr; progress lines go to stderr
too, so stdout carries only the result (the ``--json`` summary, or a short text summary).
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from confluent_kafka import KafkaException

from marshal_workers.audit.exitcodes import (
    EXIT_CLEAN,
    EXIT_FAILED,
    EXIT_USAGE,
    EXIT_VIOLATIONS,
    AuditFailedError,
    AuditUsageError,
)
from marshal_workers.audit.model import (
    AuditConfig,
    AuditResult,
    FileInput,
    KafkaInput,
)
from marshal_workers.audit.session import DEFAULT_MASTER, SessionOptions
from marshal_workers.audit.summary import summarize, violation_line
from marshal_workers.audit.tables import Window
from marshal_workers.common.consolescripts import run_command
from marshal_workers.common.errors import MarshalError
from marshal_workers.config.timearg import TimeArgError, parse_time_ms
from marshal_workers.config.toolconfig import FleetSettings, fleet_options

SHOWN_VIOLATIONS = 20


def parse_time(text: str | None, option: str) -> int | None:
    """``--since``/``--until``: ISO 8601 or Unix seconds (see `timearg`) -> ms; exit 2 if bad."""
    if text is None:
        return None
    try:
        return parse_time_ms(text)
    except TimeArgError as exc:
        raise AuditUsageError(f"{option}: {exc}") from None


def parse_modes(items: tuple[str, ...]) -> dict[str, str]:
    """``--mode amo`` (every group) or ``--mode GROUP=alo`` -> {group or '*': mode}."""
    modes: dict[str, str] = {}
    for item in items:
        group, _, mode = item.rpartition("=")
        if mode not in ("amo", "alo"):
            raise AuditUsageError(f"--mode {item!r}: expected amo, alo or GROUP=amo|alo")
        modes[group or "*"] = mode
    return modes


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@fleet_options
@click.option(
    "--input",
    "input_path",
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="Read a `marshal-admin dump --json` file (or its Parquet form) instead.",
)
@click.option(
    "--ledger",
    "ledgers",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="PATH",
    help="A ledger file or directory of *.jsonl (repeatable).",
)
@click.option(
    "--ledger-topic",
    metavar="TOPIC",
    help="A Kafka topic whose values are ledger lines (needs --bootstrap-servers).",
)
@click.option("--group", help="Report only this consumer group.")
@click.option("--since", metavar="TIME", help="Report from this log time (ISO-8601 or Unix s).")
@click.option("--until", metavar="TIME", help="Report up to this log time (ISO-8601 or Unix s).")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    required=True,
    metavar="DIR",
    help="Where the Parquet tables and report.html go.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@click.option(
    "--master",
    envvar="MARSHAL_AUDIT_MASTER",
    default=DEFAULT_MASTER,
    show_default=True,
    metavar="URL",
    help="Spark master (local[N], spark://..., yarn).",
)
@click.option(
    "--mode",
    "modes",
    multiple=True,
    metavar="[GROUP=]amo|alo",
    help="A group's delivery mode [default: amo if it ever reserved messages].",
)
@click.option(
    "--clock-tolerance",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    metavar="S",
    help="Slack for ledgers written on hosts whose clocks differ.",
)
def audit(
    *,
    fleet: FleetSettings,
    input_path: Path | None,
    ledgers: tuple[Path, ...],
    ledger_topic: str | None,
    group: str | None,
    since: str | None,
    until: str | None,
    out: Path,
    as_json: bool,
    master: str,
    modes: tuple[str, ...],
    clock_tolerance: float,
) -> int:
    """Prove what a fleet did: fold the coordination log on Spark with the workers' own
    rationalizer, write claim intervals, failovers, heartbeat gaps, reservations, lag and
    violations as Parquet tables plus report.html, and check handler ledgers against the
    claims (zombie work, overlaps, AMO duplicates, ALO gaps).

    \b
    Examples:
      marshal-audit --bootstrap-servers 127.0.0.1:9092 --ledger ./ledger --out audit/ --json
      marshal-audit --input dump.jsonl --out audit/

    Each group is judged with the heartbeat interval its settings record in the log;
    --heartbeat-interval is for groups that recorded none (one that disagrees: exit 2).

    Exit status: 0 no violation, 1 violations found, 2 usage error, 3 the audit failed.
    """
    config = AuditConfig(
        source=_source(fleet, input_path),
        out=out,
        heartbeat_interval_ms=fleet.heartbeat_interval_ms,
        heartbeat_given=_given(fleet, "heartbeat_interval"),
        partitioner=fleet.partitioner,
        admin_client_ids=fleet.admin_client_ids,
        ledgers=ledgers,
        ledger_topic=ledger_topic,
        window=Window(group, parse_time(since, "--since"), parse_time(until, "--until")),
        modes=parse_modes(modes),
        tolerance_s=clock_tolerance,
        session=SessionOptions(master=master),
    )
    from marshal_workers.audit.pipeline import run  # noqa: PLC0415 (keeps --help fast)
    from marshal_workers.audit.progress import Progress  # noqa: PLC0415

    try:
        result = run(config, Progress(lambda line: click.echo(line, err=True)))
    except MarshalError as exc:  # exit 1 means "violations" here: other failures are 3
        if exc.exit_code in (EXIT_USAGE, EXIT_FAILED):
            raise
        raise AuditFailedError(str(exc)) from None
    except KafkaException as exc:
        raise AuditFailedError(f"Kafka: {exc.args[0] if exc.args else exc}") from None
    return _report(result, as_json)


def _given(fleet: FleetSettings, setting: str) -> str | None:
    """Where a setting was given (a flag, ``$MARSHAL_...`` or the --config file), None if
    it is the default."""
    source = fleet.sources.get(setting, "default")
    return None if source == "default" else source


def _source(fleet: FleetSettings, path: Path | None) -> KafkaInput | FileInput:
    """--input, else the coordination topic on the fleet's brokers (which must be given: by
    flag, environment or the --config file, never the default, so no cluster is read by
    accident)."""
    given = fleet.sources.get("bootstrap_servers", "default")
    if path is not None:
        if given == "--bootstrap-servers":
            raise AuditUsageError("give either --bootstrap-servers or --input, not both")
        return FileInput(path)
    if given == "default":
        raise AuditUsageError(
            "give --bootstrap-servers (or MARSHAL_BOOTSTRAP_SERVERS, or --config) or --input"
        )
    return KafkaInput(fleet.bootstrap_servers, fleet.coordination_topic, fleet.kafka)


def _report(result: AuditResult, as_json: bool) -> int:
    summary = summarize(result)
    wanted = result.config.window.group
    if (
        wanted is not None
        and not result.violations  # (a ledger's rows of a group the log lacks are violations)
        and not any(g["group"] == wanted for g in summary["groups"])
    ):
        # a typo must not read as a clean audit: nothing of it was audited
        raise AuditUsageError(
            f"group {wanted} has no claims in the coordination log read (names are "
            "case-sensitive; without --group the audit names every group): nothing audited"
        )
    for row in result.violations[:SHOWN_VIOLATIONS]:
        click.echo(f"marshal-audit: {violation_line(row)}", err=True)
    if len(result.violations) > SHOWN_VIOLATIONS:
        more = len(result.violations) - SHOWN_VIOLATIONS
        click.echo(
            f"marshal-audit: ... and {more} more in {result.config.out / 'violations'}", err=True
        )
    if as_json:
        click.echo(json.dumps(summary))
    else:
        clients = ", ".join(summary["clients"])
        click.echo(
            f"{summary['records']} records, {summary['claims']} claims "
            f"({summary['partitions_claimed']} partitions, clients {clients}), "
            f"{summary['failovers']} failovers, {summary['handovers']} handovers, "
            f"{summary['violations']} violations; report: {summary['report']}"
        )
    return EXIT_VIOLATIONS if result.violations else EXIT_CLEAN


def main() -> None:
    """Entry point: one line and the documented exit code for every failure."""
    run_command(audit, "marshal-audit")
