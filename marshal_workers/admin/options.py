"""The admin list option (``--admin-client-id``), shared by `marshal-admin` and `marshal-audit`.

Both fold the coordination log, and a fold needs the workers' ``admin_client_ids`` (it decides
which pauses count), so both take it the same way: repeatable, comma-separated lists, from
``MARSHAL_ADMIN_CLIENT_IDS`` too, ``*`` for anyone. Only click and the configuration here, so
the audit's command line stays quick to load.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click

from marshal_workers.config import ANY_CLIENT, DEFAULT_ADMIN_CLIENT_IDS
from marshal_workers.config import admin_ids as config_admin_ids
from marshal_workers.errors import ConfigError
from marshal_workers.protocol import validate_name

F = TypeVar("F", bound=Callable[..., Any])


def admin_ids_option(func: F) -> F:
    """Add --admin-client-id: the admin list the workers fold with (it decides pauses)."""
    return click.option(
        "--admin-client-id",
        "--admin-client-ids",
        "admin_client_ids",
        envvar="MARSHAL_ADMIN_CLIENT_IDS",
        multiple=True,
        default=DEFAULT_ADMIN_CLIENT_IDS,
        show_default=True,
        show_envvar=True,
        metavar="ID[,ID...]",
        help="Client ids that may pause a group ('*': any); must be the workers' "
        "admin_client_ids, or this command and the workers disagree on pauses.",
    )(func)


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
