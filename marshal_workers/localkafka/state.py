"""The state file of a local cluster: what `start` launched, so `stop`/`status` find it later.

`<dir>/state.json` is written atomically (temp file + rename) when the nodes are launched
and again when a node is restarted; `stop` removes it. It names each node's pid (which is
also its process group, since every node runs in its own session), ports, directory and
the exact command line, so another process can restart a node the same way.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from marshal_workers.common.errors import MarshalError

STATE_FILE = "state.json"
STATE_VERSION = 1


@dataclass(frozen=True, slots=True)
class NodeState:
    """One launched node."""

    node_id: int
    pid: int
    broker_port: int
    controller_port: int
    node_dir: str
    argv: tuple[str, ...] = ()
    container_id: str | None = None

    @property
    def bootstrap(self) -> str:
        """This node's own `host:port`."""
        return f"127.0.0.1:{self.broker_port}"


@dataclass(frozen=True, slots=True)
class ClusterState:
    """A launched cluster: its backend, bootstrap string, cluster id and nodes."""

    backend: str
    bootstrap: str
    cluster_id: str
    nodes: tuple[NodeState, ...]
    started_at: float = 0.0
    version: int = field(default=STATE_VERSION)

    def node(self, node_id: int) -> NodeState:
        """The node with id `node_id`; a MarshalError if there is none."""
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        known = ", ".join(str(n.node_id) for n in self.nodes)
        raise MarshalError(f"no node {node_id} in this cluster (nodes: {known})")

    def with_node(self, updated: NodeState) -> ClusterState:
        """A copy with the node of the same id replaced by `updated`."""
        nodes = tuple(updated if n.node_id == updated.node_id else n for n in self.nodes)
        return replace(self, nodes=nodes)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of this state."""
        data = asdict(self)
        for node in data["nodes"]:
            node["argv"] = list(node["argv"])
            node["bootstrap"] = f"127.0.0.1:{node['broker_port']}"
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterState:
        """Parse what `to_json` wrote (extra keys are ignored)."""
        nodes = tuple(
            NodeState(
                node_id=int(n["node_id"]),
                pid=int(n["pid"]),
                broker_port=int(n["broker_port"]),
                controller_port=int(n["controller_port"]),
                node_dir=str(n["node_dir"]),
                argv=tuple(str(a) for a in n.get("argv", ())),
                container_id=n.get("container_id"),
            )
            for n in data["nodes"]
        )
        return cls(
            backend=str(data["backend"]),
            bootstrap=str(data["bootstrap"]),
            cluster_id=str(data["cluster_id"]),
            nodes=nodes,
            started_at=float(data.get("started_at", 0.0)),
            version=int(data.get("version", STATE_VERSION)),
        )


def state_path(directory: Path) -> Path:
    """Where the state file of the cluster in `directory` lives."""
    return directory / STATE_FILE


def load_state(directory: Path) -> ClusterState | None:
    """The saved state of the cluster in `directory`, or None if there is none."""
    path = state_path(directory)
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return None
    try:
        return ClusterState.from_json(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise MarshalError(f"unreadable local Kafka state file {path}: {exc}") from exc


def save_state(directory: Path, state: ClusterState) -> None:
    """Write the state file atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    path = state_path(directory)
    tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=2) + "\n", "utf-8")
    tmp.replace(path)


def remove_state(directory: Path) -> None:
    """Remove the state file, if any."""
    state_path(directory).unlink(missing_ok=True)
