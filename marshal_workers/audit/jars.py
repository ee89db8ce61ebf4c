"""The Spark Kafka connector jars, resolved from Maven Central once per machine.

As the local broker's jars (`localkafka.jars`), they go into a cache outside the repo:
``$MARSHAL_SPARK_JARS_CACHE``, else ``$XDG_CACHE_HOME/marshal-workers/spark-VERSION``, else
``~/.cache/marshal-workers/spark-VERSION``, where VERSION is the installed pyspark's (the
connector must match it). `maven.resolve_cached` has Maven resolve the packaged pom into a
fresh ``work-*`` directory that is renamed to ``libs/`` when complete; a ``COMPLETE`` marker
holding the digest of the pom and the version is written last, so a killed resolve is redone,
and a file lock keeps two resolves apart. Only the Kafka source needs these jars; file inputs
do not.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path

from marshal_workers.audit.exitcodes import AuditFailedError
from marshal_workers.localkafka.maven import (
    MARKER,
    cache_dir_for,
    copy_dependencies,
    resolve_cached,
)

CACHE_ENV = "MARSHAL_SPARK_JARS_CACHE"
CONNECTOR = "spark-sql-kafka-0-10_2.13"

Progress = Callable[[str], None]


def _resource(name: str) -> str:
    return resources.files("marshal_workers.audit").joinpath(name).read_text("utf-8")


def spark_version() -> str:
    """The installed pyspark's version (the connector is resolved for exactly this one)."""
    try:
        import pyspark  # noqa: PLC0415 (only the Spark path needs it)
    except ImportError:
        raise AuditFailedError(
            "pyspark is not installed: pip install 'marshal-workers[audit]'"
        ) from None
    return str(pyspark.__version__)


def default_cache_dir(version: str, env: Mapping[str, str] | None = None) -> Path:
    """The jar cache for ``version`` chosen by the environment (see the module docstring)."""
    return cache_dir_for(f"spark-{version}", CACHE_ENV, env)


def digest(version: str) -> str:
    """What the marker of a complete resolve of ``version`` holds."""
    text = _resource("pom.xml") + _resource("maven-settings.xml") + version
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def connector_jars(cache_dir: Path, version: str) -> list[Path] | None:
    """The resolved jars if the cache holds a complete resolve of ``version``, else None."""
    try:
        current = (cache_dir / MARKER).read_text("utf-8").strip() == digest(version)
    except OSError:
        return None
    jars = sorted((cache_dir / "libs").glob("*.jar"))
    if not current or not any(j.name == f"{CONNECTOR}-{version}.jar" for j in jars):
        return None
    return jars


def resolve(
    version: str | None = None,
    cache_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    progress: Progress | None = None,
) -> list[Path]:
    """The connector jars for the installed pyspark, running Maven if the cache lacks them."""
    version = version or spark_version()
    cache_dir = cache_dir or default_cache_dir(version, env)
    maven_env = os.environ if env is None else env
    resolve_cached(
        cache_dir,
        is_complete=lambda: connector_jars(cache_dir, version) is not None,
        run_maven=lambda mvn, work: _run_maven(mvn, work, version, cache_dir, maven_env),
        digest=digest(version),
        what=f"the Spark {version} Kafka connector",
        mvn_purpose=f"fetch the Spark {version} Kafka connector jars",
        env=maven_env,
        progress=progress,
    )
    jars = connector_jars(cache_dir, version)
    assert jars is not None
    return jars


def _run_maven(mvn: str, work: Path, version: str, cache_dir: Path, env: Mapping[str, str]) -> None:
    (work / "pom.xml").write_text(_resource("pom.xml"), "utf-8")
    (work / "settings.xml").write_text(_resource("maven-settings.xml"), "utf-8")
    args = ["-gs", str(work / "settings.xml"), "-f", str(work / "pom.xml"),
            f"-Dspark.version={version}"]  # fmt: skip
    expected = f"{CONNECTOR}-{version}.jar"
    failure = copy_dependencies(mvn, work, args, expected, cache_dir, env)
    if failure is not None:
        raise AuditFailedError(f"mvn could not resolve {CONNECTOR}:{version} {failure}")


def main() -> None:
    """`python -m marshal_workers.audit.jars`: resolve the connector jars now (CI installs)."""
    jars = resolve(progress=lambda line: print(line, flush=True))
    print(jars[0].parent)


if __name__ == "__main__":
    main()
