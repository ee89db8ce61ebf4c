"""`childlink.listenerdirs`: what dead supervisors' fork servers leave in /tmp is removed, and
nothing else is.

The rules are judged on real directories and real Unix sockets (bound and dropped, or bound and
listening) and real processes (alive, or gone); the end-to-end case kills a real supervisor
with SIGKILL and finds its marked directory left behind, then removed, while a live one's stays
and keeps listening, also when the scan reaches /tmp by another path (a symlink).
"""

from __future__ import annotations

import contextlib
import fcntl
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

import psutil
import pytest

from marshal_workers.childlink import listenerdirs
from marshal_workers.childlink.listenerdirs import (
    bound_paths,
    dead_dirs,
    hold_marker,
    is_marker,
    lock_free,
    marker_name,
    remove,
    remove_dead,
)

REPO = Path(__file__).resolve().parents[3]
LINUX = listenerdirs.UNIX_TABLE.exists()
GONE_PID = 2**22 + 7  # above the kernel's pid limit here: no such process


def _listener_dir(
    tmp: Path, name: str, *, listening: bool, marked: bool, locks: list[int] | None = None
) -> tuple[Path, socket.socket | None]:
    """A ``pymp-``-style directory holding a socket file bound at ``listener-x``, still
    listening (the socket returned, to keep open) or not (closed: the file stays, as a killed
    server's does), and if ``marked`` a supervisor's marker: its lock held (as by a live
    supervisor: a file of this process's, open in ``locks``) if ``locks`` is given, else free
    (its supervisor gone)."""
    where = tmp / name
    where.mkdir(mode=0o700)
    if marked:
        marker = where / marker_name(GONE_PID)
        marker.touch()
        if locks is not None:
            locks.append(_locked(marker))
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(where / "listener-x"))
    if listening:
        sock.listen()
        return where, sock
    sock.close()
    return where, None


def _locked(path: Path) -> int:
    """An open file of ``path`` holding its exclusive lock, as a live supervisor holds its
    marker's (in another open file of the same process, the lock still conflicts)."""
    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


@pytest.fixture
def locks() -> Iterator[list[int]]:
    held: list[int] = []
    yield held
    for fd in held:
        os.close(fd)


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
        where, sock = _listener_dir(link, "pymp-live", listening=True, marked=False)
        assert sock is not None
        open_sockets.append(sock)
        bound = bound_paths(listenerdirs.UNIX_TABLE.read_bytes())
        assert os.path.realpath(where / "listener-x") in bound


@pytest.mark.skipif(not LINUX, reason="/proc is Linux's")
class TestDeadDirs:
    def test_a_marker_is_named_for_its_pid_and_older_builds_markers_are_not_markers(
        self,
    ) -> None:
        assert marker_name(42) == "marshal-supervisor-42.lock"
        assert is_marker("marshal-supervisor-42.lock")
        for other in ("marshal-supervisor-42-1234", "marshal-supervisor-42-1234-4026531836",
                      "marshal-supervisor-\u00b2.lock", "marshal-supervisor-.lock",
                      "marshal-supervisor-4x.lock", "listener-x"):  # fmt: skip
            assert not is_marker(other), other

    def test_a_held_marker_is_not_free_and_one_let_go_is(self, short_tmp: Path) -> None:
        marker = short_tmp / marker_name(1)
        marker.touch()
        assert lock_free(str(marker))
        fd = _locked(marker)
        assert not lock_free(str(marker))
        os.close(fd)
        assert lock_free(str(marker))
        assert not lock_free(str(short_tmp / "absent.lock"))
        (short_tmp / "link.lock").symlink_to(marker)
        assert not lock_free(str(short_tmp / "link.lock"))  # a link is not followed
        os.mkfifo(short_tmp / "fifo.lock")  # opened plainly, it would wait for a writer forever
        assert not lock_free(str(short_tmp / "fifo.lock"))

    def test_hold_marker_holds_it_and_a_second_hold_is_the_same(self, short_tmp: Path) -> None:
        marker = short_tmp / marker_name(2)
        hold_marker(marker)
        try:
            hold_marker(marker)
            assert not lock_free(str(marker))
            assert os.stat(marker).st_mode & 0o777 == 0o600
        finally:
            os.close(listenerdirs._held.pop(str(marker)))
        assert lock_free(str(marker))

    def test_a_child_never_keeps_the_lock_forked_or_executed(self, short_tmp: Path) -> None:
        """The lock belongs to the open file: a child sharing it would keep a dead
        supervisor's directory judged live for as long as the child lives. A plain fork's
        child closes it (`os.register_at_fork`), an executed one never has it (O_CLOEXEC)."""
        marker = short_tmp / marker_name(3)
        hold_marker(marker)
        fd = listenerdirs._held[str(marker)]
        try:
            assert os.get_inheritable(fd) is False
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: the parent lets the lock go, the child lives on
                os.close(read)
                os.write(write, b"1" if str(marker) in listenerdirs._held else b"0")
                time.sleep(5)
                os._exit(0)
            os.close(write)
            try:
                assert os.read(read, 1) == b"0"
                os.close(listenerdirs._held.pop(str(marker)))
                assert lock_free(str(marker))  # the child, alive, holds nothing
            finally:
                os.close(read)
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        finally:
            if str(marker) in listenerdirs._held:
                os.close(listenerdirs._held.pop(str(marker)))

    def test_a_sweep_trying_the_lock_as_the_marker_is_made_does_not_leave_it_unlocked(
        self, short_tmp: Path
    ) -> None:
        """Another supervisor's sweep holds the lock of the marker's file for the moment of
        its try, just as this supervisor makes it: the marker must still end up locked (made
        under its own name first, the supervisor's try failed then, the file stayed unlocked
        and every later sweep took its live directory for dead; a review)."""
        marker = short_tmp / marker_name(3)
        marker.touch()
        sweep = _locked(marker)  # the sweep's try, in progress
        try:
            hold_marker(marker)
        finally:
            os.close(sweep)  # the sweep lets go
        try:
            assert not lock_free(str(marker))
            assert sorted(os.listdir(short_tmp)) == [marker.name]  # nothing else left
        finally:
            os.close(listenerdirs._held.pop(str(marker)))

    def test_only_a_dead_supervisor_s_marked_directory_of_unbound_sockets_is_dead(
        self, short_tmp: Path, open_sockets: list[socket.socket], locks: list[int]
    ) -> None:
        dead, _ = _listener_dir(short_tmp, "pymp-dead", listening=False, marked=True)
        live, _ = _listener_dir(short_tmp, "pymp-live", listening=False, marked=True, locks=locks)
        unmarked, _ = _listener_dir(short_tmp, "pymp-unmarked", listening=False, marked=False)
        still, sock = _listener_dir(short_tmp, "pymp-still", listening=True, marked=True)
        assert sock is not None
        open_sockets.append(sock)
        more, _ = _listener_dir(short_tmp, "pymp-more", listening=False, marked=True)
        (more / "other").write_text("a file of its own")
        two, _ = _listener_dir(short_tmp, "pymp-two", listening=False, marked=True)
        (two / marker_name(GONE_PID + 1)).touch()  # two markers: not one supervisor's
        _listener_dir(short_tmp, "other-x", listening=False, marked=True)  # not pymp-
        plain = short_tmp / "pymp-plainfile"
        plain.mkdir()
        (plain / marker_name(GONE_PID)).touch()
        (plain / "listener-x").write_text("not a socket")
        (short_tmp / "pymp-link").symlink_to(dead)
        bound = frozenset({os.path.realpath(still / "listener-x")})
        uid = os.getuid()
        found = dead_dirs(short_tmp, bound, uid=uid)
        assert found == [dead]
        assert dead_dirs(short_tmp, bound, uid=uid + 1) == []
        assert live.exists() and unmarked.exists()

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
        _, sock = _listener_dir(real, "pymp-s", listening=True, marked=True)
        assert sock is not None
        open_sockets.append(sock)
        bound = bound_paths(listenerdirs.UNIX_TABLE.read_bytes())
        assert dead_dirs(link, bound, uid=os.getuid()) == []
        sock.close()
        bound = bound_paths(listenerdirs.UNIX_TABLE.read_bytes())
        assert dead_dirs(link, bound, uid=os.getuid()) == [link / "pymp-s"]

    def test_a_live_supervisor_is_judged_by_its_lock_not_its_pid_and_old_markers_stay(
        self, short_tmp: Path, locks: list[int]
    ) -> None:
        """A container that shares this /tmp but not the pid namespace (nor the network
        namespace, whose sockets this one's table does not list): its live supervisor's pid
        names no process here. Judged by pid and start, its directory looked dead, and
        removing its socket would stop its fork server from starting any child; judged by pid
        namespace instead, a container restarted with its /tmp kept (a new namespace each time)
        left its dead supervisors' directories forever (a review). The lock answers both: held,
        kept; let go by a dead process, removed. A marker of the build before the lock
        (``marshal-supervisor-PID-START``) is not judged."""
        alive, _ = _listener_dir(short_tmp, "pymp-alive", listening=False, marked=True,
                                 locks=locks)  # fmt: skip (its pid, GONE_PID, names nothing)
        old, _ = _listener_dir(short_tmp, "pymp-old", listening=False, marked=False)
        (old / f"{listenerdirs.MARKER_PREFIX}{GONE_PID}-5").touch()  # the older build's marker
        dead, _ = _listener_dir(short_tmp, "pymp-dead", listening=False, marked=True)
        found = dead_dirs(short_tmp, frozenset(), uid=os.getuid())
        assert found == [dead]
        assert remove(found) == 1
        assert alive.exists() and old.exists() and not dead.exists()

    def test_remove_takes_the_marker_sockets_and_directory_keeps_one_that_gained_a_file(
        self, short_tmp: Path
    ) -> None:
        dead, _ = _listener_dir(short_tmp, "pymp-dead", listening=False, marked=True)
        grew, _ = _listener_dir(short_tmp, "pymp-grew", listening=False, marked=True)
        (grew / "new").write_text("written after the scan")
        assert remove([dead, grew]) == 1
        assert not dead.exists()
        assert (grew / "new").exists()

    def test_a_directory_half_removed_keeps_its_marker_for_the_next_sweep(
        self, short_tmp: Path
    ) -> None:
        """An entry that cannot be unlinked (here a directory under a socket's name): the
        directory stays, and still marked, so the next sweep judges it again; its marker had
        gone first in a listing that put it first, leaving a directory no sweep judges."""
        stuck, _ = _listener_dir(short_tmp, "pymp-stuck", listening=False, marked=True)
        (stuck / "listener-dir").mkdir()
        (stuck / "listener-dir" / "x").touch()
        assert remove([stuck]) == 0
        assert (stuck / marker_name(GONE_PID)).exists()

    def test_a_missing_temporary_directory_is_nothing_to_remove(self, short_tmp: Path) -> None:
        assert dead_dirs(short_tmp / "absent", frozenset(), uid=0) == []


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

    def _start(
        self, tmp: Path, started: list[subprocess.Popen[str]]
    ) -> tuple[subprocess.Popen[str], Path]:
        env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp)}
        proc = subprocess.Popen(
            [sys.executable, "-c", self.SUPERVISOR],
            stdout=subprocess.PIPE, text=True, env=env, start_new_session=True,
        )  # fmt: skip
        started.append(proc)  # (killed by the caller, whatever happens next)
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
        started: list[subprocess.Popen[str]] = []
        try:
            killed, killed_dir = self._start(real, started)
            alive, alive_dir = self._start(real, started)
            serverless, serverless_dir = self._start(real, started)
            # a live supervisor whose fork server is gone (multiprocessing starts another when
            # it is next asked): no socket bound there, so only its marker's lock keeps it
            server = next(
                (p for p in psutil.Process(serverless.pid).children()
                 if "forkserver" in " ".join(p.cmdline())), None,
            )  # fmt: skip
            assert server is not None, "no fork server under the supervisor"
            server.kill()  # (a zombie until its supervisor waits for it: its socket closed)
            assert [p.name for p in killed_dir.glob("marshal-supervisor-*")] == [
                marker_name(killed.pid)
            ]  # marked by its supervisor
            os.killpg(alive.pid, signal.SIGSTOP)  # frozen: alive all the same
            os.killpg(killed.pid, signal.SIGKILL)
            killed.wait(10)
            assert killed_dir.exists()  # left behind: what this module is for
            deadline = time.monotonic() + 10  # its fork server dies of its parent-death signal
            killed_socket = os.path.realpath(next(killed_dir.glob("listener-*")))
            while killed_socket in bound_paths(listenerdirs.UNIX_TABLE.read_bytes()):
                assert time.monotonic() < deadline, "the killed supervisor's server lives on"
                time.sleep(0.05)
            serverless_socket = os.path.realpath(next(serverless_dir.glob("listener-*")))
            while serverless_socket in bound_paths(listenerdirs.UNIX_TABLE.read_bytes()):
                assert time.monotonic() < deadline, "the killed fork server's socket lives on"
                time.sleep(0.05)
            assert remove_dead(link) == 1
            assert not killed_dir.exists()
            assert alive_dir.exists()
            assert serverless_dir.exists()  # its supervisor lives: the lock said so
            # the live server was never connected to (it would die of it): still listening
            alive_socket = os.path.realpath(next(alive_dir.glob("listener-*")))
            assert alive_socket in bound_paths(listenerdirs.UNIX_TABLE.read_bytes())
        finally:
            for proc in started:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
