"""Which Kafka to run, and the Java classpath for it.

`auto` (the default; `--backend` or `$MARSHAL_KAFKA_BACKEND` override it) picks, in order:

1. `kafka-home` when `$KAFKA_HOME` is set: the jars of that distribution (`libs/*`);
2. `docker` when a Docker engine answers and testcontainers is installed, for one node
   (if testcontainers is missing, a one-line note says so and Maven is used instead);
3. `maven`: the pinned Kafka jars resolved by Maven into the jar cache.

The engine probe and the testcontainers check are parameters, so tests fake them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from marshal_workers.common.errors import ConfigError
from marshal_workers.localkafka import docker
from marshal_workers.localkafka.jars import kafka_home_classpath, resolve_jars
from marshal_workers.localkafka.paths import BACKEND_ENV, Progress, no_progress

BACKENDS = ("auto", "maven", "kafka-home", "docker")


@dataclass(frozen=True, slots=True)
class BackendChoice:
    """The backend to use and a human line saying why."""

    name: str
    reason: str


def choose_backend(
    requested: str | None,
    env: Mapping[str, str],
    nodes: int = 1,
    engine_answers: Callable[[], bool] | None = None,
    has_testcontainers: Callable[[], bool] = docker.testcontainers_available,
) -> BackendChoice:
    """Resolve `requested` (None: `$MARSHAL_KAFKA_BACKEND`, else auto) to a concrete backend."""
    wanted = requested or env.get(BACKEND_ENV) or "auto"
    if wanted not in BACKENDS:
        raise ConfigError(f"unknown kafka backend {wanted!r}: choose one of {', '.join(BACKENDS)}")
    if wanted == "kafka-home" and not env.get("KAFKA_HOME"):
        raise ConfigError("--backend kafka-home needs KAFKA_HOME set to a Kafka distribution")
    if wanted == "docker" and nodes != 1:
        raise ConfigError("the docker backend runs 1 node; use --backend maven for 3")
    if wanted != "auto":
        return BackendChoice(wanted, f"backend {wanted} (requested)")
    if env.get("KAFKA_HOME"):
        return BackendChoice("kafka-home", f"backend kafka-home (KAFKA_HOME={env['KAFKA_HOME']})")
    probe = engine_answers or (lambda: docker.docker_engine_answers(env))
    if nodes == 1 and probe():
        if has_testcontainers():
            return BackendChoice("docker", "backend docker (a Docker engine answers)")
        return BackendChoice(
            "maven",
            "a Docker engine answers but testcontainers is not installed "
            "(pip install testcontainers); using backend maven",
        )
    return BackendChoice("maven", "backend maven (no KAFKA_HOME, no Docker engine)")


def classpath_for(
    choice: BackendChoice, env: Mapping[str, str], cache_dir: Path, progress: Progress = no_progress
) -> str:
    """The `-cp` value for a process backend (resolving the Maven jars if needed)."""
    if choice.name == "kafka-home":
        return kafka_home_classpath(Path(env["KAFKA_HOME"]))
    if choice.name == "maven":
        return f"{resolve_jars(cache_dir, env, progress)}/*"
    raise ValueError(f"backend {choice.name} runs no local java process")
