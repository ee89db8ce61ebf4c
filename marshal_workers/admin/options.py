"""The admin list from option values: repeatable, comma-separated, ``*`` for anyone.

The options themselves come from the settings table (`toolconfig.fleet_options`).
"""

from __future__ import annotations

from collections.abc import Iterable

from marshal_workers.common.errors import ConfigError
from marshal_workers.config.runconfig import ANY_CLIENT
from marshal_workers.config.runconfig import admin_ids as config_admin_ids
from marshal_workers.protocol.wire import validate_name


def admin_ids(values: Iterable[str]) -> frozenset[str] | None:
    """The admin list from repeated and comma-separated values (ConfigError if malformed)."""
    ids = tuple(i.strip() for v in values for i in v.replace(" ", ",").split(",") if i.strip())
    try:
        for item in ids:
            if item != ANY_CLIENT:
                validate_name("admin client id", item)
    except ValueError as exc:
        raise ConfigError(f"--admin-client-id: {exc}") from None
    return config_admin_ids(ids)
