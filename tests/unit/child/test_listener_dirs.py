"""`childlink.listenerdirs`: what dead supervisors' fork servers leave in /tmp is removed, and
nothing else is.

The rules are judged on real directories and real Unix sockets (bound and dropped, or bound and
listening) and real processes (alive, or gone); the end-to-end case kills a real supervisor
with SIGKILL and finds its marked directory left behind, then removed, while a live one's stays
and keeps listening, also when the scan reaches /tmp by another path (a symlink).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from marshal_workers.childlink import listenerdirs
from marshal_workers.childlink.listenerdirs import (
    bound_paths,
    dead_dirs,
    marker_name,
    pid_namespace,
    remove,
    remove_dead,
    start_time,
)

REPO = Path(__file__).resolve().parents[3]
LINUX = listenerdirs.UNIX_TABLE.exists()
GONE_PID = 2**22 + 7  # above the kernel's pid limit here: no such process
ME = os.getpid()
NS = pid_namespace() or 1  # this process's pid namespace (where there is none: any number)


def alive_only_me(pid: int) -> int | None:
    """Start times as if only this test's process lived (its real one)."""
    return start_time(ME) if pid == ME else None


def _listener_dir(
    tmp: Path, name: str, *, listening: bool, owner: tuple[int, int] | None, ns: int = NS
) -> tuple[Path, socket.socket | None]:
    """A ``pymp-``-style directory holding a socket file bound at ``listener-x``, still
    listening (the socket returned, to keep open) or not (closed: the file stays, as a killed
    server's does), and the marker of ``owner`` (pid, start) in pid namespace ``ns`` if given."""
    where = tmp / name
    where.mkdir(mode=0o700)
    if owner is not None:
        (where / marker_name(*owner, ns)).touch()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(where / "listener-x"))
    if listening:
        sock.listen()
        return where, sock
    sock.close()
    return where, None


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A directory with a short path: a Unix socket's path may not pass 107 bytes, and
    pytest's ``short_tmp`` under xdist (``.../popen-gw1/test_name0/``) comes close."""
    where = Path(tempfile.mkdtemp(prefix="ld-", dir="/tmp"))
    yield where
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def open_sockets() -> Iterator[list[socket.socket]]:
    kept: list[socket.socket] = []
    yield kept
    for sock in kept:
        sock.close()


class TestBoundPaths:
    def test_reads_the_bound_paths_of_the_kernel_table_whatever_their_bytes(self) -> None:
        table = (
            b"Num       RefCount Protocol Flags    Type St Inode Path\n"
            b"0000000099c5c490: 00000002 00000000 00010000 0001 01 4813656 /tmp/pymp-a/listener-b\n"
            b"00000000a1b2c3d4: 00000003 00000000 00000000 0001 03 4813657\n"
            b"00000000a1b2c3d5: 00000002 00000000 00010000 0001 01 4813658 @\xff\xfe\n"
            b"00000000a1b2c3d6: 00000002 00000000 00010000 0001 01 4813659 /run/a path/with space\n"
        )
        assert bound_paths(table) == {
            os.path.realpath("/tmp/pymp-a/listener-b"),
            os.path.realpath("/run/a path/with space"),
        }

    @pytest.mark.skipif(not LINUX, reason="/proc/net/unix is Linux's")
    def test_a_listening_socket_is_in_this_host_s_table_resolved(
        self, short_tmp: Path, open_sockets: list[socket.socket]
    ) -> None:
        link = short_tmp / "link"
        (short_tmp / "real").mkdir()
        link.symlink_to(short_tmp / "real")
        where, sock = _listener_dir(link, "pymp-live", listening=True, owner=None)
        assert sock is not None
        open_sockets.append(sock)
        bound = bound_paths(listenerdirs.UNIX_TABLE.read_bytes())
        assert os.path.realpath(where / "listener-x") in bound


@pytest.mark.skipif(not LINUX, reason="/proc is Linux's")
class TestDeadDirs:
    def test_a_start_time_is_this_process_s_and_none_for_no_process(self) -> None:
        assert isinstance(start_time(ME), int)
        assert start_time(GONE_PID) is None

    def test_only_a_dead_supervisor_s_marked_directory_of_unbound_sockets_is_dead(
        self, short_tmp: Path, open_sockets: list[socket.socket]
    ) -> None:
        me = (ME, start_time(ME) or 0)
        dead, _ = _listener_dir(short_tmp, "pymp-dead", listening=False, owner=(GONE_PID, 5))
        reused, _ = _listener_dir(short_tmp, "pymp-reused", listening=False, owner=(ME, me[1] + 1))
        mine, _ = _listener_dir(short_tmp, "pymp-mine", listening=False, owner=me)
        unmarked, _ = _listener_dir(short_tmp, "pymp-unmarked", listening=False, owner=None)
        still, sock = _listener_dir(short_tmp, "pymp-still", listening=True, owner=(GONE_PID, 5))
        assert sock is not None
        open_sockets.append(sock)
        more, _ = _listener_dir(short_tmp, "pymp-more", listening=False, owner=(GONE_PID, 5))
        (more / "other").write_text("a file of its own")
        _listener_dir(short_tmp, "other-x", listening=False, owner=(GONE_PID, 5))  # not pymp-
        plain = short_tmp / "pymp-plainfile"
        plain.mkdir()
        (plain / marker_name(GONE_PID, 5, NS)).touch()
        (plain / "listener-x").write_text("not a socket")
        (short_tmp / "pymp-link").symlink_to(dead)
        bound = frozenset({os.path.realpath(still / "listener-x")})
        uid = os.getuid()
        found = dead_dirs(short_tmp, bound, uid=uid, started=alive_only_me, namespace=NS)
        # a gone pid, or a pid whose start differs (used again by another process): dead
        assert sorted(found) == sorted([dead, reused])
        assert dead_dirs(short_tmp, bound, uid=uid + 1, started=alive_only_me, namespace=NS) == []
        assert mine not in found and unmarked not in found and still not in found

    def test_a_socket_still_bound_keeps_its_directory_whatever_path_reaches_it(
        self, short_tmp: Path, open_sockets: list[socket.socket]
    ) -> None:
        """A marked directory whose supervisor is gone but whose socket a process still
        listens on, bound through one path and scanned through another (a symlinked /tmp):
        kept. Compared as written, the paths differ and it would go."""
        (short_tmp / "real").mkdir()
        link = short_tmp / "link"
        link.symlink_to(short_tmp / "real")
        real = short_tmp / "real"
        _, sock = _listener_dir(real, "pymp-s", listening=True, owner=(GONE_PID, 5))
        assert sock is not None
        open_sockets.append(sock)
        bound = bound_paths(listenerdirs.UNIX_TABLE.read_bytes())
        uid = os.getuid()
        assert dead_dirs(link, bound, uid=uid, started=alive_only_me, namespace=NS) == []
        sock.close()
        bound = bound_paths(listenerdirs.UNIX_TABLE.read_bytes())
        found = dead_dirs(link, bound, uid=uid, started=alive_only_me, namespace=NS)
        assert found == [link / "pymp-s"]

    def test_a_supervisor_of_another_pid_namespace_or_an_unmarked_one_is_not_judged(
        self, short_tmp: Path
    ) -> None:
        """A container that shares /tmp with this host (or another container) but not its pid
        namespace: its live supervisor's pid names no process here (or another one), and in
        another network namespace its bound socket is not in this one's table either. Judged
        by those alone it was dead, and removing its socket would stop its fork server from
        starting any child. Kept: a marker of another namespace, or one without a namespace
        (written by an older build), is not this host's to judge."""
        other, _ = _listener_dir(short_tmp, "pymp-other", listening=False, owner=(GONE_PID, 5),
                                 ns=NS + 1)  # fmt: skip
        old, _ = _listener_dir(short_tmp, "pymp-old", listening=False, owner=None)
        (old / f"{listenerdirs.MARKER_PREFIX}{GONE_PID}-5").touch()  # the older build's marker
        dead, _ = _listener_dir(short_tmp, "pymp-dead", listening=False, owner=(GONE_PID, 5))
        found = dead_dirs(short_tmp, frozenset(), uid=os.getuid(), started=alive_only_me,
                          namespace=NS)  # fmt: skip
        assert found == [dead]
        assert remove(found) == 1
        assert other.exists() and old.exists() and not dead.exists()

    def test_remove_takes_the_marker_sockets_and_directory_keeps_one_that_gained_a_file(
        self, short_tmp: Path
    ) -> None:
        dead, _ = _listener_dir(short_tmp, "pymp-dead", listening=False, owner=(GONE_PID, 5))
        grew, _ = _listener_dir(short_tmp, "pymp-grew", listening=False, owner=(GONE_PID, 5))
        (grew / "new").write_text("written after the scan")
        assert remove([dead, grew]) == 1
        assert not dead.exists()
        assert (grew / "new").exists()

    def test_a_missing_temporary_directory_is_nothing_to_remove(self, short_tmp: Path) -> None:
        absent = short_tmp / "absent"
        assert dead_dirs(absent, frozenset(), uid=0, started=alive_only_me, namespace=NS) == []


@pytest.mark.skipif(not LINUX, reason="/proc is Linux's")
class TestKilledSupervisors:
    # A supervisor in miniature: its fork server started (which marks its directory), a child
    # forked from it, then its socket path printed; it waits to be killed.
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
        self, short_tmp: Path
    ) -> None:
        real = short_tmp / "real"
        real.mkdir()
        link = short_tmp / "link"  # the scan reaches the same directories by another path
        link.symlink_to(real)
        killed, killed_dir = self._start(real)
        alive, alive_dir = self._start(real)
        try:
            assert [p.name.split("-")[2] for p in killed_dir.glob("marshal-supervisor-*")] == [
                str(killed.pid)
            ]  # marked by its supervisor
            os.killpg(alive.pid, signal.SIGSTOP)  # frozen: alive all the same
            os.killpg(killed.pid, signal.SIGKILL)
            killed.wait(10)
            assert killed_dir.exists()  # left behind: what this module is for
            deadline = time.monotonic() + 10  # its fork server dies of its parent-death signal
            while str(next(killed_dir.glob("listener-*"))) in bound_paths(
                listenerdirs.UNIX_TABLE.read_bytes()
            ):
                assert time.monotonic() < deadline, "the killed supervisor's server lives on"
                time.sleep(0.05)
            assert remove_dead(link) == 1
            assert not killed_dir.exists()
            assert alive_dir.exists()
            # the live server was never connected to (it would die of it): still listening
            alive_socket = os.path.realpath(next(alive_dir.glob("listener-*")))
            assert alive_socket in bound_paths(listenerdirs.UNIX_TABLE.read_bytes())
        finally:
            os.killpg(alive.pid, signal.SIGKILL)
            alive.wait(10)
