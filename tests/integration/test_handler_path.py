"""A handler module in the working directory imports without PYTHONPATH, in the supervisor and
in every child, and a handler that cannot be imported says where it was
looked for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from marshal_workers.common.errors import EXIT_HANDLER_LOAD
from tests.integration.fleet import Fleet, MakeFleet

MARSHAL_RUN = Path(sys.executable).with_name("marshal-run")
HANDLER_MODULE = '''\
"""A handler that lives only in the working directory: the ledger's, under another name."""
from marshal_workers.plugins.ledger import handle as _ledger


def handle(record, ctx):
    _ledger(record, ctx)
'''


@pytest.fixture
def fleet(make_fleet: MakeFleet) -> Fleet:
    return make_fleet(partitions=2)


@pytest.mark.kafka
def test_a_handler_in_the_working_directory_runs_without_pythonpath(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Supervisor and children (forked from the fork server) both import it: every record is
    handled by it."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "cwd_only_handler.py").write_text(HANDLER_MODULE)
    fleet.produce(40)
    member = fleet.start("a", handler="cwd_only_handler:handle", cwd=work, pythonpath=False)
    fleet.wait_for(fleet.handled_everything, 60, "every record handled by the cwd handler")
    assert member.proc.poll() is None, member.log_tail()
    assert "handler_load_failed" not in member.log_path.read_text()


def test_an_unimportable_handler_says_where_it_was_looked_for(tmp_path: Path) -> None:
    """Exit 3 and one line naming the module and the sys.path entries searched (the working
    directory among them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")}
    env.pop("PYTHONPATH", None)
    env["XDG_RUNTIME_DIR"] = str(tmp_path / "run")
    done = subprocess.run(
        [
            str(MARSHAL_RUN),
            "--handler",
            "no_such_handler_module:handle",
            "--mode",
            "alo",
            "--topic",
            "t",
            "--group",
            "g",
            "--bootstrap-servers",
            "127.0.0.1:1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == EXIT_HANDLER_LOAD, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "no_such_handler_module" in lines[0]
    assert "searched" in lines[0] and str(tmp_path) in lines[0], lines[0]
