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

So the supervisor marks its directory once its fork server runs (`mark_owner`): an empty file
``marshal-supervisor-PID-START-NS`` (its pid, its start time in clock ticks since boot, from
``/proc/PID/stat``: a pid used again by another process has another start; and its pid
namespace, the inode of ``/proc/self/ns/pid``). Once started, it removes the directories of
supervisors that are dead (`remove_dead`), from a thread of its own, never on the way to a
claim. A directory is removed only when all of these hold:

- it is a directory (not a link) named ``pymp-*`` in the temporary directory, owned by this
  user, holding a marker and nothing but ``listener-*`` sockets besides;
- the marker names this process's pid namespace: a container that shares /tmp but not the pid
  namespace (nor the network namespace, where the next rule would see its socket) has pids
  that name no process here, or another one; its directories are not judged here;
- the process the marker names is gone (no such pid, or a pid with another start time): a
  supervisor alive keeps its directory whatever became of its fork server (multiprocessing
  starts a dead one again in the same directory);
- no socket in this network namespace is bound to one of its sockets (``/proc/net/unix``,
  paths resolved on both sides). A fork server's socket is never *connected to* to find out:
  a live server reads fds from every connection and dies of one closed at once.

Anything else is kept: another program's directory or another user's (no marker), a live
supervisor's, one holding anything more. Linux only (elsewhere there is no ``/proc``: nothing
is removed). Directories left before the marker existed, or marked without a namespace (the
build before it), are not ours to judge and stay.
"""

from __future__ import annotations

import multiprocessing.util
import os
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

PROC = Path("/proc")
PID_NAMESPACE = PROC / "self" / "ns" / "pid"
UNIX_TABLE = PROC / "net" / "unix"
DIR_PREFIX = "pymp-"
SOCKET_PREFIX = "listener-"
MARKER_PREFIX = "marshal-supervisor-"

Started = Callable[[int], int | None]  # a pid's start time (clock ticks since boot), if alive


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (field 22 of ``/proc/PID/stat``), None if there is none
    (or no ``/proc``)."""
    try:
        raw = (PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()  # after the command name, which may hold ")"
    try:
        return int(fields[19])  # field 22 of the whole line
    except (IndexError, ValueError):
        return None


def pid_namespace() -> int | None:
    """This process's pid namespace (the inode ``/proc/self/ns/pid`` leads to), None if there
    is none to read."""
    try:
        return os.stat(PID_NAMESPACE).st_ino
    except OSError:
        return None


def marker_name(pid: int, started: int, namespace: int) -> str:
    """The marker of supervisor ``pid`` started at ``started`` in pid namespace ``namespace``."""
    return f"{MARKER_PREFIX}{pid}-{started}-{namespace}"


def mark_owner() -> None:
    """Mark this process's multiprocessing directory (its fork server's socket is there) as a
    supervisor's: this pid, its start and its pid namespace. Nothing where either cannot be
    read."""
    started, namespace = start_time(os.getpid()), pid_namespace()
    if started is None or namespace is None:
        return
    where = Path(multiprocessing.util.get_temp_dir())
    (where / marker_name(os.getpid(), started, namespace)).touch(mode=0o600, exist_ok=True)


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


def _owner(name: str) -> tuple[int, int, int | None] | None:
    """The (pid, start, pid namespace) a marker's name holds, if it is one (the namespace
    None in a marker of the build before it)."""
    if not name.startswith(MARKER_PREFIX):
        return None
    fields = name.removeprefix(MARKER_PREFIX).split("-")
    if len(fields) not in (2, 3) or not all(f.isdigit() for f in fields):
        return None
    return int(fields[0]), int(fields[1]), int(fields[2]) if len(fields) == 3 else None


def dead_dirs(
    tmp: Path, bound: frozenset[str], *, uid: int, started: Started, namespace: int
) -> list[Path]:
    """The directories under ``tmp`` that dead supervisors left, by the rules above, given the
    bound socket paths ``bound``, a pid's start time (``started``) and this process's pid
    ``namespace``."""
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
            owners = [o for o in map(_owner, names) if o is not None]
            if len(owners) != 1 or owners[0][2] != namespace:
                continue  # not a supervisor's, or not one whose pid means anything here
            if started(owners[0][0]) == owners[0][1]:
                continue  # its supervisor lives
            if not all(_dead_socket(entry.path, n, bound) for n in names if _owner(n) is None):
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
    """Remove each directory's marker and sockets, then the directory; how many went. One that
    gained an entry meanwhile is kept (``rmdir`` refuses it)."""
    removed = 0
    for path in dirs:
        try:
            for name in os.listdir(path):
                if name.startswith((SOCKET_PREFIX, MARKER_PREFIX)):
                    os.unlink(path / name)
            path.rmdir()
        except OSError:
            continue
        removed += 1
    return removed


def remove_dead(tmp: Path | None = None) -> int:
    """Remove the directories dead supervisors left under ``tmp`` (the temporary directory);
    how many. Nothing where ``/proc/net/unix`` or the pid namespace cannot be read."""
    namespace = pid_namespace()
    try:
        table = UNIX_TABLE.read_bytes()
    except OSError:
        return 0
    if namespace is None:
        return 0
    where = tmp if tmp is not None else Path(tempfile.gettempdir())
    bound = bound_paths(table)
    return remove(
        dead_dirs(where, bound, uid=os.getuid(), started=start_time, namespace=namespace)
    )
