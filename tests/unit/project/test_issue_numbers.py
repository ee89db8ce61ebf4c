"""No "issue N" in the code, the tests or the docs: the project has no tracker a reader can
open, so a number names nothing; the text names the behaviour or the decision instead
(docs/design.md's decisions and sections have anchors to link)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
ISSUE = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)


def checked_files() -> list[str]:
    """Every file git holds that is text a reader reads: code, tests, docs, build files."""
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    suffixes = {".py", ".md", ".toml", ".yml", ".yaml", ".service", ".sh", ".txt", ".cfg"}
    return [
        p for p in listed
        if (Path(p).suffix in suffixes or Path(p).name in {"Makefile", "run"})
        and ROOT / p != Path(__file__).resolve()  # this file's own examples
    ]  # fmt: skip


def issue_numbers(text: str) -> list[str]:
    """Each "issue N" (or "issues N", "issue #N") in ``text``."""
    return [m.group(0) for m in ISSUE.finditer(text)]


def test_no_issue_number_in_code_tests_or_docs() -> None:
    """No file names an issue by its number."""
    found = [
        f"{path}:{number}: {hit}"
        for path in checked_files()
        for number, line in enumerate((ROOT / path).read_text(errors="replace").splitlines(), 1)
        for hit in issue_numbers(line)
    ]
    assert found == []


def test_an_issue_number_is_found() -> None:
    """The check sees each way of writing one, and not a word that merely contains it."""
    assert issue_numbers("(issue 19.3) Issue 21 item 9; issues 9 and 10; see issue #4") == [
        "issue 19", "Issue 21", "issues 9", "issue #4"
    ]  # fmt: skip
    assert issue_numbers("the issue's size; tissue 3; an issue") == []
    assert "Makefile" in [Path(p).name for p in checked_files()]
