"""Where a local Kafka keeps things: the jar cache (shared, outside the repo) and a cluster dir.

Both are decided here from an environment mapping, so the choice is testable without
touching the real environment:

- jar cache: `$MARSHAL_KAFKA_CACHE`, else `$XDG_CACHE_HOME/marshal-workers/kafka-VERSION`,
  else `~/.cache/marshal-workers/kafka-VERSION`. It is reused across runs and checkouts.
- cluster dir: `$MARSHAL_KAFKA_DIR`, else `./.marshal/kafka`. It holds the state file and
  one directory per node (properties, data, logs).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path

from marshal_workers.localkafka.maven import cache_dir_for

KAFKA_VERSION = "4.2.2"
"""The Apache Kafka release the pom pins; the cache directory is named after it."""

CACHE_ENV = "MARSHAL_KAFKA_CACHE"
DIR_ENV = "MARSHAL_KAFKA_DIR"
BACKEND_ENV = "MARSHAL_KAFKA_BACKEND"
JVM_OPTS_ENV = "MARSHAL_KAFKA_JVM_OPTS"

Progress = Callable[[str], None]
"""A sink for human progress lines (the CLI prints them to stderr; fixtures drop them)."""


def no_progress(message: str) -> None:
    """Drop a progress line."""


def default_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """The jar cache directory chosen by the environment (see the module docstring)."""
    return cache_dir_for(f"kafka-{KAFKA_VERSION}", CACHE_ENV, env)


def default_cluster_dir(env: Mapping[str, str] | None = None) -> Path:
    """The cluster directory chosen by the environment (see the module docstring)."""
    env = os.environ if env is None else env
    explicit = env.get(DIR_ENV)
    return Path(explicit).expanduser() if explicit else Path(".marshal") / "kafka"


def pom_text() -> str:
    """The packaged pom.xml that pins the Kafka broker jars."""
    return resources.files("marshal_workers.localkafka").joinpath("pom.xml").read_text("utf-8")
