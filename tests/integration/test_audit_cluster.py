"""marshal-audit on a real standalone Spark cluster: a master and two workers on loopback, from
the Spark that PySpark ships, against a real fleet's coordination topic on the local Kafka.

The same audit in local mode (``local[2]``) and with ``--master spark://...`` gives the same
exit code, summary and tables; the cluster's master shows the audit as an application that ran
on both workers. Every Spark process the fixture starts (master, workers, their executors and
Python workers: one process group each) is stopped at the end, also when the test fails.

It costs a fleet run, two audits and a cluster (about 1.5 GB): it runs only with
``MARSHAL_TEST_SPARK_CLUSTER=1`` (``make test-audit-cluster``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from marshal_workers.audit import jars
from marshal_workers.audit.output import read_table
from marshal_workers.audit.schema import TABLES
from marshal_workers.common.errors import MarshalError
from tests.integration.fleet import Fleet, MakeFleet
from tests.integration.test_audit_e2e import run_fleet

ENABLE_ENV = "MARSHAL_TEST_SPARK_CLUSTER"
pytestmark = [
    pytest.mark.kafka,
    pytest.mark.spark,
    pytest.mark.skipif(
        os.environ.get(ENABLE_ENV) != "1",
        reason=f"a Spark cluster on loopback: {ENABLE_ENV}=1 (make test-audit-cluster)",
    ),
]
HB = 1.0
WORKERS = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_home() -> Path:
    import pyspark  # noqa: PLC0415

    return Path(pyspark.__file__).parent


class Cluster:
    """A standalone Spark master and its workers, each JVM in a process group of its own."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port, self.ui = _free_port(), _free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        conf = root / "conf"
        conf.mkdir()
        self.env = {
            **os.environ,
            "SPARK_HOME": str(_spark_home()),
            "SPARK_CONF_DIR": str(conf),  # none of the machine's settings
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            "PYSPARK_PYTHON": sys.executable,
        }

    def start(self) -> None:
        """The master, then the workers; returns once every worker has registered."""
        self._daemon("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(self.port), "--webui-port", str(self.ui))  # fmt: skip
        self._wait(lambda: self.state() is not None, "the master's web UI")
        for i in range(WORKERS):
            work = self.root / f"work{i}"
            work.mkdir()
            self._daemon(f"worker{i}", "org.apache.spark.deploy.worker.Worker", self.url,
                         "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                         "--webui-port", str(_free_port()), "--work-dir", str(work))  # fmt: skip
        self._wait(lambda: (self.state() or {}).get("aliveworkers") == WORKERS, "the workers")

    def _daemon(self, name: str, *args: str) -> None:
        spark_class = _spark_home() / "bin" / "spark-class"
        with (self.root / f"{name}.log").open("wb") as log:
            proc = subprocess.Popen(
                [str(spark_class), *args],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its executors and Python workers join its group
            )
        self.procs.append(proc)

    def _wait(self, ready: Any, what: str) -> None:
        deadline = time.monotonic() + 120
        while not ready():
            dead = [p.args for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = {p.name: p.read_text()[-2000:] for p in self.root.glob("*.log")}
                pytest.fail(f"Spark cluster: no {what} (exited: {dead}); logs: {logs}")
            time.sleep(0.5)

    def state(self) -> dict[str, Any] | None:
        """The master's state (its web UI's JSON), None while it does not answer."""
        try:
            url = f"http://127.0.0.1:{self.ui}/json/"
            with urllib.request.urlopen(url, timeout=5) as r:
                state: dict[str, Any] = json.load(r)
                return state
        except OSError:
            return None

    def stop(self) -> None:
        """Every process group this cluster started: TERM, then KILL what is left."""
        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(20)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the group: executors outlive a worker
            proc.wait(10)


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and two workers (one core, 1 GB each) on loopback, stopped at the end."""
    cluster = Cluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module", autouse=True)
def kafka_connector() -> None:
    """Resolve the Spark Kafka connector once (Maven, cached outside the repo) up front."""
    try:
        jars.resolve()
    except MarshalError as exc:
        pytest.fail(f"could not resolve the Spark Kafka connector: {exc}", pytrace=False)


def _comparable(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary without what names the run (its output directory, its report)."""
    return {k: v for k, v in summary.items() if k not in ("out", "report")}


@pytest.mark.timeout(900)
def test_the_cluster_audits_a_real_fleet_as_local_mode_does(
    spark_cluster: Cluster, make_fleet: MakeFleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real fleet's topic audited with --master spark://127.0.0.1:PORT (two workers):
    the same exit code, summary and tables as local[2], and the master ran it on both."""
    fleet: Fleet = make_fleet(mode="amo", hb=HB)
    run_fleet(fleet)
    local, local_summary, local_err = fleet.audit(tmp_path / "local")
    assert local == 0, local_err
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)  # the executors' Python
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")  # the driver on loopback
    monkeypatch.setenv("MARSHAL_AUDIT_SPARK_CONF", "spark.executor.memory=512m")
    code, summary, err = fleet.audit(tmp_path / "cluster", "--master", spark_cluster.url)
    assert code == local, err
    assert _comparable(summary) == _comparable(local_summary)
    assert summary["claims"] >= fleet.partitions and summary["reservations"] > 0
    for name in TABLES:
        got = sorted(map(repr, read_table(tmp_path / "cluster", name)))
        assert got == sorted(map(repr, read_table(tmp_path / "local", name))), name
    state = spark_cluster.state()
    assert state is not None
    apps = [a["id"] for a in state["completedapps"] if a["name"] == "marshal-audit"]
    assert len(apps) == 1, state["completedapps"]
    for i in range(WORKERS):  # an executor of the audit ran on each worker
        assert list((spark_cluster.root / f"work{i}" / apps[0]).iterdir()), i
