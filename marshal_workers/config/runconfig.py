"""`RunConfig`: everything one supervisor runs with, built from the merged settings."""

from __future__ import annotations

import socket
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marshal_workers.common.errors import ConfigError
from marshal_workers.config.settings import BY_NAME, Resolved, heartbeat_ms
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.slicing import WHOLE, Ordering, Slicing
from marshal_workers.protocol.wire import Partitioner, validate_name

REQUIRED = ("handler", "mode", "topic", "group")
DEFAULT_ADMIN_CLIENT_IDS = ("marshal-admin",)
ANY_CLIENT = "*"


def admin_ids(ids: Iterable[str]) -> frozenset[str] | None:
    """The rationalizer's admin list from the ``admin_client_ids`` setting: None (anyone may
    pause the group) if ``*`` is listed, else exactly the ids given (none: nobody may)."""
    listed = frozenset(ids)
    return None if ANY_CLIENT in listed else listed


@dataclass(frozen=True, slots=True)
class RunConfig:
    """A supervisor's configuration (times in seconds)."""

    handler: str
    mode: Mode
    topics: tuple[str, ...]
    group: str
    client_id: str
    bootstrap_servers: str = "127.0.0.1:9092"
    coordination_topic: str = "__marshal"
    partitioner: Partitioner = Partitioner.SPEC
    slicing: Slicing = WHOLE  # the ordering and workers per partition
    slice_reads: str = "host"  # a sliced partition read once per host (`child.reader`) or child
    coordination_span: int | None = None  # a new placed group's window (None: auto)
    heartbeat_interval: float = 10.0
    batch_size: int = 500
    amo_window: int = 32000  # AMO: reserved and not handled, at most (the loss on a crash)
    child_nice: int = 10  # added to a child's nice once it is set up (its handler's thread)
    stop_timeout: float = 20.0
    handler_timeout: float = 300.0  # 0: no deadline
    auto_offset_reset: str = "earliest"
    max_handler_failures: int = 5
    retries: int = 3
    retry_backoff: float = 0.5
    on_failure: str = "stop"
    dlq_topic: str = "{topic}.dlq"
    max_poison_rate: int = 60
    restart_backoff: float = 0.5
    poison_park_after: int = 10  # 0: never
    poison_park_time: float = 0.0  # 0: until an operator decides
    log_json: bool = True
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    kafka: Mapping[str, str] = field(default_factory=dict)
    admin_client_ids: frozenset[str] | None = frozenset(DEFAULT_ADMIN_CLIENT_IDS)
    instance_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    @property
    def heartbeat_interval_ms(self) -> int:
        """HB in milliseconds, as the rationalizer wants it."""
        return heartbeat_ms(self.heartbeat_interval)


MACHINE_ID = Path("/etc/machine-id")
_LOCAL_NAMES = ("localhost", "localhost.localdomain", "localhost6.localdomain6")


def host_identity(
    fqdn: Callable[[], str] = socket.getfqdn, machine_id_file: Path = MACHINE_ID
) -> str:
    """This host's name for client ids: the fully qualified host name (``w1.dc1``, never the
    short ``w1`` that ``w1.dc2`` shares); where the host has no qualified name, its short name
    and the first 12 digits of its machine id (``/etc/machine-id``), unique per installation."""
    name = "".join(c for c in fqdn().strip() if c.isprintable() and not c.isspace() and c != "/")
    if "." in name and name.lower() not in _LOCAL_NAMES and not name.startswith("localhost."):
        return name
    short = name.split(".")[0] or "localhost"
    try:
        machine = machine_id_file.read_text().strip()
    except OSError:
        machine = ""
    return f"{short}-{machine[:12]}" if machine.isalnum() else short


def default_client_id(instance: str, host: str | None = None) -> str:
    """HOST-INSTANCE (HOST: `host_identity`): stable across restarts of one worker on one host,
    and different on two hosts that share a short name."""
    return validate_name("client id", f"{host or host_identity()}-{instance}")


def run_config(resolved: Resolved) -> RunConfig:
    """Check that the required settings are there and build the RunConfig."""
    v: Mapping[str, Any] = resolved.values
    missing = [BY_NAME[name].flag for name in REQUIRED if not v[name]]
    if missing:
        raise ConfigError(f"missing {', '.join(missing)} (see marshal-run --help)")
    if v["amo_window"] < 2 * v["batch_size"]:
        raise ConfigError(
            f"amo_window {v['amo_window']} is below 2 x batch_size ({2 * v['batch_size']}): "
            "a child reserves a batch while it handles the one before"
        )
    try:
        slicing = Slicing(Ordering(v["ordering"]), v["workers_per_partition"])
    except ValueError as exc:
        raise ConfigError(f"{exc} (--ordering, --workers-per-partition)") from None
    log_format = v["log_format"]
    log_json = log_format == "json" or (log_format == "auto" and not sys.stderr.isatty())
    return RunConfig(
        handler=v["handler"],
        mode=Mode(v["mode"]),
        topics=tuple(dict.fromkeys(v["topic"])),
        group=v["group"],
        client_id=v["client_id"] or default_client_id(v["instance"]),
        bootstrap_servers=v["bootstrap_servers"],
        coordination_topic=v["coordination_topic"],
        partitioner=Partitioner(v["partitioner"]),
        slicing=slicing,
        slice_reads=v["slice_reads"],
        coordination_span=None if v["coordination_span"] == "auto" else v["coordination_span"],
        heartbeat_interval=v["heartbeat_interval"],
        batch_size=v["batch_size"],
        amo_window=v["amo_window"],
        child_nice=v["child_nice"],
        stop_timeout=v["stop_timeout"],
        handler_timeout=v["handler_timeout"],
        auto_offset_reset=v["auto_offset_reset"],
        max_handler_failures=v["max_handler_failures"],
        retries=v["retries"],
        retry_backoff=v["retry_backoff"],
        on_failure=v["on_failure"],
        dlq_topic=v["dlq_topic"],
        max_poison_rate=v["max_poison_rate"],
        restart_backoff=v["restart_backoff"],
        poison_park_after=v["poison_park_after"],
        poison_park_time=v["poison_park_time"],
        log_json=log_json,
        metrics_port=v["metrics_port"],
        metrics_host=v["metrics_host"],
        kafka=dict(resolved.kafka),
        admin_client_ids=admin_ids(v["admin_client_ids"]),
    )
