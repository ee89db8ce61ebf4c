"""Asking a running cluster about itself through the Kafka protocol (confluent-kafka's admin).

Readiness means: every node, asked on its own listener, returns metadata that lists all
the cluster's brokers and a controller. `leader_of` reads a partition's leader the same
way. librdkafka's own connection-refused chatter while brokers boot is silenced.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaException

# confluent_kafka.admin re-exports these without an __all__, which mypy --strict refuses.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from marshal_workers.clients import roles
from marshal_workers.clients.kafkaconfig import client_config
from marshal_workers.clients.rdkafka import error_text
from marshal_workers.common.errors import MarshalError

POLL_INTERVAL_S = 0.2


class NotReadyError(MarshalError):
    """Some nodes did not become ready in time; `pending` names them."""

    def __init__(self, message: str, pending: frozenset[int]) -> None:
        super().__init__(message)
        self.pending = pending


_QUIET = logging.getLogger("marshal_workers.localkafka.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def quiet_admin(bootstrap: str, client: Mapping[str, str] | None = None) -> Any:
    """An AdminClient for `bootstrap` (as the principal of the librdkafka properties
    ``client``) that retries connections quickly and logs nowhere."""
    tuned = {
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 500,
        "socket.connection.setup.timeout.ms": 2000,
    }
    return roles.admin(client_config(bootstrap, client, tuned=tuned, fixed={"logger": _QUIET}))


def cluster_view(admin: Any, timeout: float) -> tuple[int, int] | None:
    """(brokers listed, controller id) from one metadata request, or None if none answered."""
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException:
        return None
    return len(metadata.brokers), int(metadata.controller_id)


def wait_until_ready(
    bootstraps: Mapping[int, str],
    *,
    expected_brokers: int,
    timeout: float,
    check: Callable[[], None],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    client: Mapping[str, str] | None = None,
) -> None:
    """Wait until each node in `bootstraps` reports `expected_brokers` brokers and a controller.

    `check` is called on every round and raises to abort (a node died). `NotReadyError` names
    the nodes still not ready when `timeout` seconds have passed.
    """
    deadline = clock() + timeout
    admins = {node_id: quiet_admin(bootstrap, client) for node_id, bootstrap in bootstraps.items()}
    pending = set(admins)
    while True:
        check()
        for node_id in sorted(pending):
            view = cluster_view(admins[node_id], timeout=1.0)
            if view is not None and view[0] == expected_brokers and view[1] >= 0:
                pending.discard(node_id)
        if not pending:
            return
        if clock() > deadline:
            names = ", ".join(str(n) for n in sorted(pending))
            raise NotReadyError(
                f"kafka node(s) {names} did not report {expected_brokers} broker(s) "
                f"and a controller within {timeout:.0f}s",
                frozenset(pending),
            )
        sleep(POLL_INTERVAL_S)


def leader_of(
    bootstrap: str,
    topic: str,
    partition: int,
    timeout: float = 10.0,
    client: Mapping[str, str] | None = None,
) -> int | None:
    """The node id leading `topic`/`partition` now, or None if it has no leader (or no such)."""
    try:
        metadata = quiet_admin(bootstrap, client).list_topics(topic=topic, timeout=timeout)
    except KafkaException:
        return None
    described = metadata.topics.get(topic)
    if described is None or described.error is not None:
        return None
    found = described.partitions.get(partition)
    if found is None or found.leader < 0:
        return None
    return int(found.leader)


def upsert_scram_user(
    bootstrap: str,
    client: Mapping[str, str],
    user: str,
    password: str,
    mechanism: str,
    iterations: int,
    timeout: float,
) -> None:
    """Create or reset the SCRAM credential of ``user`` (as the principal of ``client``)."""
    info = ScramCredentialInfo(getattr(ScramMechanism, mechanism.replace("-", "_")), iterations)
    upsertion = UserScramCredentialUpsertion(user, info, password.encode())
    admin = quiet_admin(bootstrap, client)
    try:
        admin.alter_user_scram_credentials([upsertion], request_timeout=timeout)[user].result(
            timeout=timeout
        )
    except KafkaException as exc:
        raise MarshalError(f"cannot create the SCRAM user {user}: {error_text(exc)}") from None
