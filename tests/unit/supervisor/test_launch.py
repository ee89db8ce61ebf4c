"""`marshal-run` starts its fork server before its own heavy imports (not for ``--help``), with
systemd's variables withheld from it, and the server dies with a supervisor killed at once.
Each case runs the entry point in a fresh interpreter: what is imported is the point."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from marshal_workers.supervisor.launch import wants_help

# Run `marshal-run`'s entry point with argv[1:], noting what was imported when the fork server
# started; print that, whether it started, and the supervisor's child processes then.
ENTRY = """
import json, sys
import multiprocessing.forkserver as forkserver
import psutil
HEAVY = ("click", "structlog", "confluent_kafka", "marshal_workers.supervisor.run",
         "marshal_workers.config.settings")
seen = []
real = forkserver.ensure_running
def ensure_running():
    seen.append(sorted(m for m in HEAVY if m in sys.modules))
    real()
forkserver.ensure_running = ensure_running
from marshal_workers.supervisor.cli import main
sys.argv = ["marshal-run", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
kids = [" ".join(p.cmdline()) for p in psutil.Process().children()]
print(json.dumps({"code": code, "imported_at_start": seen, "children": kids}))
"""


def entry(*args: str, env: dict[str, str] | None = None) -> dict[str, object]:
    """What `ENTRY` reports for the command line ``args``."""
    done = subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.stdout, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_the_fork_server_starts_before_the_heavy_imports() -> None:
    """A command line that is not a help request starts the server first thing: click, the
    configuration, structlog and the Kafka client are not imported yet (a usage error, found
    later, then exits 2 as ever)."""
    result = entry("--no-such-option")
    assert result["code"] == 2
    assert result["imported_at_start"] == [[]]
    children = result["children"]
    assert isinstance(children, list)
    assert any("multiprocessing.forkserver" in c for c in children), children


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_no_fork_server_for_help(flag: str) -> None:
    """Asking for the help text starts no process."""
    result = entry("--handler", "echo", flag)
    assert result["code"] == 0
    assert result["imported_at_start"] == []
    assert result["children"] == []


def test_wants_help_reads_the_help_options_anywhere() -> None:
    """``-h`` and ``--help`` anywhere are a help request; other words, even close, are not."""
    assert wants_help(["--help"])
    assert wants_help(["--topic", "t", "-h"])
    assert not wants_help([])
    assert not wants_help(["--handler", "echo", "--helper", "-hx"])


def test_systemds_variables_are_withheld_from_the_fork_server() -> None:
    """The server (hence every child) starts without NOTIFY_SOCKET and the watchdog's variables;
    the supervisor has them back, for its systemd observer to take."""
    code = (
        "import json, os, time, psutil\n"
        "from marshal_workers.supervisor.launch import start_fork_server\n"
        "assert start_fork_server([])\n"
        # The server is forked, then execs: wait for its own command line (read before the
        # exec, a child has no command line or this one's, and this one's environment).
        "deadline = time.monotonic() + 30\n"
        "while True:\n"
        "    found = [p for p in psutil.Process().children()\n"
        "             if any(a.startswith('from multiprocessing.forkserver')\n"
        "                    for a in p.cmdline())]\n"
        "    if found or time.monotonic() > deadline:\n"
        "        break\n"
        "    time.sleep(0.01)\n"
        "server = found[0]\n"
        "names = ('NOTIFY_SOCKET', 'WATCHDOG_USEC', 'WATCHDOG_PID')\n"
        "print(json.dumps({'server': sorted(n for n in names if n in server.environ()),\n"
        "                  'own': sorted(n for n in names if n in os.environ)}))\n"
    )
    env = {
        **os.environ,
        "NOTIFY_SOCKET": "/run/no-such.sock",
        "WATCHDOG_USEC": "1000000",
        "WATCHDOG_PID": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "server": [],
        "own": ["NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC"],
    }


def gone(pid: int) -> bool:
    """The process has ended (or is a zombie waiting for its new parent to reap it)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_supervisor_killed_during_its_imports_leaves_no_fork_server() -> None:
    """SIGKILL to `marshal-run` as soon as its fork server exists (the supervisor still
    importing, or just past it): the server does not outlive it."""
    supervisor = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from marshal_workers.supervisor.cli import main;"
            " sys.argv = ['marshal-run', *sys.argv[1:]]; main()",
            *("--handler", "echo", "--topic", "t", "--group", "g"),
            *("--bootstrap-servers", "127.0.0.1:9"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server_pid = None
    try:
        deadline = time.monotonic() + 30
        while server_pid is None and time.monotonic() < deadline:
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(supervisor.pid).children():
                    if "multiprocessing.forkserver" in " ".join(child.cmdline()):
                        server_pid = child.pid
            time.sleep(0.001)
        assert server_pid is not None, "marshal-run started no fork server"
        supervisor.kill()
        supervisor.wait(10)
        deadline = time.monotonic() + 10
        while not gone(server_pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gone(server_pid), "the fork server outlived its supervisor"
    finally:
        supervisor.kill()
        supervisor.wait(10)
        if server_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(server_pid, 9)
