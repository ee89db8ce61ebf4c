"""Which local clusters this user started, so that `kafka stop` run elsewhere finds them.

`marshal-admin kafka start` notes the cluster's directory (absolute) in one small file per
user, ``$XDG_STATE_HOME/marshal-workers/local-kafka.json`` (``~/.local/state/...`` without
it); `stop` forgets it. A `kafka stop` with no cluster in its own directory stops the one
cluster noted there that still runs, or says where it looked. An entry whose directory no
longer records a cluster (stopped through the library, or deleted) is dropped when read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from marshal_workers.localkafka.maven import locked
from marshal_workers.localkafka.state import state_path

FILE_NAME = "local-kafka.json"


def registry_path(env: Mapping[str, str] | None = None) -> Path:
    """The file that lists the clusters this user started."""
    env = os.environ if env is None else env
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "marshal-workers" / FILE_NAME


def _read(path: Path) -> list[str]:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [d for d in found if isinstance(d, str)] if isinstance(found, list) else []


def _write(path: Path, directories: list[str]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(directories))
    tmp.replace(path)


def _update(env: Mapping[str, str] | None, add: Path | None, drop: Path | None) -> list[Path]:
    """Add or drop a directory, drop entries that record no cluster; what is left."""
    path = registry_path(env)
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path.with_suffix(".lock")):
        kept = [d for d in _read(path) if state_path(Path(d)).exists()]
        if add is not None and str(add) not in kept:
            kept.append(str(add))
        if drop is not None:
            kept = [d for d in kept if d != str(drop)]
        _write(path, kept)
    return [Path(d) for d in kept]


def remember(directory: Path, env: Mapping[str, str] | None = None) -> None:
    """Note a cluster started in ``directory``."""
    _update(env, directory.resolve(), None)


def forget(directory: Path, env: Mapping[str, str] | None = None) -> None:
    """Forget the cluster of ``directory`` (stopped)."""
    _update(env, None, directory.resolve())


def started(env: Mapping[str, str] | None = None) -> list[Path]:
    """The directories of the clusters this user started that still record one."""
    if not registry_path(env).exists():
        return []
    return _update(env, None, None)
