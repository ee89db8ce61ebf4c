"""Session-wide test setup: the Kafka fixtures, and a check that tests write nothing into the
checkout (they write under temporary directories only)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["tests.kafka_fixtures"]

CHECKOUT = Path(__file__).resolve().parents[1]
TOOL_CACHES = {".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache", "__pycache__"}
_before: set[str] = set()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Remember what the checkout holds before the tests run."""
    _before.update(p.name for p in CHECKOUT.iterdir())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if a test left a new file or folder at the top of the checkout."""
    left = sorted({p.name for p in CHECKOUT.iterdir()} - _before - TOOL_CACHES)
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"tests left {left} in the checkout {CHECKOUT}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
