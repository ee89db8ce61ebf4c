"""The monitoring that ships with the project (monitoring/): the Prometheus alert rules parse
and fire as their tests say (promtool, from Debian's prometheus package), the Grafana
dashboard's queries parse, and every metric a rule or a panel names is one the code exports."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from marshal_workers.supervisor.metrics import Metrics

ROOT = Path(__file__).resolve().parents[3]
MONITORING = ROOT / "monitoring"
DASHBOARD = MONITORING / "grafana-dashboard.json"
RULES = MONITORING / "alerts.yml"
NAME = re.compile(r"\b(marshal_[a-z0-9_]+)")
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum",
            "_created"), "gauge": ("",), "summary": ("", "_count", "_sum", "_created")}  # fmt: skip


def promtool() -> str:
    """promtool, or skip (CI installs Debian's prometheus: .ci/run; there it must be found)."""
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool not found: apt-get install -y prometheus (.ci/run does)")
        pytest.skip("promtool not installed (apt-get install -y prometheus)")
    return found


def run(*args: str, cwd: Path = MONITORING) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def exported() -> set[str]:
    """Every sample name the supervisor's metrics can export."""
    names: set[str] = set()
    for family in Metrics("g", "c", 1.0).registry.collect():
        for suffix in SUFFIXES.get(family.type, ("",)):
            names.add(family.name + suffix)
        names.update(s.name for s in family.samples)
    return names


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of the dashboard."""
    board = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in board["panels"] for t in p["targets"]]


def rule_exprs() -> list[tuple[str, str]]:
    rules = yaml.safe_load(RULES.read_text())
    return [(r["alert"], r["expr"]) for g in rules["groups"] for r in g["rules"]]


def test_the_alert_rules_pass_promtools_check_and_their_tests() -> None:
    """promtool check rules and promtool test rules (monitoring/alerts.test.yml: each alert
    fires on its series, with its labels and text, and not before), and the example config."""
    tool = promtool()
    for args in (("check", "rules", "alerts.yml"), ("test", "rules", "alerts.test.yml"),
                 ("check", "config", "prometheus.yml")):  # fmt: skip
        done = run(tool, *args)
        assert done.returncode == 0, done.stdout + done.stderr


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    """Each panel's PromQL, as recording rules, passes promtool check rules."""
    tool = promtool()
    rules = [
        {"record": f"dashboard:query_{i}", "expr": expr.replace("$group", ".*")}
        for i, (_, expr) in enumerate(dashboard_queries())
    ]
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = run(tool, "check", "rules", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_every_metric_named_is_exported(source: str) -> None:
    """A rule or a panel naming a metric the code no longer exports fails here."""
    queries = rule_exprs() if source == "rules" else dashboard_queries()
    names = exported()
    missing = {(where, n) for where, expr in queries for n in NAME.findall(expr) if n not in names}
    assert not missing, missing
    assert all(NAME.search(expr) for _, expr in queries if "up{" not in expr)


def test_the_dashboard_covers_what_an_operator_watches() -> None:
    """Lag per partition and slice, records per second, AMO losses, failing and parked
    records, failovers and unheld claims, heartbeat ages, children restarting."""
    text = " ".join(expr for _, expr in dashboard_queries())
    for metric in ("marshal_lag_records", "marshal_records_handled_total",
                   "marshal_amo_lost_records_total", "marshal_record_failures",
                   "marshal_record_parked", "marshal_failovers_total",
                   "marshal_group_claims_unheld", "marshal_heartbeat_age_seconds",
                   "marshal_child_restarts_total"):  # fmt: skip
        assert metric in text, metric
    assert "slice" in dict(dashboard_queries())["Lag per partition and slice (records)"]
