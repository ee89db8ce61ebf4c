"""Installing the project prints nothing: the build backend is declared and emits no warning box."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_editable_install_in_a_fresh_venv_is_quiet(tmp_path: Path) -> None:
    """`pip install --quiet -e .` (what `make install` runs) writes nothing to stdout or stderr."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    done = subprocess.run(
        [*pip, "install", "--quiet", "--no-deps", "--disable-pip-version-check", "-e", str(ROOT)],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == "", done.stdout + done.stderr
