"""pytest fixtures for a real local Apache Kafka, started by the code behind `marshal-admin kafka`.

- `kafka_bootstrap` (session): the `bootstrap.servers` of one KRaft node started in a temp
  dir for the whole session and stopped at its end; or `$MARSHAL_TEST_BOOTSTRAP` if set
  (then nothing is started). Tests using it are marked `@pytest.mark.kafka`.
- `secure_kafka` (session): one secured KRaft node (SASL/SCRAM over TLS, the StandardAuthorizer,
  no access without an ACL) as a `LocalKafka` handle: `.bootstrap`, `.admin_config_file` (the
  super user's ``--config``), `.client_table` (its ``[kafka]``), `.add_user(name)`. Started on
  first use and shared by every secured test; tests using it are marked `@pytest.mark.kafka`.
- `kafka_cluster3` (module): a three-node cluster as a `LocalKafka` handle (`.bootstrap`,
  `.kill_node(id)`, `.restart_node(id)`, `.leader_of(topic, partition)`). Tests using it are
  marked `@pytest.mark.cluster`.

A failure to start (no java, no mvn, a node that dies) fails the test with one line.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from marshal_workers.common.errors import MarshalError
from marshal_workers.localkafka import LocalKafka, StartOptions, start_cluster

BOOTSTRAP_ENV = "MARSHAL_TEST_BOOTSTRAP"


def _start(
    tmp_path_factory: pytest.TempPathFactory, nodes: int, secure: bool = False
) -> LocalKafka:
    """Start a cluster of `nodes` in a fresh temp dir, turning a MarshalError into a failure."""
    directory = tmp_path_factory.mktemp(f"kafka{nodes}{'s' if secure else ''}")
    try:
        return start_cluster(StartOptions(directory=directory, nodes=nodes, secure=secure))
    except MarshalError as exc:
        pytest.fail(f"could not start a local {nodes}-node Kafka: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """bootstrap.servers of a one-node local Kafka for the session (or $MARSHAL_TEST_BOOTSTRAP)."""
    given = os.environ.get(BOOTSTRAP_ENV)
    if given:
        yield given
        return
    cluster = _start(tmp_path_factory, nodes=1)
    try:
        yield cluster.bootstrap
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    """A secured one-node local Kafka for the session (SASL/SCRAM over TLS, ACLs required)."""
    cluster = _start(tmp_path_factory, nodes=1, secure=True)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def kafka_cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    """A three-node local Kafka for the module, with kill_node/restart_node/leader_of."""
    cluster = _start(tmp_path_factory, nodes=3)
    try:
        yield cluster
    finally:
        cluster.stop()
