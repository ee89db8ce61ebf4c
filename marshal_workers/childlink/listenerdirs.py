"""The fork servers' socket directories that their supervisors left behind: found and removed.

multiprocessing's fork server listens on a Unix socket in a directory of its own under the
temporary directory (``pymp-XXXXXXXX/listener-XXXXXXXX``, mode 0700). The supervisor's
interpreter removes it at its exit; a supervisor killed (kill -9, the OOM killer, a crash of
the interpreter) leaves it behind, one directory per death. Under the shipped unit
(``PrivateTmp=yes``) systemd removes them with the unit's /tmp at each restart; anywhere else (a
supervisor run by hand or by another process manager, a container whose /tmp outlives its
process) a member restarted after every crash for a weekend leaves thousands, and a test run
here left 50 an hour.

Once started, the supervisor removes those that are certainly dead (`remove_dead`), from a
thread of its own, never on the way to a claim. A directory is dead when all of these hold:

- it is a directory (not a link) named ``pymp-*`` in the temporary directory, owned by this
  user, holding one entry only, a socket named ``listener-*``;
- no socket of this network namespace is bound to that path (``/proc/net/unix``). A fork
  server's socket is never *connected to* to find out: a live server reads fds from every
  connection and dies of one closed at once;
- it has not changed for `MIN_AGE_S`: a server binds its socket before it listens, and its
  directory is that young then.

Anything else is kept: another program's live or still starting server, a directory holding
anything more, another user's. Linux only (elsewhere there is no ``/proc/net/unix``: nothing is
removed). A server in another network namespace that shares this /tmp and this user is not seen
as bound: that is the one way a live directory could be taken, and the age rule does not
protect a long-lived one; containers rarely share /tmp so.
"""

from __future__ import annotations

import os
import stat
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

MIN_AGE_S = 60.0
UNIX_TABLE = Path("/proc/net/unix")
DIR_PREFIX = "pymp-"
SOCKET_PREFIX = "listener-"


def bound_paths(table: str) -> frozenset[str]:
    """The filesystem paths that sockets are bound to, from the text of ``/proc/net/unix``
    (``Num RefCount Protocol Flags Type St Inode Path``; the path is the eighth field, absent
    for an unbound socket, ``@``-prefixed for an abstract one)."""
    paths: set[str] = set()
    for line in table.splitlines()[1:]:
        fields = line.split(None, 7)
        if len(fields) == 8 and fields[7].startswith("/"):
            paths.add(fields[7])
    return frozenset(paths)


def dead_dirs(
    tmp: Path, bound: frozenset[str], *, uid: int, now: float, min_age: float = MIN_AGE_S
) -> list[Path]:
    """The directories under ``tmp`` that are dead by the rules above, given the bound socket
    paths ``bound`` and the time ``now`` (seconds since the epoch)."""
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
            if now - info.st_mtime < min_age:
                continue
            inside = os.listdir(entry.path)
            if len(inside) != 1 or not inside[0].startswith(SOCKET_PREFIX):
                continue
            listener = os.path.join(entry.path, inside[0])
            if not stat.S_ISSOCK(os.lstat(listener).st_mode) or listener in bound:
                continue
        except OSError:
            continue  # gone meanwhile, or not ours to read
        found.append(Path(entry.path))
    return found


def remove(dirs: Iterable[Path]) -> int:
    """Remove each directory's one socket and the directory; how many went. One that gained
    an entry meanwhile is kept (``rmdir`` refuses it)."""
    removed = 0
    for path in dirs:
        try:
            for name in os.listdir(path):
                if name.startswith(SOCKET_PREFIX):
                    os.unlink(path / name)
            path.rmdir()
        except OSError:
            continue
        removed += 1
    return removed


def remove_dead(tmp: Path | None = None, *, min_age: float = MIN_AGE_S) -> int:
    """Remove the dead fork server directories under ``tmp`` (the temporary directory); how
    many. Nothing where ``/proc/net/unix`` cannot be read."""
    try:
        table = UNIX_TABLE.read_text()
    except OSError:
        return 0
    where = tmp if tmp is not None else Path(tempfile.gettempdir())
    now = time.time()
    return remove(dead_dirs(where, bound_paths(table), uid=os.getuid(), now=now, min_age=min_age))
