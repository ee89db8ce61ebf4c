"""`RunConfig`: everything one supervisor runs with, built from the merged settings."""

from __future__ import annotations

import socket
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from marshal_workers.errors import ConfigError
from marshal_workers.protocol import Partitioner, validate_name
from marshal_workers.rationalizer import Mode
from marshal_workers.settings import BY_NAME, Resolved

REQUIRED = ("handler", "mode", "topic", "group")


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
    heartbeat_interval: float = 10.0
    batch_size: int = 500
    stop_timeout: float = 20.0
    auto_offset_reset: str = "earliest"
    max_handler_failures: int = 5
    log_json: bool = True
    kafka: Mapping[str, str] = field(default_factory=dict)
    instance_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    @property
    def heartbeat_interval_ms(self) -> int:
        """HB in milliseconds, as the rationalizer wants it."""
        return int(self.heartbeat_interval * 1000)


def default_client_id(instance: str) -> str:
    """HOSTNAME-INSTANCE: stable across restarts of one worker on one host."""
    host = socket.gethostname().split(".")[0] or "localhost"
    return validate_name("client id", f"{host}-{instance}")


def run_config(resolved: Resolved) -> RunConfig:
    """Check that the required settings are there and build the RunConfig."""
    v: Mapping[str, Any] = resolved.values
    missing = [BY_NAME[name].flag for name in REQUIRED if not v[name]]
    if missing:
        raise ConfigError(f"missing {', '.join(missing)} (see marshal-run --help)")
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
        heartbeat_interval=v["heartbeat_interval"],
        batch_size=v["batch_size"],
        stop_timeout=v["stop_timeout"],
        auto_offset_reset=v["auto_offset_reset"],
        max_handler_failures=v["max_handler_failures"],
        log_json=log_json,
        kafka=dict(resolved.kafka),
    )
