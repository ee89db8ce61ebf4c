"""The broker jars of a local Kafka: resolved with Maven from the packaged pom, once per machine.

The jars are resolved into a cache directory (see `paths`) by `maven.resolve_cached`: Maven
writes into a fresh `work-*` directory, which is renamed to `libs/` only when complete, and
then a `COMPLETE` marker holding the pom's digest is written. A killed resolve leaves no
marker, so the next one starts over (and sweeps the leftovers); a changed pom changes the
digest, so it resolves again. A file lock keeps two concurrent resolves from stepping on each
other.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from marshal_workers.common.errors import MarshalError
from marshal_workers.localkafka.maven import MARKER, copy_dependencies, resolve_cached
from marshal_workers.localkafka.paths import KAFKA_VERSION, Progress, no_progress, pom_text

BROKER_JAR = f"kafka_2.13-{KAFKA_VERSION}.jar"
MVN_PURPOSE = (
    f"fetch the Kafka {KAFKA_VERSION} jars, or set KAFKA_HOME to an unpacked Kafka distribution"
)
"""What the error of a missing `mvn` says it is needed for."""


def pom_digest() -> str:
    """The sha256 of the packaged pom: what the cache marker must hold to be current."""
    return hashlib.sha256(pom_text().encode("utf-8")).hexdigest()


def libs_dir(cache_dir: Path) -> Path:
    """The directory of resolved jars inside a cache directory."""
    return cache_dir / "libs"


def is_resolved(cache_dir: Path) -> bool:
    """Whether the cache holds a complete resolve of the current pom."""
    marker = cache_dir / MARKER
    try:
        current = marker.read_text("utf-8").strip() == pom_digest()
    except OSError:
        return False
    return current and (libs_dir(cache_dir) / BROKER_JAR).is_file()


def resolve_jars(
    cache_dir: Path,
    env: Mapping[str, str] | None = None,
    progress: Progress = no_progress,
) -> Path:
    """Make sure the cache holds the Kafka jars (running Maven if needed); return `libs/`."""
    maven_env = os.environ if env is None else env
    resolve_cached(
        cache_dir,
        is_complete=lambda: is_resolved(cache_dir),
        run_maven=lambda mvn, work: _run_maven(mvn, work, cache_dir, maven_env),
        digest=pom_digest(),
        what=f"the Kafka {KAFKA_VERSION} jars",
        mvn_purpose=MVN_PURPOSE,
        env=maven_env,
        progress=lambda line: progress(f"kafka: {line}"),
    )
    return libs_dir(cache_dir)


def _run_maven(mvn: str, work: Path, cache_dir: Path, env: Mapping[str, str]) -> None:
    """Run `mvn dependency:copy-dependencies` into `work/libs`; one-line error on failure."""
    pom = work / "pom.xml"
    pom.write_text(pom_text(), "utf-8")
    failure = copy_dependencies(mvn, work, ["-f", str(pom)], BROKER_JAR, cache_dir, env)
    if failure is not None:
        raise MarshalError(f"mvn could not resolve the Kafka {KAFKA_VERSION} jars {failure}")


def kafka_home_classpath(kafka_home: Path) -> str:
    """The classpath of an unpacked Kafka distribution; one clear error if it is not one."""
    libs = kafka_home / "libs"
    if not any(libs.glob("kafka_*.jar")):
        raise MarshalError(
            f"KAFKA_HOME={kafka_home} has no libs/kafka_*.jar: point it at an unpacked "
            "Apache Kafka distribution, or unset it to use the Maven-resolved jars"
        )
    return f"{libs}/*"
