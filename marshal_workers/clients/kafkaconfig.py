"""One librdkafka configuration builder for every Consumer, Producer and AdminClient the
package makes, and the settings safety pins.

`client_config` merges, each layer over the one before:

1. the package's defaults for every client (`SHARED_DEFAULTS`: librdkafka's log lines go to
   Python logging, through `rdkafka.RDKAFKA_GATE`, which holds them back while a supervisor
   starts and rate-limits them after; the short connect back-off);
2. this use's tuned defaults (``tuned``: a child consumer's fetch sizes, a producer's linger),
   which a user who knows better may override;
3. the user's ``[kafka]`` table (``user``), passed through as librdkafka takes it;
4. what this use needs to work at all (``fixed``: bootstrap servers, ``group.id``,
   ``client.id``, commits off, callbacks), never the user's to change;
5. what safety needs (``pinned``: `SAFE_PRODUCER`, `COORDINATION_READER`), last.

A ``[kafka]`` table that tries to change a pinned property is refused when the configuration is
read (`refuse_unsafe`, called by the table check: exit 2, one line naming the property and the
file), so layer 5 only ever repeats what the user was told; it stays for callers that build a
client from a table nobody checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from marshal_workers.clients.rdkafka import FAST_CONNECT, RDKAFKA_LOG
from marshal_workers.common.errors import ConfigError
from marshal_workers.common.secrets import shown

SHARED_DEFAULTS: Final[Mapping[str, Any]] = {"logger": RDKAFKA_LOG, **FAST_CONNECT}

# Writes to the coordination log, the topic record and dead letters: without acks=all an
# acknowledged record can be lost when a leader fails over; without idempotence a retried
# batch can be duplicated or reordered (a claim decided on an order no reader saw).
SAFE_PRODUCER: Final[Mapping[str, Any]] = {"acks": "all", "enable.idempotence": True}
# Every reader of the coordination log must fold the same records: read_committed (librdkafka's
# default) everywhere, whatever else reads the topic.
COORDINATION_READER: Final[Mapping[str, Any]] = {"isolation.level": "read_committed"}

# The values of a pinned property that are not a change (librdkafka's spellings).
_SAFE_SPELLINGS: Final[Mapping[str, frozenset[str]]] = {
    "acks": frozenset({"all", "-1"}),
    "enable.idempotence": frozenset({"true"}),
    "isolation.level": frozenset({"read_committed"}),
}
_WHY: Final[Mapping[str, str]] = {
    "acks": "the coordination log needs acks=all (an acknowledged claim must survive a "
    "leader failover)",
    "enable.idempotence": "the coordination log needs an idempotent producer (a retry must "
    "not duplicate or reorder records)",
    "isolation.level": "every reader of the coordination log must read read_committed",
}


def client_config(
    bootstrap_servers: str,
    user: Mapping[str, str] | None = None,
    *,
    tuned: Mapping[str, Any] | None = None,
    fixed: Mapping[str, Any] | None = None,
    pinned: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A librdkafka configuration, merged in the order the module documents."""
    return {
        **SHARED_DEFAULTS,
        **(tuned or {}),
        **(user or {}),
        "bootstrap.servers": bootstrap_servers,
        **(fixed or {}),
        **(pinned or {}),
    }


def refuse_unsafe(table: Mapping[str, str], source: str) -> None:
    """ConfigError (exit 2) if ``table`` sets a pinned property to anything but its safe value,
    or names the bootstrap servers (the ``bootstrap_servers`` setting does, for every client)."""
    for name, value in table.items():
        if name == "bootstrap.servers":
            raise ConfigError(
                f"[kafka] {name} from {source}: refused, set bootstrap_servers instead"
            )
        safe = _SAFE_SPELLINGS.get(name)
        if safe is not None and str(value).strip().lower() not in safe:
            raise ConfigError(
                f"[kafka] {name} = {shown(name, value)} from {source}: refused, {_WHY[name]}"
            )
