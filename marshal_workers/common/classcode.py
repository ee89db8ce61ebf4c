"""The dataclasses' generated methods compiled once per install, not at every process start.

`dataclasses` writes each class's ``__init__``, ``__repr__``, ``__eq__``, ``__hash__``,
``__setattr__`` and ``__delattr__`` as source text and compiles it with ``exec``: the package's
132 dataclasses on `marshal-run`'s import path are 610 such texts, and compiling them was 70-80
ms of the 0.18-0.19 s of CPU the supervisor's imports took, on the launch's path to the first
record (docs/benchmarks.md, "Launch: the dataclasses' methods compiled once (2026-12-02)"). The
same text always compiles to the same code, so the code is kept, the way the interpreter keeps
a module's bytecode in ``__pycache__``: while `compiled_once` (or `start` ... `stop`) is in
force, the ``exec`` that `dataclasses` calls looks the text up in a cache first, and a text it
compiled is added to the cache file when it stops.

- **What is the same.** The cached code is what ``exec`` compiles from the text: the text in
  full is the key (the class's field names, defaults' names and options are all in it), compiled
  as ``exec`` compiles it for `dataclasses` (file ``<string>``, no ``__future__`` flag inherited,
  the interpreter's optimisation level), and run by the same ``exec`` with the same globals
  and locals. Nothing but compiling is skipped.
- **Where.** ``dataclass-methods.<tag>.bin`` beside the package's own bytecode
  (``marshal_workers/__pycache__``, or under ``sys.pycache_prefix`` as the bytecode goes),
  one file per interpreter and ``-O`` level (``<tag>``: ``cpython-311``, ``cpython-311.opt-1``,
  as the ``.pyc`` files are named): the interpreter's magic number and optimisation level, a
  digest of the payload, then the payload (the texts and their code, marshalled), decoded
  only if the three match. It trusts the file as the interpreter trusts the ``.pyc`` files
  beside it (whoever can write there can change the package's code anyway): the digest is
  against damage (a disk's error, a copy cut short), not against an attacker.
- **Never in the way.** A file that is missing, unreadable, damaged, of another interpreter or
  not a cache is ignored (the texts are compiled, as without it); it is written only where the
  interpreter would write bytecode (not under ``PYTHONDONTWRITEBYTECODE``: the installs write it
  ahead, `python -m marshal_workers.supervisor.precompile`), atomically (a file of its own, then
  renamed; a writer's temporary file is removed whatever stops it, and one a killed writer left
  is removed by the first start after `STALE_TEMPORARY_S`), and a failure to write is ignored.
  Processes that start together may each write it: the last one's file wins, and a text another
  one added is compiled once more by a later start, which adds it again. It holds at most
  `MAX_TEXTS` texts: beyond, only the texts of the process that writes it.
- **Only for the package's imports.** `dataclasses` is patched only inside `compiled_once`
  (the supervisor's imports, `supervisor.cli`) and between `start` and `stop` (the fork
  server's preload: `childlink.forkserver` starts it, `childlink.preloaded` stops it), and is
  as it was after: a handler's dataclasses, imported later, are compiled as usual.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import importlib.util
import marshal
import os
import stat
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import CodeType
from typing import Any

MAX_TEXTS = 4096
DIGEST_SIZE = 16
MAX_FILE_BYTES = 64 << 20  # the package's 640 texts are 0.7 MB
STALE_TEMPORARY_S = 600.0  # a writer takes milliseconds; older temporaries are a killed one's
FILE_PREFIX = "dataclass-methods"
_ABSENT = object()


def cache_file() -> Path | None:
    """Where the cache is kept for this interpreter: beside the package's bytecode."""
    tag = sys.implementation.cache_tag
    if tag is None:
        return None
    level = f".opt-{sys.flags.optimize}" if sys.flags.optimize else ""  # as a .pyc's name
    package_init = Path(__file__).resolve().parent.parent / "__init__.py"
    return Path(importlib.util.cache_from_source(str(package_init))).parent / (
        f"{FILE_PREFIX}.{tag}{level}.bin"
    )


def _header() -> bytes:
    """What a file of this interpreter starts with: its magic number and optimisation level."""
    return importlib.util.MAGIC_NUMBER + bytes([sys.flags.optimize & 0xFF])


def _digest(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=DIGEST_SIZE).digest()


def read_cache(path: Path) -> dict[str, CodeType]:
    """The texts and their code in the file at ``path``; empty if it is absent, damaged or not
    a cache of this interpreter. Never raises, never waits (a FIFO, a device at that name are
    not read), reads at most `MAX_FILE_BYTES`. Its payload is decoded only under its header
    and a digest that matches it: damaged marshal data raises more than `ValueError`
    (`SystemError`, `UnicodeDecodeError`), may ask for gigabytes (a length changed), may crash
    the interpreter, or decodes to other code, which would run as the package's."""
    header = _header()
    try:
        data = _read_regular_file(path, MAX_FILE_BYTES)
        digest = data[len(header) : len(header) + DIGEST_SIZE]
        payload = data[len(header) + DIGEST_SIZE :]
        if not data.startswith(header) or digest != _digest(payload):
            return {}
        texts = marshal.loads(payload)
    except Exception:  # whatever the file holds, it is only a cache
        return {}
    if not isinstance(texts, dict):
        return {}
    return {
        text: code
        for text, code in texts.items()
        if isinstance(text, str) and isinstance(code, CodeType)
    }


def _read_regular_file(path: Path, limit: int) -> bytes:
    """The content of ``path`` if it is a regular file of at most ``limit`` bytes; else b""."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode) or status.st_size > limit:
            return b""
        with open(fd, "rb", closefd=False) as file:
            return file.read(limit + 1)
    finally:
        os.close(fd)


def remove_stale_temporaries(path: Path) -> None:
    """Remove the temporary files of writers of ``path`` killed as they wrote (older than
    `STALE_TEMPORARY_S`: a younger one may be a process writing now)."""
    horizon = time.time() - STALE_TEMPORARY_S
    with contextlib.suppress(OSError):
        for leftover in path.parent.glob(f"{glob.escape(path.name)}.*.tmp"):
            with contextlib.suppress(OSError):
                if leftover.stat().st_mtime < horizon:
                    leftover.unlink()


def write_cache(path: Path, texts: Mapping[str, CodeType]) -> bool:
    """Write ``texts`` to ``path`` atomically; whether it was written (never raises but what
    stops the process, e.g. `KeyboardInterrupt`, and leaves no temporary file of its own
    whatever stops it, but a kill)."""
    temporary: Path | None = None
    written = False
    try:
        payload = marshal.dumps(dict(texts))
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(path)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.", suffix=".tmp")
        temporary = Path(name)
        with open(fd, "wb") as out:
            out.write(_header() + _digest(payload) + payload)
        os.chmod(temporary, 0o644)  # readable by all, as the bytecode beside it (mkstemp: 600)
        os.replace(temporary, path)
        written = True
    except Exception:  # it is only a cache
        return False
    finally:
        if temporary is not None and not written:
            with contextlib.suppress(OSError):
                temporary.unlink()
    return True


class MethodCode:
    """The cache of one process: its ``exec`` is what `dataclasses` calls while it is on."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.known: dict[str, CodeType] = {}
        if path is not None:
            self.known = read_cache(path)
            remove_stale_temporaries(path)  # a killed writer's, even where nothing is written
        self.used: dict[str, CodeType] = {}
        self.compiled = 0
        self._saved: object = _ABSENT

    def code(self, text: str) -> CodeType:
        """The code ``exec`` would compile from ``text`` (`dataclasses`' flags: none)."""
        code = self.known.get(text)
        if code is None:
            code = compile(text, "<string>", "exec", dont_inherit=True)
            self.compiled += 1
        self.used[text] = code
        return code

    def exec(
        self,
        source: str | CodeType,
        globals: dict[str, Any] | None = None,  # exec's own parameter names
        locals: Mapping[str, object] | None = None,
    ) -> None:
        """``exec`` with a text's code from the cache."""
        exec(self.code(source) if isinstance(source, str) else source, globals, locals)

    def start(self) -> None:
        """`dataclasses` compiles through this cache from now on."""
        self._saved = vars(dataclasses).get("exec", _ABSENT)
        setattr(dataclasses, "exec", self.exec)  # noqa: B010 (a module global, not an attribute)

    def stop(self, *, write: bool = False) -> bool:
        """`dataclasses` as it was before `start`; the cache file written if a text was
        compiled here, where bytecode may be written or if ``write``. Whether it was written."""
        if self._saved is _ABSENT:
            vars(dataclasses).pop("exec", None)
        else:
            setattr(dataclasses, "exec", self._saved)  # noqa: B010
        if self.compiled == 0 or self.path is None or (sys.dont_write_bytecode and not write):
            return False
        merged = {**self.known, **self.used}
        return write_cache(self.path, merged if len(merged) <= MAX_TEXTS else self.used)


_current: MethodCode | None = None


def start() -> bool:
    """Compile the dataclasses' methods through the cache until `stop`; whether this started
    it (not if it was on already)."""
    global _current  # noqa: PLW0603 (one cache per process, between start and stop)
    if _current is not None:
        return False
    _current = MethodCode(cache_file())
    _current.start()
    return True


def stop(*, write: bool = False) -> bool:
    """End `start`: `dataclasses` as before; whether the cache file was written (``write``:
    even under ``PYTHONDONTWRITEBYTECODE``)."""
    global _current
    current, _current = _current, None
    return current.stop(write=write) if current is not None else False


@contextlib.contextmanager
def compiled_once(*, write: bool = False) -> Iterator[None]:
    """The dataclasses defined inside get their methods' code from the cache (inside another
    `compiled_once`, the outer one's, which goes on after this one)."""
    started = start()
    try:
        yield
    finally:
        if started:
            stop(write=write)
