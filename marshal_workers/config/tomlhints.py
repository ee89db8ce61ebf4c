"""Hints for a mistyped fleet TOML file: what the user most likely meant.

`did_you_mean` guesses the setting an unknown key stands for, as the command line does for a
mistyped option; `nested_kafka_key` finds an unquoted dotted key in the ``[kafka]`` table,
which TOML reads as nested tables (``security.protocol = "SSL"`` is ``security = {protocol =
"SSL"}``) where librdkafka wants the dotted name as one key.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from marshal_workers.common.secrets import MASK, is_secret_key


def did_you_mean(key: str, names: Iterable[str]) -> str:
    """`` (did you mean 'NAME'?)`` for the setting closest to ``key``, or ""."""
    close = difflib.get_close_matches(key.replace("-", "_"), list(names), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def nested_kafka_key(table: Mapping[str, Any]) -> str | None:
    """The hint for the first unquoted dotted key of a ``[kafka]`` table, or None."""
    for key, value in table.items():
        if isinstance(value, Mapping):
            dotted, leaf = _first_leaf(key, value)
            if is_secret_key(dotted):
                shown = f'"{MASK}"'
            else:
                shown = f'"{leaf}"' if isinstance(leaf, str) else repr(leaf).lower()
            return (
                f"[kafka] {dotted} is a nested table: TOML reads an unquoted dotted key as "
                f'tables; quote it: "{dotted}" = {shown}'
            )
    return None


def _first_leaf(prefix: str, table: Mapping[str, Any]) -> tuple[str, Any]:
    for key, value in table.items():
        if isinstance(value, Mapping):
            return _first_leaf(f"{prefix}.{key}", value)
        return f"{prefix}.{key}", value
    return prefix, {}
