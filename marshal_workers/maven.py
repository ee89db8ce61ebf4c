"""Resolving jars with Maven into a cache directory, shared by the local Kafka and the audit.

`copy_dependencies` runs ``mvn dependency:copy-dependencies`` in a work directory and returns
None, or one line saying why it failed (its full output is kept in the cache directory);
`install_libs` swaps a complete ``libs/`` into the cache and only then writes the marker that
says the cache is complete, so a resolve killed half-way is never taken for a finished one.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

RESOLVE_TIMEOUT_S = 900.0


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
