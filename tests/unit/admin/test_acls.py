"""Least privilege as data: `marshal-admin acls` prints each role's ACLs from one table, and
docs/operating.md's table is generated from the same table (this test keeps them in step)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from marshal_workers.admin.acls import ROLES, acls_for, docs_table
from marshal_workers.common.errors import ConfigError

PAGE = Path(__file__).resolve().parents[3] / "docs" / "operating.md"
TABLE = re.compile(r"<!-- acls table:[^\n]*-->\n(.*?)\n<!-- end of acls table -->", re.S)


def test_the_documented_table_is_the_code_table() -> None:
    """operating.md's ACL table is exactly what `docs_table` renders today."""
    found = TABLE.search(PAGE.read_text())
    assert found is not None, "operating.md lost its acls table markers"
    assert found.group(1) == docs_table(), "regenerate the table from admin/acls.py"


def test_a_worker_gets_exactly_its_grants() -> None:
    """The worker role on one group and topic: the log, its records, its group's offsets, the
    dead-letter topic, the optional cluster check and throw-away groups; nothing else."""
    lines = {a.line() for a in acls_for("worker", "User:w", "__m", group="g", topics=["t"],
                                        dlq_topics=["t.dlq"])}  # fmt: skip
    assert lines == {
        "ALLOW User:w Read topic __m", "ALLOW User:w Write topic __m",
        "ALLOW User:w Describe topic __m", "ALLOW User:w DescribeConfigs topic __m",
        "ALLOW User:w Read topic t", "ALLOW User:w Describe topic t",
        "ALLOW User:w Read group g", "ALLOW User:w Write topic t.dlq",
        "ALLOW User:w Describe topic t.dlq", "ALLOW User:w DescribeConfigs cluster kafka-cluster",
        "ALLOW User:w Describe group marshal- (prefixed)",
    }  # fmt: skip


def test_readers_and_auditors_write_nothing_and_create_nothing() -> None:
    """The read-only roles have no Write, Create, Alter or Delete anywhere."""
    for role in ("reader", "auditor"):
        ops = {op for grant in ROLES[role] for op in grant.operations}
        assert not ops & {"Write", "Create", "Alter", "Delete", "AlterConfigs"}, role


def test_a_role_that_needs_a_group_or_a_proper_principal_says_so() -> None:
    """No group for a worker, or a principal not written User:NAME: one line, exit 2."""
    with pytest.raises(ConfigError, match="--group"):
        acls_for("worker", "User:w", "__m")
    with pytest.raises(ConfigError, match="User:NAME"):
        acls_for("reader", "w", "__m")
    with pytest.raises(ConfigError, match="unknown role"):
        acls_for("god", "User:w", "__m")
