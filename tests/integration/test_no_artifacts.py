"""Tests and tools write only under temporary directories.

Spark 4.0 leaves an empty ``artifacts/`` in the directory its driver JVM was started in
(SPARK-52396): a `make test` used to leave one in the checkout.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

SCRIPT = """
from marshal_workers.audit.session import SessionOptions, start_session
spark = start_session(SessionOptions())
assert spark.range(3).count() == 3
spark.stop()
"""


def test_a_spark_session_leaves_nothing_in_the_working_directory(tmp_path: Path) -> None:
    """Starting and stopping the audit's Spark session creates nothing where it was run."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == []
