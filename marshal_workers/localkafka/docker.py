"""The thin Docker backend: one node in the official `apache/kafka` image via testcontainers.

Used only when asked for, or picked automatically when a Docker engine answers and
testcontainers is installed (it is an optional dependency). It runs a single node; the
container outlives the `start` command (testcontainers' reaper is disabled for it) and is
removed by `stop` with the docker CLI. Killing and restarting single nodes is a feature of
the process backends only.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import subprocess
from collections.abc import Mapping

from marshal_workers.common.errors import MarshalError
from marshal_workers.localkafka.paths import KAFKA_VERSION

IMAGE = f"apache/kafka:{KAFKA_VERSION}"
ENGINE_TIMEOUT_S = 3.0


def docker_engine_answers(env: Mapping[str, str] | None = None) -> bool:
    """Whether a Docker engine answers `docker info` within a few seconds."""
    env = os.environ if env is None else env
    docker = shutil.which("docker", path=env.get("PATH", ""))
    if docker is None:
        return False
    try:
        done = subprocess.run(
            [docker, "info", "--format", "{{.ServerVersion}}"],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=ENGINE_TIMEOUT_S,
            env=dict(env), check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def testcontainers_available() -> bool:
    """Whether the optional testcontainers package is importable."""
    return importlib.util.find_spec("testcontainers") is not None


def start_container(broker_port: int, env: Mapping[str, str] | None = None) -> str:
    """Start one KRaft node published on 127.0.0.1:`broker_port`; return the container id."""
    if not docker_engine_answers(env):
        raise MarshalError(
            "the docker backend needs a running Docker engine and `docker info` got no answer: "
            "start Docker, or use --backend maven"
        )
    if not testcontainers_available():
        raise MarshalError("the docker backend needs testcontainers: pip install testcontainers")
    # The container must outlive this command, so testcontainers' reaper must not watch it.
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    core = importlib.import_module("testcontainers.core.container")
    settings = {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": f"PLAINTEXT://:{broker_port},CONTROLLER://:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{broker_port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
        "KAFKA_NUM_PARTITIONS": "1",
    }
    container = core.DockerContainer(IMAGE)
    for key, value in settings.items():
        container = container.with_env(key, value)
    container = container.with_bind_ports(broker_port, ("127.0.0.1", broker_port))
    try:
        container.start()
    except Exception as exc:  # the docker SDK raises many kinds; report one line
        raise MarshalError(f"could not start the {IMAGE} container: {exc}") from exc
    return str(container.get_wrapped_container().id)


def container_running(container_id: str) -> bool:
    """Whether the container is running (False if docker cannot tell)."""
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        done = subprocess.run(
            [docker, "inspect", "-f", "{{.State.Running}}", container_id],
            stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=ENGINE_TIMEOUT_S * 3, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.strip() == "true"


def remove_container(container_id: str) -> None:
    """Force-remove the container (a no-op if it is already gone)."""
    docker = shutil.which("docker")
    if docker is None:
        return
    subprocess.run(
        [docker, "rm", "-f", container_id], stdin=subprocess.DEVNULL, capture_output=True,
        timeout=60, check=False,
    )  # fmt: skip
