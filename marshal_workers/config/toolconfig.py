"""The fleet's settings for the tools: `marshal-admin` and `marshal-audit` read the fleet's TOML.

An operator should never re-type what the fleet runs with, and a tool that folds the log with
another heartbeat interval, partitioner or admin list than the workers reaches other verdicts.
So every tool command takes ``--config FILE.toml`` (the file `marshal-run` reads; also
``$MARSHAL_CONFIG``) and the settings it needs, as options built from the one settings table
(`settings.SETTINGS`), merged by the same `settings.resolve`: flag > ``MARSHAL_*`` environment >
TOML > default. Keys of the file the tool does not need (handler, mode, ...) are checked and
ignored; the ``[kafka]`` table goes to the tool's Kafka clients as it goes to the workers'.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import click

from marshal_workers.config.runconfig import admin_ids
from marshal_workers.config.settings import BY_NAME, Setting, heartbeat_ms, resolve
from marshal_workers.protocol.wire import Partitioner

F = TypeVar("F", bound=Callable[..., Any])

# What every tool needs of the fleet's settings (the group too, as a default for --group).
TOOL_SETTINGS = (
    "bootstrap_servers",
    "coordination_topic",
    "partitioner",
    "heartbeat_interval",
    "admin_client_ids",
)
_ALIASES: Mapping[str, tuple[str, ...]] = {"admin_client_ids": ("--admin-client-id",)}


# What a tool takes from the group's settings recorded in the log when no flag, variable or
# file gives it: the built-in default applies only to a group with none recorded.
FROM_THE_LOG = frozenset({"heartbeat_interval", "partitioner", "admin_client_ids"})


def setting_option(setting: Setting, *aliases: str, from_log: bool = False) -> Callable[[F], F]:
    """A click option for one setting of the table: its flag, help, default and env variable
    shown; the value is left None when not given (so that `resolve` applies precedence).
    ``from_log``: a tool reads the value from the group's settings in the log by default."""
    default = ", ".join(setting.default) if setting.multiple else setting.default
    shown = f" [default: {default}]" if default not in (None, "", ()) else ""
    if from_log:
        shown = f" [default: the group's settings in the log; with none recorded, {default}]"
    kind: Any = click.Choice(setting.choices) if setting.choices else click.STRING
    metavar = "[" + "|".join(setting.choices) + "]" if setting.choices else setting.metavar
    return click.option(
        setting.flag,
        *aliases,
        setting.name,
        type=kind,
        multiple=setting.multiple,
        default=None,
        metavar=metavar,
        help=f"{setting.help}{shown} [env: {setting.env}]",
    )


config_option = click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path),
    default=None,
    metavar="FILE.toml",
    help="Read settings from the fleet's TOML file (what marshal-run reads). "
    "Precedence: flag > MARSHAL_* environment > file > default. [env: MARSHAL_CONFIG]",
)


@dataclass(frozen=True, slots=True)
class FleetSettings:
    """What a tool folds and connects with: the workers' own settings."""

    bootstrap_servers: str = "127.0.0.1:9092"
    coordination_topic: str = "__marshal"
    partitioner: Partitioner = Partitioner.SPEC
    heartbeat_interval_ms: int = 10_000
    admin_client_ids: frozenset[str] | None = frozenset({"marshal-admin"})
    kafka: Mapping[str, str] = field(default_factory=dict)
    group: str | None = None
    sources: Mapping[str, str] = field(default_factory=dict)


def config_path(config_file: Path | None, environ: Mapping[str, str] | None = None) -> Path | None:
    """``--config``, else ``$MARSHAL_CONFIG``, else None."""
    env = os.environ if environ is None else environ
    if config_file is not None:
        return config_file
    return Path(env["MARSHAL_CONFIG"]) if env.get("MARSHAL_CONFIG") else None


def _split(values: Any) -> Any:
    """Repeated and comma- or space-separated list flags as one tuple (None if not given)."""
    if not values:
        return None
    return tuple(i for v in values for i in v.replace(" ", ",").split(",") if i.strip())


def fleet_settings(
    config_file: Path | None,
    flags: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
) -> FleetSettings:
    """Merge flags, environment, the TOML file and defaults (ConfigError, exit 2, if bad)."""
    given = {name: value for name, value in flags.items() if value not in (None, ())}
    if "admin_client_ids" in given:
        given["admin_client_ids"] = _split(given["admin_client_ids"])
    resolved = resolve(given, config_path(config_file, environ), environ)
    v = resolved.values
    return FleetSettings(
        bootstrap_servers=v["bootstrap_servers"],
        coordination_topic=v["coordination_topic"],
        partitioner=Partitioner(v["partitioner"]),
        heartbeat_interval_ms=heartbeat_ms(v["heartbeat_interval"]),
        admin_client_ids=admin_ids(v["admin_client_ids"]),
        kafka=dict(resolved.kafka),
        group=v["group"],
        sources=dict(resolved.sources),
    )


def fleet_options_of(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add ``--config`` and the options of the settings ``names`` (of `TOOL_SETTINGS`) to a
    click command; the command gets them merged as one ``fleet: FleetSettings`` keyword
    argument (a setting without its option: from the environment, the file or its default)."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapper(*args: Any, config_file: Path | None, **kwargs: Any) -> Any:
            flags = {name: kwargs.pop(name) for name in names}
            return func(*args, fleet=fleet_settings(config_file, flags), **kwargs)

        command: Callable[..., Any] = wrapper
        for name in reversed(names):
            option = setting_option(
                BY_NAME[name], *_ALIASES.get(name, ()), from_log=name in FROM_THE_LOG
            )
            command = option(command)
        return config_option(command)

    return decorate


fleet_options = fleet_options_of(*TOOL_SETTINGS)
# data topics (`topic create`, `produce`): only where the cluster is, and its [kafka] table
kafka_options = fleet_options_of("bootstrap_servers")
