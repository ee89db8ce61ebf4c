"""The Java side of a local Kafka: finding `java` and `mvn`, and resolving the broker jars.

The jars are resolved once per machine into a cache directory (see `paths`), by Maven from
the packaged pom. Resolution is atomic-ish: Maven writes into a fresh `work-*` directory,
which is renamed to `libs/` only when complete, and then a `COMPLETE` marker holding the
pom's digest is written. A killed resolve leaves no marker, so the next one starts over
(and sweeps the leftovers); a changed pom changes the digest, so it resolves again. A file
lock keeps two concurrent resolves from stepping on each other.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from marshal_workers.errors import MarshalError
from marshal_workers.localkafka.paths import KAFKA_VERSION, Progress, locked, no_progress, pom_text
from marshal_workers.maven import copy_dependencies, install_libs

MARKER = "COMPLETE"
BROKER_JAR = f"kafka_2.13-{KAFKA_VERSION}.jar"


def find_java(env: Mapping[str, str] | None = None) -> str:
    """The `java` to run: `$JAVA_HOME/bin/java`, else the one on PATH; one clear error if none."""
    env = os.environ if env is None else env
    java_home = env.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java", path=env.get("PATH", ""))
    if found is None:
        raise MarshalError(
            "java not found (no JAVA_HOME, none on PATH): install a Java 17+ runtime, "
            "e.g. `apt-get install openjdk-17-jre-headless`"
        )
    return found


def find_mvn(env: Mapping[str, str] | None = None) -> str:
    """The `mvn` on PATH; one clear error if there is none."""
    env = os.environ if env is None else env
    found = shutil.which("mvn", path=env.get("PATH", ""))
    if found is None:
        raise MarshalError(
            "mvn not found on PATH: install Maven 3.8+ (e.g. `apt-get install maven`) to fetch "
            f"the Kafka {KAFKA_VERSION} jars, or set KAFKA_HOME to an unpacked Kafka distribution"
        )
    return found


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
    if is_resolved(cache_dir):
        return libs_dir(cache_dir)
    env = os.environ if env is None else env
    find_java(env)  # Maven needs it too, and this error says what to install
    mvn = find_mvn(env)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with locked(cache_dir / ".lock"):
        if is_resolved(cache_dir):  # another process finished while we waited
            return libs_dir(cache_dir)
        for leftover in cache_dir.glob("work-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix="work-", dir=cache_dir))
        started = time.monotonic()
        try:
            progress(f"kafka: resolving the Kafka {KAFKA_VERSION} jars with Maven into {cache_dir}")
            _run_maven(mvn, work, cache_dir, env)
            install_libs(work / "libs", cache_dir, MARKER, pom_digest())
            elapsed = time.monotonic() - started
            progress(f"kafka: resolved the Kafka {KAFKA_VERSION} jars in {elapsed:.1f}s")
        finally:
            shutil.rmtree(work, ignore_errors=True)
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
