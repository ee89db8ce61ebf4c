"""`childlink.listenerdirs`: what killed supervisors' fork servers leave in /tmp is removed, and
nothing else is.

The rules are judged on real directories and real Unix sockets (bound and dropped, or bound and
listening); the end-to-end case kills a real fork server's supervisor with SIGKILL and finds
its directory left behind, then removed, while a live server's stays and keeps listening.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from marshal_workers.childlink import listenerdirs
from marshal_workers.childlink.listenerdirs import bound_paths, dead_dirs, remove, remove_dead

REPO = Path(__file__).resolve().parents[3]
LINUX = listenerdirs.UNIX_TABLE.exists()
OLD = time.time() - 3600  # an hour ago: past the age rule


def _listener_dir(tmp: Path, name: str, *, listening: bool) -> tuple[Path, socket.socket | None]:
    """A ``pymp-``-style directory holding a socket file bound at ``listener-x``: still
    listening (the socket returned, to keep open) or not (closed: the file stays, as a killed
    server's does)."""
    where = tmp / name
    where.mkdir(mode=0o700)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(where / "listener-x"))
    if listening:
        sock.listen()
        return where, sock
    sock.close()
    return where, None


def _age(path: Path, when: float = OLD) -> None:
    os.utime(path, (when, when))


@pytest.fixture
def open_sockets() -> Iterator[list[socket.socket]]:
    kept: list[socket.socket] = []
    yield kept
    for sock in kept:
        sock.close()


class TestBoundPaths:
    def test_reads_the_bound_paths_of_the_kernel_table(self) -> None:
        table = (
            "Num       RefCount Protocol Flags    Type St Inode Path\n"
            "0000000099c5c490: 00000002 00000000 00010000 0001 01 4813656 /tmp/pymp-a/listener-b\n"
            "00000000a1b2c3d4: 00000003 00000000 00000000 0001 03 4813657\n"
            "00000000a1b2c3d5: 00000002 00000000 00010000 0001 01 4813658 @/abstract/name\n"
            "00000000a1b2c3d6: 00000002 00000000 00010000 0001 01 4813659 /run/a path/with space\n"
        )
        assert bound_paths(table) == {"/tmp/pymp-a/listener-b", "/run/a path/with space"}

    @pytest.mark.skipif(not LINUX, reason="/proc/net/unix is Linux's")
    def test_a_listening_socket_is_in_this_host_s_table(
        self, tmp_path: Path, open_sockets: list[socket.socket]
    ) -> None:
        where, sock = _listener_dir(tmp_path, "pymp-live", listening=True)
        assert sock is not None
        open_sockets.append(sock)
        table = listenerdirs.UNIX_TABLE.read_text()
        assert str(where / "listener-x") in bound_paths(table)


class TestDeadDirs:
    def test_only_an_old_unbound_lone_listener_in_a_pymp_directory_of_this_user_is_dead(
        self, tmp_path: Path, open_sockets: list[socket.socket]
    ) -> None:
        dead, _ = _listener_dir(tmp_path, "pymp-dead", listening=False)
        live, sock = _listener_dir(tmp_path, "pymp-live", listening=True)
        assert sock is not None
        open_sockets.append(sock)
        _listener_dir(tmp_path, "pymp-young", listening=False)  # dead, but young
        more, _ = _listener_dir(tmp_path, "pymp-more", listening=False)
        (more / "other").write_text("a file of its own")
        other_name, _ = _listener_dir(tmp_path, "other-dead", listening=False)
        plain = tmp_path / "pymp-plainfile"
        plain.mkdir()
        (plain / "listener-x").write_text("not a socket")
        empty = tmp_path / "pymp-empty"
        empty.mkdir()
        link = tmp_path / "pymp-link"
        link.symlink_to(dead)
        for path in (dead, live, more, other_name, plain, empty):
            _age(path)
        bound = frozenset({str(live / "listener-x")})
        uid = os.getuid()
        now = time.time()
        assert dead_dirs(tmp_path, bound, uid=uid, now=now) == [dead]
        # the same directory is kept for another user, or while it is young
        assert dead_dirs(tmp_path, bound, uid=uid + 1, now=now) == []
        assert dead_dirs(tmp_path, bound, uid=uid, now=OLD + 59) == []
        # and a listener bound now (a server that started there) keeps it
        assert dead_dirs(tmp_path, bound | {str(dead / "listener-x")}, uid=uid, now=now) == []

    def test_remove_takes_the_socket_and_the_directory_and_keeps_one_that_gained_a_file(
        self, tmp_path: Path
    ) -> None:
        dead, _ = _listener_dir(tmp_path, "pymp-dead", listening=False)
        grew, _ = _listener_dir(tmp_path, "pymp-grew", listening=False)
        (grew / "new").write_text("written after the scan")
        assert remove([dead, grew]) == 1
        assert not dead.exists()
        assert (grew / "new").exists()

    def test_a_missing_temporary_directory_is_nothing_to_remove(self, tmp_path: Path) -> None:
        assert dead_dirs(tmp_path / "absent", frozenset(), uid=os.getuid(), now=time.time()) == []


@pytest.mark.skipif(not LINUX, reason="/proc/net/unix is Linux's")
class TestKilledSupervisors:
    # A supervisor in miniature: its fork server started, then a child forked from it, then
    # its pid and the server's socket path printed; it waits to be killed.
    SUPERVISOR = (
        "import multiprocessing.forkserver as mf, sys, time\n"
        "from marshal_workers.childlink.forkserver import fork_server\n"
        "if __name__ == '__main__':\n"
        "    ctx = fork_server()\n"
        "    p = ctx.Process(target=time.sleep, args=(0,))\n"
        "    p.start(); p.join(30)\n"
        "    print(mf._forkserver._forkserver_address, flush=True)\n"
        "    time.sleep(600)\n"
    )

    def _start(self, tmp: Path) -> tuple[subprocess.Popen[str], Path]:
        env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp)}
        proc = subprocess.Popen(
            [sys.executable, "-c", self.SUPERVISOR],
            stdout=subprocess.PIPE, text=True, env=env, start_new_session=True,
        )  # fmt: skip
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line, "the supervisor printed no socket path"
        return proc, Path(line).parent

    def test_a_killed_supervisor_s_directory_is_removed_and_a_live_one_s_kept(
        self, tmp_path: Path
    ) -> None:
        killed, killed_dir = self._start(tmp_path)
        alive, alive_dir = self._start(tmp_path)
        try:
            os.killpg(killed.pid, signal.SIGKILL)
            killed.wait(10)
            deadline = time.monotonic() + 10  # its fork server dies of its parent-death signal
            table = listenerdirs.UNIX_TABLE.read_text()
            while str(next(killed_dir.iterdir())) in bound_paths(table):
                assert time.monotonic() < deadline, "the killed supervisor's server lives on"
                time.sleep(0.05)
                table = listenerdirs.UNIX_TABLE.read_text()
            assert killed_dir.exists()  # left behind: what this module is for
            assert remove_dead(tmp_path) == 0  # young: kept by the age rule
            _age(killed_dir)
            _age(alive_dir)
            assert remove_dead(tmp_path) == 1
            assert not killed_dir.exists()
            assert alive_dir.exists()
            # the live server was never connected to (it would die of it): still listening
            alive_socket = str(next(alive_dir.iterdir()))
            assert alive_socket in bound_paths(listenerdirs.UNIX_TABLE.read_text())
        finally:
            os.killpg(alive.pid, signal.SIGKILL)
            alive.wait(10)
