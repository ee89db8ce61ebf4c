"""The wheel installs the project's own package and nothing else at the top of site-packages:
the bundled plugins inside it (`marshal_workers.plugins`), never a generic top-level `plugins`
that any other project's `plugins` would collide with."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Every module of the repository's plugins/ folder: one added there without its line in
# pyproject.toml's force-include would be missing from the wheel.
BUNDLED = tuple(p.stem for p in sorted((ROOT / "plugins").glob("*.py")) if p.stem != "__init__")


def test_the_wheel_holds_only_the_projects_package_with_the_plugins_inside(tmp_path: Path) -> None:
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("marshal_workers-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"marshal_workers"}
    for module in BUNDLED:
        assert f"marshal_workers/plugins/{module}.py" in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "ledger = marshal_workers.plugins.ledger:handle" in text
    for module in BUNDLED:  # each bundled plugin is a handler an install can name
        assert f"= marshal_workers.plugins.{module}:" in text, module
    assert "= plugins." not in text

    site = tmp_path / "site"
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(site),
            str(wheel),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    top = {p.name for p in site.iterdir() if not p.name.endswith(".dist-info")}
    assert top - {"bin"} == {"marshal_workers"}
    found = subprocess.run(
        [sys.executable, "-c", "import marshal_workers.plugins.echo as m; print(m.__file__)"],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(site)},
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.startswith(str(site / "marshal_workers" / "plugins"))
