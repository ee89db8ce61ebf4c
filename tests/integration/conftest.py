"""What the integration tests share: `make_fleet`, which makes the fleets of real `marshal-run`
supervisors the end-to-end tests drive (`fleet.Fleet`) and closes them; and for the child tests
(`childrun`), a fresh data topic, the ledger directory, and `spawn`, which starts a real child
whose supervisor the test plays."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from marshal_workers.childlink.sharedlease import SharedLease
from marshal_workers.common.ledgerfile import DIR_ENV
from marshal_workers.ipc.messages import ChildSpec
from marshal_workers.supervisor.childprocess import start_child
from tests.integration.childrun import MP, LeaseKeeper, Supervised
from tests.integration.fleet import Fleet, MakeFleet


@pytest.fixture
def make_fleet(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[MakeFleet]:
    """Make fleets (`Fleet`'s keyword arguments) on the session broker, or on ``bootstrap``
    if given (a three-node cluster's); the first in the test's ``tmp_path``, each other one in
    a directory of its own (ledger, logs, client-id locks). Every fleet is closed at the end."""
    made: list[Fleet] = []

    def make(*, bootstrap: str | None = None, **kwargs: Any) -> Fleet:
        root = tmp_path
        if made:
            root = tmp_path / f"fleet{len(made)}"
            root.mkdir()
        servers = bootstrap or request.getfixturevalue("kafka_bootstrap")
        fleet = Fleet(servers, root, **kwargs)
        made.append(fleet)
        return fleet

    yield make
    for fleet in made:
        fleet.close()


@pytest.fixture
def topic(kafka_bootstrap: str) -> Iterator[str]:
    """A fresh three-partition data topic and its one-partition dead-letter topic, deleted
    afterwards."""
    name = f"child-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics(
        [NewTopic(name, 3, 1), NewTopic(f"{name}.dlq", 1, 1)]
    ).values():
        future.result(15)
    yield name
    for future in admin.delete_topics([name, f"{name}.dlq"]).values():
        future.result(15)


@pytest.fixture
def ledger_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The ledger directory, in the environment children inherit."""
    path = tmp_path / "ledger"
    monkeypatch.setenv(DIR_ENV, str(path))
    return path


@pytest.fixture
def spawn() -> Iterator[Callable[[ChildSpec], Supervised]]:
    """Start children with a kept lease; kill whatever is left at the end."""
    started: list[Supervised] = []

    def run(spec: ChildSpec) -> Supervised:
        lease = SharedLease(MP)
        child = Supervised(start_child(spec, lease, MP), LeaseKeeper(lease))
        started.append(child)
        return child

    yield run
    for child in started:
        child.keeper.freeze()
        child.handle.signal_group(signal.SIGKILL)
        child.handle.join(10)
        child.handle.close()
