"""The per-host lock on (group, client id): two services on one host never share a client id."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from marshal_workers.common.errors import ConfigError
from marshal_workers.supervisor.hostlock import host_lock, lock_path


def test_two_groups_with_one_client_id_both_lock(tmp_path: Path) -> None:
    """Default ids of two services on one host collide; their groups differ, so both run."""
    with host_lock("shop.billing", "web3-0", tmp_path), host_lock("shop.audit", "web3-0", tmp_path):
        pass


def test_one_group_and_client_id_runs_once(tmp_path: Path) -> None:
    """A second holder of the same (group, client id) is refused with a usage error."""
    with (
        host_lock("g", "c", tmp_path),
        pytest.raises(ConfigError) as caught,
        host_lock("g", "c", tmp_path),
    ):
        pass
    assert caught.value.exit_code == 2
    assert f"pid {os.getpid()}" in str(caught.value)


def test_lock_file_is_removed_on_a_clean_exit(tmp_path: Path) -> None:
    """Nothing piles up in the lock directory: the file goes when the holder ends."""
    with host_lock("g", "c", tmp_path) as path:
        assert path.exists()
    assert list(tmp_path.iterdir()) == []


def test_lock_file_is_removed_when_the_block_fails(tmp_path: Path) -> None:
    """A start-up error after locking removes the file too."""
    with pytest.raises(RuntimeError), host_lock("g", "c", tmp_path):
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_stale_lock_of_a_killed_process_is_taken_over(tmp_path: Path) -> None:
    """A holder killed with SIGKILL leaves its file; the next process takes it over."""
    code = (
        "import sys, time; from pathlib import Path; "
        "from marshal_workers.supervisor.hostlock import host_lock\n"
        "with host_lock('g', 'c', Path(sys.argv[1])):\n"
        "    print('locked', flush=True); time.sleep(60)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline() == "locked\n"
    with pytest.raises(ConfigError), host_lock("g", "c", tmp_path):  # alive: refused
        pass
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    path = lock_path("g", "c", tmp_path)
    assert path.read_text() == str(child.pid)  # stale: left behind
    with host_lock("g", "c", tmp_path):
        assert path.read_text() == str(os.getpid())
    assert not path.exists()


def test_a_removed_inode_is_never_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If the previous holder removes the file between our open and our lock, we lock the
    file the path names now (a lock on a removed inode would let two processes run)."""
    real_flock = fcntl.flock
    path = lock_path("g", "c", tmp_path)
    replaced = []

    def racing_flock(fd: int, op: int) -> None:
        if not replaced:  # the old holder unlinks after we opened: we hold a removed inode
            replaced.append(os.fstat(fd).st_ino)
            path.unlink()
        real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", racing_flock)
    with host_lock("g", "c", tmp_path):
        assert path.exists()  # the file the path names now, and it is locked:
        rival = os.open(path, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                real_flock(rival, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(rival)


@pytest.mark.parametrize(("group", "client"), [("..", "x"), ("a%2Fb", "c"), ("g" * 300, "c")])
def test_lock_names_stay_in_the_directory(group: str, client: str, tmp_path: Path) -> None:
    """Any group and client id (``..``, escapes, very long names) names one file in the dir."""
    path = lock_path(group, client, tmp_path)
    assert path.parent == tmp_path and len(path.name) < 255
    assert lock_path(group, client, tmp_path) != lock_path(group, client + "x", tmp_path)


def test_escaping_does_not_merge_two_identities(tmp_path: Path) -> None:
    """(a/b-ish names) group 'a%2Fb'/'c' and group 'a'/'b%2Fc' get different files."""
    assert lock_path("a%2Fb", "c", tmp_path) != lock_path("a", "b%2Fc", tmp_path)
