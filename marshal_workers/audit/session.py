"""The Spark session the audit runs in: local[2] by default, any cluster with ``--master``.

Small and quiet by default: no web UI, no console progress bar (the audit prints its own
progress lines), 4 shuffle partitions, 1 GB of driver memory, and the JVM's logging at ERROR
through the packaged ``log4j2.properties`` (``MARSHAL_AUDIT_LOG_LEVEL=WARN`` shows more).
In local mode the Python workers run the interpreter that runs the audit (so they see the
same packages), and the driver binds to loopback. Extra settings: ``MARSHAL_AUDIT_SPARK_CONF``
as ``key=value,key=value``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from marshal_workers.audit.exitcodes import AuditFailedError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[2]"
CONF_ENV = "MARSHAL_AUDIT_SPARK_CONF"


@dataclass(frozen=True, slots=True)
class SessionOptions:
    """How to start Spark."""

    master: str = DEFAULT_MASTER
    driver_memory: str = "1g"
    shuffle_partitions: int = 4
    jars: Sequence[Path] = ()
    extra: Mapping[str, str] = field(default_factory=dict)
    app_name: str = "marshal-audit"


def _log4j_file() -> str:
    return str(resources.files("marshal_workers.audit").joinpath("log4j2.properties"))


def spark_conf(options: SessionOptions, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Spark settings the session starts with (a pure function of the options)."""
    env = os.environ if env is None else env
    log4j = f"-Dlog4j2.configurationFile=file:{_log4j_file()}"
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(options.shuffle_partitions),
        "spark.driver.memory": options.driver_memory,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
        # Java serialization of cached batches holds on to the last N objects written; the
        # audit caches megabyte-sized rows, so forget each one as soon as it is on disk.
        "spark.serializer.objectStreamReset": "1",
        "spark.driver.extraJavaOptions": log4j,
        "spark.executor.extraJavaOptions": log4j,
    }
    if options.master.startswith("local"):
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    if options.jars:
        conf["spark.jars"] = ",".join(str(j) for j in options.jars)
    for item in filter(None, (env.get(CONF_ENV) or "").split(",")):
        key, sep, value = item.partition("=")
        if sep:
            conf[key.strip()] = value.strip()
    conf.update(options.extra)
    return conf


def start_session(options: SessionOptions) -> SparkSession:
    """A SparkSession with `spark_conf`; AuditFailedError with one line if Spark cannot start."""
    try:
        from pyspark.sql import SparkSession  # noqa: PLC0415 (only the Spark path needs it)
    except ImportError:
        raise AuditFailedError(
            "pyspark is not installed: pip install 'marshal-workers[audit]'"
        ) from None
    if options.master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(options.master).appName(options.app_name)
    for key, value in spark_conf(options).items():
        builder = builder.config(key, value)
    try:
        with jvm_working_directory():
            session = builder.getOrCreate()
    except Exception as exc:  # Py4J and JVM start-up errors come in many types
        raise AuditFailedError(
            f"could not start Spark ({options.master}): {error_line(exc)}"
        ) from None
    session.sparkContext.setLogLevel(os.environ.get("MARSHAL_AUDIT_LOG_LEVEL", "ERROR"))
    return session


@contextmanager
def jvm_working_directory() -> Iterator[None]:
    """Launch the driver JVM in a temporary directory of its own, not the caller's.

    Spark 4.0's ArtifactManager creates ``artifacts/`` in the JVM's working directory and
    leaves it there, empty, at exit (SPARK-52396, fixed after 4.0.0). The JVM inherits the
    working directory when PySpark launches it, so this changes it for the launch only and
    changes back; the directory is removed when the audit's process exits. Every path the
    audit hands to Spark is absolute (`pipeline.run` makes sure)."""
    here = os.getcwd()
    place = tempfile.mkdtemp(prefix="marshal-audit-jvm-")
    atexit.register(shutil.rmtree, place, ignore_errors=True)
    os.chdir(place)
    try:
        yield
    finally:
        os.chdir(here)


def error_line(exc: BaseException) -> str:
    """The most telling line of a Py4J/Spark error: its root cause, not "calling o100"."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith(("at ", "...", "JVM stacktrace"))]
    if any("OutOfMemory" in ln for ln in lines):
        return (
            "out of memory: give Spark more, e.g. "
            "MARSHAL_AUDIT_SPARK_CONF=spark.driver.memory=4g (local mode) or a cluster"
        )
    causes = [ln for ln in lines if ln.startswith("Caused by:")]
    if causes:
        return causes[-1][:300]
    errors = [ln for ln in lines[1:] if "Exception: " in ln or "Error: " in ln]
    return (errors or lines or [type(exc).__name__])[0][:300]
