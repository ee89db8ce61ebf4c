"""The per-host lock on a member identity: one (group, client id) runs once per host.

Two supervisors with one client id in one group would take each other's claims over (restart
recovery lets a new instance of a client id take its fresh claims). So `host_lock` holds an
exclusive ``flock`` on a file named for the *group and* the client id: two services on one
host that use the default ``HOST-INSTANCE`` ids in different groups both run, since client ids
are unique within a group only.

Theory of operation
-------------------
- The lock is the kernel's ``flock`` on an open file: it dies with the process, however the
  process dies. A file left behind by a killed process is therefore *stale* but harmless: the
  next holder simply locks it again (and writes its pid into it).
- On a clean exit the holder removes the file *while still holding the lock*, then closes it.
- A process that opened the file just before it was removed may then lock the removed inode.
  So after locking, the holder checks that the path still names the inode it locked; if not,
  it closes and starts over. Only the lock on the file the path names counts.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from marshal_workers.common.errors import ConfigError

MAX_NAME = 200  # file names longer than this are hashed (file systems allow 255 bytes)
ATTEMPTS = 20


def lock_dir() -> Path:
    """Where the locks live: $XDG_RUNTIME_DIR, else the user's cache directory."""
    base = os.environ.get("XDG_RUNTIME_DIR") or os.path.expanduser("~/.cache")
    return Path(base) / "marshal-workers" / "locks"


def lock_path(group: str, client_id: str, directory: Path | None = None) -> Path:
    """The lock file of (``group``, ``client_id``): both names, escaped (so that no group or
    id, ``..`` included, names another path), hashed if too long."""
    name = quote(group, safe="") + "%2F" + quote(client_id, safe="")
    if len(name) > MAX_NAME:
        name = hashlib.sha256(f"{group}/{client_id}".encode()).hexdigest()
    return (directory or lock_dir()) / f"{name}.lock"


def _same_file(path: Path, fd: int) -> bool:
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


@contextmanager
def host_lock(group: str, client_id: str, directory: Path | None = None) -> Iterator[Path]:
    """Hold the host's lock on (``group``, ``client_id``) for the block; ConfigError (exit 2)
    if a live process holds it. The file is removed when the block ends."""
    path = lock_path(group, client_id, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(ATTEMPTS):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise ConfigError(
                f"client id {client_id!r} of group {group!r} is already running on this host "
                f"(pid {holder}); give each worker its own --client-id or --instance"
            ) from None
        if not _same_file(path, fd):  # removed or replaced by its last holder meanwhile
            os.close(fd)
            continue
        break
    else:
        raise ConfigError(f"cannot lock {path}: it keeps being replaced")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield path
    finally:
        try:
            if _same_file(path, fd):
                path.unlink()  # while holding the lock: see the module docstring
        finally:
            os.close(fd)
