"""Installing as documented: `make demo` installs the runtime only,
the `audit` extra brings PySpark and the `dev` extra the test tools, the README's first hour
names every step a new user needs, and the README does not hard-code a test count."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def extras() -> dict[str, list[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {"": project["dependencies"], **project["optional-dependencies"]}


def names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[ ]", r, maxsplit=1)[0].lower() for r in requirements}


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_demo_installs_the_runtime_only(tmp_path: Path) -> None:
    """What `make demo` would run on a fresh clone (no .venv yet): the package without any
    extra, so neither PySpark nor the test tools."""
    plan = subprocess.run(
        ["make", "-n", "demo", f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    installs = [line for line in plan.splitlines() if "pip install" in line and " -e " in line]
    assert installs, plan
    assert all(line.rstrip().endswith("-e .") for line in installs), installs
    assert "marshal-admin demo" in plan


def test_the_extras_bring_what_the_readme_says() -> None:
    found = {extra: names(reqs) for extra, reqs in extras().items()}
    assert "pyspark" not in found[""] and "pytest" not in found[""]
    assert {"pyspark", "pyarrow", "pandas", "matplotlib"} <= found["audit"]
    assert {"pytest", "mypy", "ruff", "hypothesis"} <= found["dev"]
    assert found["audit"] <= found["dev"] and found["bench"] <= found["dev"]


def test_the_first_hour_is_in_the_readme() -> None:
    """Install, a shell that finds the commands, a Kafka, a handler in the working directory,
    a topic with keyed records, a supervisor, its status and an audit."""
    for step in (
        "make install-runtime",
        ". .venv/bin/activate",
        "make install-audit",
        "marshal-admin kafka start",
        "marshal-admin init --bootstrap-servers HOST:PORT",
        "next to\nwhere you start `marshal-run` needs no PYTHONPATH",
        "marshal-admin topic create orders",
        "marshal-admin produce orders",
        "marshal-run --handler mypkg:handle",
        "marshal-admin status --group shop.billing",
        "marshal-audit --bootstrap-servers HOST:PORT",
    ):
        assert step in README, step


def test_the_readme_hard_codes_no_test_count() -> None:
    """A count of tests goes stale with the next test."""
    assert not re.search(r"\b\d[\d,]* (?:unit |integration |passing )?tests\b", README)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_adding_the_audit_keeps_the_install_editable(tmp_path: Path) -> None:
    """`make install-audit` installs the audit extra in editable mode, and no page tells a
    clone to `pip install '.[audit]'` (pip would replace the editable install by a copy)."""
    plan = subprocess.run(
        ["make", "-n", "install-audit", f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert any("pip install" in line and "-e '.[audit]'" in line for line in plan.splitlines())
    pages = [README, *(p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md"))]
    for text in pages:
        assert not re.search(r"pip install (?!-e )'?\.\[", text), "a non-editable extra install"
