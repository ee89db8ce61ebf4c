"""Resolving jars with Maven into a cache directory, shared by the local Kafka and the audit.

A cache directory (`cache_dir_for`: ``~/.cache/marshal-workers/NAME`` unless the environment
says otherwise) holds ``libs/`` and a ``COMPLETE`` marker with the digest of what was resolved.
`resolve_cached` fills it once per machine: under a file lock (`locked`), re-checked once the
lock is held, it sweeps the ``work-*`` leftovers of a killed resolve, lets the caller run Maven
into a fresh ``work-*`` directory, and installs the result. `copy_dependencies` runs
``mvn dependency:copy-dependencies`` in a work directory and returns None, or one line saying
why it failed (its full output is kept in the cache directory); `install_libs` swaps a
complete ``libs/`` into the cache and only then writes the marker that says the cache is
complete, so a resolve killed half-way is never taken for a finished one.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from marshal_workers.common.errors import MarshalError

RESOLVE_TIMEOUT_S = 900.0
MARKER = "COMPLETE"
"""The file whose content (a digest) says the cache holds a complete resolve of it."""


def cache_dir_for(name: str, override_var: str, env: Mapping[str, str] | None = None) -> Path:
    """The jar cache ``NAME``: ``$override_var``, else ``$XDG_CACHE_HOME/marshal-workers/NAME``,
    else ``~/.cache/marshal-workers/NAME``."""
    env = os.environ if env is None else env
    explicit = env.get(override_var)
    if explicit:
        return Path(explicit).expanduser()
    xdg = env.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path(env.get("HOME", "~")).expanduser() / ".cache"
    return base / "marshal-workers" / name


def find_java(env: Mapping[str, str] | None = None) -> str:
    """The `java` to run: `$JAVA_HOME/bin/java`, else the one on PATH; one clear error if none."""
    env = os.environ if env is None else env
    java_home = env.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java", path=env.get("PATH", ""))
    if found is None:
        raise MarshalError(
            "java not found (no JAVA_HOME, none on PATH): install a Java 17+ runtime, "
            "e.g. `apt-get install openjdk-17-jre-headless`"
        )
    return found


def find_mvn(purpose: str, env: Mapping[str, str] | None = None) -> str:
    """The `mvn` on PATH; one clear error if there is none (saying it is needed to ``purpose``)."""
    env = os.environ if env is None else env
    found = shutil.which("mvn", path=env.get("PATH", ""))
    if found is None:
        raise MarshalError(
            f"mvn not found on PATH: install Maven 3.8+ (e.g. `apt-get install maven`) to {purpose}"
        )
    return found


@contextmanager
def locked(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on `lock_file` (created if needed) for the block."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with lock_file.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def resolve_cached(
    cache_dir: Path,
    *,
    is_complete: Callable[[], bool],
    run_maven: Callable[[str, Path], None],
    digest: str,
    what: str,
    mvn_purpose: str,
    env: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> None:
    """Make sure ``cache_dir`` holds a complete resolve (nothing to do if `is_complete()`).

    ``run_maven(mvn, work)`` writes its pom into the fresh ``work`` directory and fills
    ``work/libs`` (with `copy_dependencies`), raising the caller's own error if Maven fails;
    ``digest`` is what the marker then holds. ``what`` names the jars in the two progress
    lines, ``mvn_purpose`` says in the error what Maven would be needed for."""
    if is_complete():
        return
    env = os.environ if env is None else env
    find_java(env)  # Maven needs it too, and this error says what to install
    mvn = find_mvn(mvn_purpose, env)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with locked(cache_dir / ".lock"):
        if is_complete():  # another process finished while we waited
            return
        for leftover in cache_dir.glob("work-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix="work-", dir=cache_dir))
        started = time.monotonic()
        try:
            if progress:
                progress(f"resolving {what} with Maven into {cache_dir}")
            run_maven(mvn, work)
            install_libs(work / "libs", cache_dir, MARKER, digest)
            if progress:
                progress(f"resolved {what} in {time.monotonic() - started:.1f}s")
        finally:
            shutil.rmtree(work, ignore_errors=True)


def copy_dependencies(
    mvn: str,
    work: Path,
    args: Sequence[str],
    expected_jar: str,
    cache_dir: Path,
    env: Mapping[str, str],
    timeout_s: float = RESOLVE_TIMEOUT_S,
) -> str | None:
    """Copy the pom's dependencies into ``work/libs``; None on success, else why it failed
    (the exit code, Maven's most telling line and where its full output was kept)."""
    argv = [
        mvn, "-q", "-B", "-Dstyle.color=never", *args,
        "dependency:copy-dependencies", f"-DoutputDirectory={work / 'libs'}",
    ]  # fmt: skip
    log_path = work / "mvn.log"
    try:
        with log_path.open("wb") as log:
            code = subprocess.run(
                argv, cwd=work, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=dict(env), timeout=timeout_s, check=False,
            ).returncode  # fmt: skip
    except subprocess.TimeoutExpired:
        code = -1
    if code == 0 and (work / "libs" / expected_jar).is_file():
        return None
    kept = cache_dir / "mvn-failed.log"
    shutil.copyfile(log_path, kept)
    return f"(exit {code}): {last_error_line(kept)} (full output: {kept})"


def last_error_line(log: Path) -> str:
    """The most telling line of a Maven log: its first line with ERROR, else its last line."""
    lines = [line.strip() for line in log.read_text("utf-8", "replace").splitlines()]
    lines = [line for line in lines if line]
    errors = [line for line in lines if "ERROR" in line]
    if errors:
        return errors[0][:300]
    return lines[-1][:300] if lines else "no output"


def install_libs(new_libs: Path, cache_dir: Path, marker: str, digest: str) -> None:
    """Swap a complete ``libs/`` into the cache, then write the marker (in that order)."""
    marker_path = cache_dir / marker
    marker_path.unlink(missing_ok=True)
    target = cache_dir / "libs"
    if target.exists():
        shutil.rmtree(target)
    new_libs.rename(target)
    tmp = cache_dir / f".{marker}.tmp"
    tmp.write_text(digest + "\n", "utf-8")
    tmp.replace(marker_path)
