"""The fork servers' socket directories that dead supervisors left behind: marked, found and
removed.

multiprocessing's fork server listens on a Unix socket in a directory of its supervisor's
(``pymp-XXXXXXXX/listener-XXXXXXXX``, mode 0700, `multiprocessing.util.get_temp_dir`). The
supervisor's interpreter removes it at its exit; a supervisor killed (kill -9, the OOM killer,
a crash of the interpreter) leaves it behind, one directory per death. Under the shipped unit
(``PrivateTmp=yes``) systemd removes them with the unit's /tmp at each restart; anywhere else (a
supervisor run by hand or by another process manager, a container whose /tmp outlives its
process) a member restarted after every crash for a weekend leaves thousands, and a test run
here left 50 an hour.

So the supervisor marks its directory once its fork server runs (`mark_owner`): a file
``marshal-supervisor-PID.lock`` on which it holds an exclusive ``flock`` for as long as it lives
(the kernel drops the lock when the process dies, however it dies; the pid in the name is for
people). Once started, it removes the directories of supervisors that are dead (`remove_dead`),
from a thread of its own, never on the way to a claim. A directory is removed only when all of
these hold:

- it is a directory (not a link) named ``pymp-*`` in the temporary directory, owned by this
  user, holding one marker and nothing but ``listener-*`` sockets besides;
- the marker's lock can be taken (tried without waiting, and let go at once): its supervisor
  is gone. A lock is the kernel's, not a pid's: it judges alike a supervisor of this host, of
  a container that shares this /tmp but not its pid namespace (whose pids name no process
  here, or another one), and the dead one of a container restarted with its /tmp kept (a new
  pid namespace each time; judged by pids, that one's directories were never anyone's to
  remove and piled up again). A supervisor alive keeps its directory whatever became of its
  fork server (multiprocessing starts a dead one again in the same directory);
- no socket in this network namespace is bound to one of its sockets (``/proc/net/unix``,
  paths resolved on both sides). A fork server's socket is never *connected to* to find out:
  a live server reads fds from every connection and dies of one closed at once.

Anything else is kept: another program's directory or another user's (no marker), a live
supervisor's, one holding anything more, one whose lock cannot be tried (a file system
without ``flock``). Linux only (elsewhere there is no ``/proc``: nothing is removed).
Directories left before the lock existed (no marker, or the ``marshal-supervisor-PID-START``
of the build before) are not ours to judge and stay, as does one whose supervisor died in the
microseconds between making its marker and naming it (`hold_marker`: the file under its
making name is neither a marker nor a socket).
"""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing.util
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

PROC = Path("/proc")
UNIX_TABLE = PROC / "net" / "unix"
DIR_PREFIX = "pymp-"
SOCKET_PREFIX = "listener-"
MARKER_PREFIX = "marshal-supervisor-"
MARKER_SUFFIX = ".lock"

_held: dict[str, int] = {}  # this process's markers: path -> the open file its lock is on


def _forget_in_child() -> None:
    """In a plain fork's child: close the markers' files. The lock belongs to the open file,
    which a fork shares: a forked child that outlived the supervisor would keep its directory
    judged live. (Every child today execs, or is the fork server's; close-on-exec covers
    those. This covers a fork that does not exec; a review.)"""
    for fd in _held.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def marker_name(pid: int) -> str:
    """The marker of supervisor ``pid``."""
    return f"{MARKER_PREFIX}{pid}{MARKER_SUFFIX}"


def is_marker(name: str) -> bool:
    """Whether ``name`` is a marker's (a build before the lock wrote others: not these)."""
    middle = name.removeprefix(MARKER_PREFIX).removesuffix(MARKER_SUFFIX)
    return (
        name.startswith(MARKER_PREFIX)
        and name.endswith(MARKER_SUFFIX)
        and middle.isascii()
        and middle.isdigit()
    )


def hold_marker(path: Path) -> None:
    """Create the marker ``path`` and hold its lock until this process ends (the file kept
    open, closed on exec); again for a path already held: nothing. OSError if it cannot be
    locked (then no marker is left).

    The file is locked under another name and only then renamed to the marker's: a marker is
    never seen unlocked by a live supervisor. (Created under its own name first, another
    supervisor's sweep could hold the lock for the moment of its try: the try failed, and the
    marker was left unlocked, the directory dead to every sweep after; a review.)"""
    key = str(path)
    if key in _held:
        return
    making = path.with_name(f".{path.name}.{os.getpid()}")  # not a marker's name: never judged
    fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody else knows the file yet
        os.rename(making, path)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(making)
        raise
    _held[key] = fd


def mark_owner() -> None:
    """Mark this process's multiprocessing directory (its fork server's socket is there) as a
    live supervisor's: its marker, locked while this process lives. OSError if it cannot be."""
    where = Path(multiprocessing.util.get_temp_dir())
    hold_marker(where / marker_name(os.getpid()))


def lock_free(path: str) -> bool:
    """Whether the lock on marker ``path`` can be taken now: nobody alive holds it (taken and
    let go at once). False where it cannot be tried."""
    try:  # (a FIFO under a marker's name: not opened to wait for a writer, and not a file)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held (BlockingIOError), or no flock here
        return False
    finally:
        os.close(fd)  # (the lock, if taken, goes with it)
    return True


def bound_paths(table: bytes) -> frozenset[str]:
    """The filesystem paths that sockets are bound to, from ``/proc/net/unix`` (``Num RefCount
    Protocol Flags Type St Inode Path``; the path is the eighth field, absent for an unbound
    socket, ``@``-prefixed for an abstract one, whose name may be any bytes), resolved."""
    paths: set[str] = set()
    for line in table.splitlines()[1:]:
        fields = line.split(None, 7)
        if len(fields) == 8 and fields[7].startswith(b"/"):
            paths.add(os.path.realpath(os.fsdecode(fields[7])))
    return frozenset(paths)


def dead_dirs(tmp: Path, bound: frozenset[str], *, uid: int) -> list[Path]:
    """The directories under ``tmp`` that dead supervisors left, by the rules above, given the
    bound socket paths ``bound``."""
    found: list[Path] = []
    try:
        entries = list(os.scandir(tmp))
    except OSError:
        return found
    for entry in entries:
        if not entry.name.startswith(DIR_PREFIX):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
                continue
            names = os.listdir(entry.path)
            markers = [n for n in names if is_marker(n)]
            if len(markers) != 1 or not lock_free(os.path.join(entry.path, markers[0])):
                continue  # not a supervisor's, or its supervisor lives
            if not all(_dead_socket(entry.path, n, bound) for n in names if n != markers[0]):
                continue
        except OSError:
            continue  # gone meanwhile, or not ours to read
        found.append(Path(entry.path))
    return found


def _dead_socket(directory: str, name: str, bound: frozenset[str]) -> bool:
    """Whether ``name`` in ``directory`` is a fork server's socket that nothing is bound to
    (OSError if it cannot be read)."""
    path = os.path.join(directory, name)
    return (
        name.startswith(SOCKET_PREFIX)
        and stat.S_ISSOCK(os.lstat(path).st_mode)
        and os.path.realpath(path) not in bound
    )


def remove(dirs: Iterable[Path]) -> int:
    """Remove each directory's sockets, then its marker, then the directory; how many went.
    The marker goes last, so that a directory left half removed (an unlink refused) is still
    marked and judged again by the next sweep; a name already gone (another sweep's) is no
    failure. One that gained an entry meanwhile is kept (``rmdir`` refuses it)."""
    removed = 0
    for path in dirs:
        try:
            names = os.listdir(path)
            for name in sorted(names, key=is_marker):  # the marker last
                if name.startswith(SOCKET_PREFIX) or is_marker(name):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path / name)
            path.rmdir()
        except OSError:  # (gone meanwhile: another sweep's, not counted here)
            continue
        removed += 1
    return removed


def remove_dead(tmp: Path | None = None) -> int:
    """Remove the directories dead supervisors left under ``tmp`` (the temporary directory);
    how many. Nothing where ``/proc/net/unix`` cannot be read."""
    try:
        table = UNIX_TABLE.read_bytes()
    except OSError:
        return 0
    where = tmp if tmp is not None else Path(tempfile.gettempdir())
    return remove(dead_dirs(where, bound_paths(table), uid=os.getuid()))
