"""Every `marshal-run` setting, defined once: name, type, default, check and help.

The one table drives the command-line flags, the ``MARSHAL_*`` environment variables, the TOML
file and the help text. Precedence, lowest first: default, TOML (``--config``), environment,
flag. A bad value from any source is refused with one line naming the setting and its source.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marshal_workers.clients.tablecheck import check_kafka_table
from marshal_workers.common.errors import ConfigError
from marshal_workers.config.kafkatable import kafka_table, toml_values
from marshal_workers.config.tomlhints import did_you_mean, nested_kafka_key
from marshal_workers.protocol.slicing import MAX_SLICES
from marshal_workers.protocol.wire import validate_name

Parse = Callable[[str], Any]
SECTIONS = ("Work", "Identity", "Kafka", "Timing", "Errors", "Output")  # the order of help and docs


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting. ``parse`` turns text (flag, environment) into a value and raises ValueError
    with the reason; a value from any source (TOML included) must be one of ``choices`` (if
    given) and pass ``check``."""

    name: str
    default: Any
    help: str
    section: str
    parse: Parse = str
    check: Callable[[Any], None] | None = None
    multiple: bool = False
    metavar: str = "TEXT"
    choices: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        """The command-line flag, e.g. ``--heartbeat-interval``."""
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        """The environment variable, e.g. ``MARSHAL_HEARTBEAT_INTERVAL``."""
        return "MARSHAL_" + self.name.upper()


MAX_SECONDS = 86_400.0  # one day: the largest time any setting takes
MAX_COUNT = 10_000_000  # the largest count any setting takes


def heartbeat_ms(seconds: float) -> int:
    """HB in whole milliseconds, as the rationalizer folds with it: rounded to the nearest ms.

    The one conversion every process uses (workers, admin, audit), so that they never judge a
    claim with intervals 1 ms apart (``int(1.001 * 1000)`` is 1000, not 1001)."""
    return max(1, round(seconds * 1000))


def _seconds(minimum: float) -> Parse:
    def parse(text: str) -> float:
        said = f"must be a number of seconds from {minimum:g} to {MAX_SECONDS:g}"
        try:
            value = float(text)
        except ValueError:  # (float()'s own words name Python, not the setting)
            raise ValueError(said) from None
        if not math.isfinite(value) or not minimum <= value <= MAX_SECONDS:
            raise ValueError(said)
        return value

    return parse


_positive_float = _seconds(0.001)
_non_negative_float = _seconds(0.0)  # seconds where 0 means "off"


def _count(minimum: int, maximum: int = MAX_COUNT) -> Parse:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # (int()'s own words name Python, not the setting)
            raise ValueError(f"must be a whole number from {minimum} to {maximum}") from None
        if not minimum <= value <= maximum:
            raise ValueError(f"must be a whole number from {minimum} to {maximum}")
        return value

    return parse


_positive_int = _count(1)
_non_negative_int = _count(0)


_SPAN_SAID = f"must be auto or a whole number from 1 to {MAX_COUNT}"


def _span(text: str) -> str | int:
    """``auto`` or a whole number of coordination partitions."""
    if text == "auto":
        return "auto"
    try:
        count: int = _count(1)(text)
    except ValueError:  # (not "a whole number" alone: auto is one of its values)
        raise ValueError(_SPAN_SAID) from None
    return count


def _check_span(value: Any) -> None:
    if value != "auto" and (type(value) is not int or not 1 <= value <= MAX_COUNT):
        raise ValueError(_SPAN_SAID)


# The port is required: the message asks for HOST:PORT, and a host alone would be tried on
# librdkafka's 9092, a port nobody named.
_HOST_PORT = re.compile(
    r"^(?:[A-Za-z_]+://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9._-]*):(\d{1,5})$"
)


def check_bootstrap_servers(value: Any) -> None:
    """HOST:PORT[,HOST:PORT...] (an optional PROTOCOL:// prefix, [IPv6] hosts); ValueError
    saying which entry is wrong. A malformed list is a usage error, not an unreachable broker."""
    text = str(value)
    entries = [e.strip() for e in text.split(",")]
    if not text.strip() or not all(entries):
        raise ValueError("must be HOST:PORT[,HOST:PORT...] with no empty entry")
    for entry in entries:
        match = _HOST_PORT.match(entry)
        if match is None or not 0 < int(match.group(1)) < 65536:
            raise ValueError(f"{entry!r} is not HOST:PORT (expected HOST:PORT[,HOST:PORT...])")


def _dlq_topic(value: Any) -> None:
    name = str(value).replace("{topic}", "t")
    if not (
        0 < len(name) <= 249 and all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    ):
        raise ValueError(
            "must be a Kafka topic name (letters, digits, '.', '_', '-'), "
            "in which {topic} stands for the source topic"
        )


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError("must be a TCP port, 1 to 65535 (0: any free port, logged)")
    return value


def _name(what: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        for item in value if isinstance(value, tuple) else (value,):
            validate_name(what, item)

    return check


def _admin_ids(value: Any) -> None:
    for item in value:
        if item != "*":
            validate_name("admin client id", item)


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "handler",
        None,
        "The handler: MODULE:ATTR, or the name of an entry point in the "
        "group marshal_workers.handlers.",
        "Work",
        metavar="MOD:ATTR|NAME",
    ),
    Setting(
        "mode",
        None,
        "Delivery: amo (claim each batch in the log before handling it: "
        "at most once) or alo (handle, then commit: at least once). Same value on every member: "
        "the group's first member records it, another is refused (change it with marshal-admin "
        "group-settings --change --mode).",
        "Work",
        choices=("amo", "alo"),
    ),
    Setting(
        "ordering",
        "partition",
        "What one worker (child process) holds: partition (a whole partition, records in "
        "offset order: the default, Marshal Go's); key (one of N key slices of a partition: "
        "records of one key in offset order, never two at once, across the fleet); unordered "
        "(one of N offset stripes: no order, no worker idle while another holds a backlog). "
        "Each slice is claimed, leased and fenced as a partition is (--slice-reads says who "
        "reads the partition). Fixed for a group by its first member (docs/ordering.md).",
        "Work",
        choices=("partition", "key", "unordered"),
    ),
    Setting(
        "workers_per_partition",
        1,
        "N, with ordering key or unordered: the slices each partition is cut into, so the most "
        "workers one partition has across the fleet (one member may run them all; fair share "
        "counts slices). Must be 1 with ordering partition. Same value on every member.",
        "Work",
        parse=_count(1, MAX_SLICES),
        metavar="N",
    ),
    Setting(
        "slice_reads",
        "host",
        "With ordering key or unordered: host (one reader process per partition on each host "
        "fetches it once and hands each slice's child its records: the broker sends a record "
        "once per host) or child (each slice's child reads the whole partition itself: N "
        "reads for N slices).",
        "Work",
        choices=("host", "child"),
    ),
    Setting(
        "topic",
        (),
        "A topic to consume (repeat for several).",
        "Work",
        multiple=True,
        check=_name("topic"),
        metavar="TOPIC",
    ),
    Setting(
        "group",
        None,
        "The consumer group, shared by every member of the fleet.",
        "Work",
        check=_name("group"),
        metavar="GROUP",
    ),
    Setting(
        "client_id",
        None,
        "This member's stable id (no '/'). Restarting with the same id "
        "within the heartbeat window resumes its claims. Default: FQDN-INSTANCE (the fully "
        "qualified host name; without one, HOSTNAME-MACHINEID).",
        "Identity",
        check=_name("client id"),
        metavar="ID",
    ),
    Setting(
        "instance",
        "0",
        "Names this worker among several on one host (systemd's %i); "
        "used in the default client id.",
        "Identity",
        check=_name("instance"),
        metavar="NAME",
    ),
    Setting(
        "bootstrap_servers",
        "127.0.0.1:9092",
        "Kafka brokers, HOST:PORT[,...].",
        "Kafka",
        check=check_bootstrap_servers,
        metavar="HOST:PORT",
    ),
    Setting(
        "coordination_topic",
        "__marshal",
        "The coordination topic (see marshal-admin init).",
        "Kafka",
        check=_name("coordination topic"),
        metavar="NAME",
    ),
    Setting(
        "partitioner",
        "spec",
        "How claims map to coordination partitions: spec, or "
        "marshal-go (md5 of the topic only, the Go implementation's layout; a mixed fleet "
        "with Go is unsafe all the same: see docs/migrating.md).",
        "Kafka",
        choices=("spec", "marshal-go"),
    ),
    Setting(
        "coordination_span",
        "auto",
        "A new placed group's window: how many coordination partitions its claims are spread "
        "over (its members read those and its home, nothing else). auto: one per 10,000 "
        "claims. Recorded by the group's first member on a topic whose new groups are placed "
        "(marshal-admin init); a member whose number differs from the recorded one is refused.",
        "Kafka",
        parse=_span,
        check=_check_span,
        metavar="auto|N",
    ),
    Setting(
        "heartbeat_interval",
        10.0,
        "Heartbeat interval HB in seconds. Heartbeats go out "
        "every HB/2; a claim is stale after 2*HB without one. Same value on every member.",
        "Timing",
        parse=_positive_float,
        metavar="SECONDS",
    ),
    Setting(
        "batch_size",
        500,
        "Records a child fetches and handles per batch.",
        "Timing",
        parse=_positive_int,
        metavar="N",
    ),
    Setting(
        "amo_window",
        32000,
        "AMO: the most records a child may have reserved in the coordination log and not yet "
        "handled, so the most a crash (kill -9, a lease run out, a handler failure under stop) "
        "can lose; a graceful stop loses none. A child reserves up to half of it in one record "
        "and asks for the next while it handles one; each reservation also covers no more "
        "than about 0.5 s of its own handling at its recent time per record (one record at "
        "least, and then nothing asked ahead) and about 4 MiB of records, so a crash loses "
        "about a second of handling, or one record that takes longer, whatever the batch "
        "size. Larger costs the log fewer records per handled one where handling is fast. At "
        "least 2 x batch_size.",
        "Timing",
        parse=_positive_int,
        metavar="RECORDS",
    ),
    Setting(
        "child_nice",
        10,
        "How much lower than the supervisor's the CPU priority of each child's handler runs "
        "(added to its nice value, 0-19; 0: the same), once the child is set up and its first "
        "record dealt with (at most a tenth of a second after setup: that record is not handled "
        "behind its siblings still starting). Busy handlers then cannot starve the supervisor, "
        "the host's readers and starting children of CPU: with 64 CPU-bound children on 2 "
        "cores and the same priority, children started seconds late and leases ran out "
        "(docs/benchmarks.md). Only the handler's thread is lowered (threads it starts once "
        "lowered inherit it: a plugin's, the dead-letter producer's); against other processes "
        "of the host the handlers run at this lower priority (where Linux schedules each "
        "session as a group, autogroup, the children's session group is given it at once).",
        "Timing",
        parse=_count(0, 19),
        metavar="N",
    ),
    Setting(
        "stop_timeout",
        20.0,
        "How long a graceful stop (TERM) may take before children are killed.",
        "Timing",
        parse=_positive_float,
        metavar="SECONDS",
    ),
    Setting(
        "handler_timeout",
        300.0,
        "Deadline of one handler call (a handle_batch plugin: one batch). A call past it is "
        "a failure: the child's whole process group is killed and on_failure applies to the "
        "record. ctx.keepalive() gives the current call one more timeout, never past the "
        "lease. 0: no deadline.",
        "Timing",
        parse=_non_negative_float,
        metavar="SECONDS",
    ),
    Setting(
        "auto_offset_reset",
        "earliest",
        "Where to start a partition nobody has committed: earliest or latest.",
        "Work",
        choices=("earliest", "latest"),
    ),
    Setting(
        "max_handler_failures",
        5,
        "With on_failure stop: child restarts (with backoff) on a failing record before the "
        "partition is released and its child stopped (failures count while nothing in between "
        "succeeds).",
        "Errors",
        parse=_positive_int,
        metavar="N",
    ),
    Setting(
        "retries",
        3,
        "Retries of a failed handler call, in the child, on the same record (a handle_batch "
        "plugin: the whole batch), before on_failure applies.",
        "Errors",
        parse=_non_negative_int,
        metavar="N",
    ),
    Setting(
        "retry_backoff",
        0.5,
        "Wait before the first retry; it doubles with each retry, up to 30 s. The lease is "
        "checked throughout: a retry never outlives it.",
        "Errors",
        parse=_positive_float,
        metavar="SECONDS",
    ),
    Setting(
        "on_failure",
        "stop",
        "After the retries: dlq (write the record to the dead-letter topic and go on), skip "
        "(log, count and go on) or stop (the child stops; see max_handler_failures).",
        "Errors",
        choices=("dlq", "skip", "stop"),
    ),
    Setting(
        "dlq_topic",
        "{topic}.dlq",
        "The dead-letter topic for on_failure dlq ({topic}: the source topic). It must exist.",
        "Errors",
        check=_dlq_topic,
        metavar="NAME",
    ),
    Setting(
        "max_poison_rate",
        60,
        "More records than this dead-lettered or skipped within a minute means something is "
        "systematically wrong: the child stops instead (0: no limit).",
        "Errors",
        parse=_non_negative_int,
        metavar="N",
    ),
    Setting(
        "restart_backoff",
        0.5,
        "Wait before restarting a child whose handler failed (or that crashed); it doubles "
        "with each consecutive failure, up to 30 s.",
        "Errors",
        parse=_positive_float,
        metavar="SECONDS",
    ),
    Setting(
        "poison_park_after",
        10,
        "ALO: failures of one record, counted in the coordination log across restarts, "
        "releases and members, after which it is parked: the partition's holder runs no "
        "child until marshal-admin skip-record or retry-record (or poison_park_time). "
        "0: never park.",
        "Errors",
        parse=_non_negative_int,
        metavar="N",
    ),
    Setting(
        "poison_park_time",
        0.0,
        "How long a parked record stays parked before the fleet tries it once more on its "
        "own (log time); 0: until an operator decides.",
        "Errors",
        parse=_non_negative_float,
        metavar="SECONDS",
    ),
    Setting(
        "admin_client_ids",
        ("marshal-admin",),
        "Client ids that may pause the group (ReleaseGroup, used by marshal-admin "
        "release-group and set-position); '*' lets any client pause it. Every member and "
        "every marshal-admin command must use the same list, or they disagree on pauses.",
        "Identity",
        multiple=True,
        check=_admin_ids,
        metavar="ID",
    ),
    Setting(
        "log_format",
        "auto",
        "Log lines as json, console, or auto (console on a terminal).",
        "Output",
        choices=("auto", "json", "console"),
    ),
    Setting(
        "metrics_port",
        None,
        "Serve Prometheus metrics on /metrics, and /healthz and /readyz, on this TCP port "
        "(default: no server).",
        "Output",
        parse=_port,
        metavar="PORT",
    ),
    Setting(
        "metrics_host",
        "127.0.0.1",
        "The address the metrics server binds (0.0.0.0 or :: for every interface).",
        "Output",
        metavar="ADDRESS",
    ),
)
BY_NAME: Mapping[str, Setting] = {s.name: s for s in SETTINGS}


@dataclass(frozen=True, slots=True)
class Resolved:
    """Setting values after merging every source, plus the pass-through ``[kafka]`` table."""

    values: Mapping[str, Any]
    kafka: Mapping[str, str]
    sources: Mapping[str, str]


def _apply(setting: Setting, value: Any, source: str) -> Any:
    """Parse a value from ``source`` (text from flags and environment, typed from TOML)."""
    try:
        if setting.multiple:
            items = value.split(",") if isinstance(value, str) else list(value)
            parsed: Any = tuple(setting.parse(str(v)) for v in items if str(v))
        else:
            parsed = setting.parse(str(value))
        if setting.choices:
            for item in parsed if setting.multiple else (parsed,):
                if item not in setting.choices:
                    raise ValueError(f"must be one of {', '.join(setting.choices)}")
        if setting.check is not None:
            setting.check(parsed)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{setting.name} = {value!r} from {source}: {exc}") from None
    return parsed


def load_toml(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The settings and the ``[kafka]`` table of a TOML file; ConfigError on anything unknown."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    kafka = data.pop("kafka", {})
    if not isinstance(kafka, dict):
        raise ConfigError(f"config file {path}: [kafka] must be a table of librdkafka settings")
    if (nested := nested_kafka_key(kafka)) is not None:
        raise ConfigError(f"config file {path}: {nested}")
    values: dict[str, Any] = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in BY_NAME:
            hint = did_you_mean(key, BY_NAME)
            raise ConfigError(f"config file {path}: unknown setting {key!r}{hint}")
        values[name] = value
    return values, toml_values(kafka, str(path))


def resolve(
    flags: Mapping[str, Any], config_file: Path | None, environ: Mapping[str, str] | None = None
) -> Resolved:
    """Merge default < TOML < environment < flags, checking every value from its source.

    ``flags`` holds only the flags given (a value of None or () means not given)."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for s in SETTINGS:
        values[s.name] = tuple(s.default) if s.multiple else s.default
        sources[s.name] = "default"
    from_file: dict[str, Any] = {}
    toml_kafka: dict[str, str] = {}
    if config_file is not None:
        from_file, toml_kafka = load_toml(config_file)
    table = kafka_table(toml_kafka, str(config_file), env)
    kafka = dict(table.values)
    check_kafka_table(kafka, table.sources)
    for name, value in from_file.items():
        values[name] = _apply(BY_NAME[name], value, f"{config_file}")
        sources[name] = str(config_file)
    for s in SETTINGS:
        if s.env in env and env[s.env] != "":
            values[s.name] = _apply(s, env[s.env], f"${s.env}")
            sources[s.name] = f"${s.env}"
    for name, value in flags.items():
        if value is None or value == ():
            continue
        s = BY_NAME[name]
        values[name] = _apply(s, value, s.flag)
        sources[name] = s.flag
    return Resolved(values, kafka, sources)


def help_epilog(settings: Sequence[Setting] = SETTINGS) -> str:
    """The environment variables, listed for --help."""
    names = ", ".join(s.env for s in settings)
    return (
        "Every option can also come from a TOML file (--config; keys as the option names, "
        "plus a [kafka] table passed to librdkafka) and from the environment: "
        f"{names}. Precedence: flag > environment > file > default."
    )
