"""The cyclic collector paused while a command imports its modules (`common.collector`)."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator

import pytest

from marshal_workers.common.collector import paused


@pytest.fixture
def collector_restored() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    if enabled:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.usefixtures("collector_restored")
@pytest.mark.parametrize("before", [True, False])
def test_it_pauses_the_collector_and_leaves_it_as_it_was(before: bool) -> None:
    if before:
        gc.enable()
    else:
        gc.disable()
    with paused():
        assert not gc.isenabled()
    assert gc.isenabled() is before


@pytest.mark.usefixtures("collector_restored")
def test_an_error_inside_still_restores_it() -> None:
    gc.enable()
    with pytest.raises(ImportError), paused():
        raise ImportError("no such module")
    assert gc.isenabled()


def test_marshal_run_imports_its_modules_with_no_collection() -> None:
    """`supervisor.cli.main`'s imports (click, the configuration, the Kafka client, the
    supervisor) run with no automatic collection: a fresh interpreter notes each collection
    from the fork server's start (here a stand-in) until ``marshal_run`` is imported
    (`gc.callbacks`), then asks for the help text."""
    code = (
        "import atexit, gc, sys\n"
        "from marshal_workers.supervisor import cli\n"
        "during = []\n"
        "def imported():\n"
        "    command = sys.modules.get('marshal_workers.supervisor.command')\n"
        "    return getattr(command, 'marshal_run', None) is not None\n"
        "def note(phase, info):\n"
        "    if phase == 'start' and not imported():\n"
        "        during.append(info['generation'])\n"
        "def started(args):\n"
        "    gc.collect()\n"
        "    during.clear()\n"
        "    gc.callbacks.append(note)\n"
        "    return False\n"
        "cli.start_fork_server = started\n"
        "atexit.register(lambda: print('COLLECTIONS', len(during), gc.isenabled()))\n"
        "sys.argv = ['marshal-run', '--help']\n"
        "cli.main()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert out.returncode == 0, out
    assert out.stdout.splitlines()[-1] == "COLLECTIONS 0 True", out.stdout[-300:]
