"""Theory of operation: start, stop, inspect and damage a local KRaft cluster.

`start_cluster` takes the cluster directory's lock, and:

1. if the state file names nodes that are all alive, returns a handle on them (already
   running); if some are dead, starts only those again, each from its own data directory
   with its own ports (the cluster keeps its id, its topics and their records). Only
   ``fresh`` (``--fresh``) stops a recorded cluster and formats a new one;
2. picks a backend (`backend`), finds `java`, gets a classpath (resolving jars if needed);
3. writes each node's directory anew (`node-N/`: server.properties, log4j2.properties,
   data/), formats the storage of every node with one cluster id, and launches the nodes,
   each in its own session; the state file is written as soon as they are launched, so a
   `stop` can always find them;
4. waits until every node answers a metadata request listing all brokers and a controller.
   A node that exits meanwhile, or a timeout, stops the others and raises a MarshalError
   with the tail of the node's log.

`stop_cluster` SIGTERMs every node's process group, waits a bounded time, SIGKILLs what is
left, and removes the state file; with no state file it does nothing (idempotent).
`LocalKafka` is the handle tests hold: bootstrap string, `kill_node`, `restart_node`,
`leader_of`, `stop`. The CLI and the pytest fixtures both go through these functions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from marshal_workers.common.errors import MarshalError
from marshal_workers.localkafka import docker, probe, process
from marshal_workers.localkafka.backend import BackendChoice, choose_backend, classpath_for
from marshal_workers.localkafka.config import (
    HOST,
    bootstrap_of,
    check_node_count,
    jvm_flags,
    log4j2_properties,
    new_cluster_id,
    pick_free_ports,
    plan_nodes,
    render_properties,
    server_properties,
)
from marshal_workers.localkafka.maven import find_java, locked
from marshal_workers.localkafka.paths import JVM_OPTS_ENV, Progress, default_cache_dir, no_progress
from marshal_workers.localkafka.security import (
    ADMIN_USER,
    MECHANISM,
    SCRAM_ITERATIONS,
    SECURE_DIR,
    Security,
    load_security,
    new_password,
    new_security,
)
from marshal_workers.localkafka.state import (
    ClusterState,
    NodeState,
    load_state,
    remove_state,
    save_state,
    state_path,
)

DEFAULT_START_TIMEOUT_S = 120.0
DEFAULT_GRACE_S = 15.0
LOCK_FILE = ".lock"


@dataclass(frozen=True, slots=True)
class StartOptions:
    """What `start_cluster` needs; None fields take their defaults (see the CLI help)."""

    directory: Path
    nodes: int | None = None
    backend: str | None = None
    cache_dir: Path | None = None
    timeout: float | None = None
    env: Mapping[str, str] | None = None
    fresh: bool = False  # format a new cluster even if one is recorded (its data is lost)
    secure: bool = False  # SASL/SCRAM over TLS, ACLs required (`security`)


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """The saved state of a cluster and which of its nodes are alive now."""

    directory: Path
    state: ClusterState
    alive: Mapping[int, bool] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        """Whether every node is alive."""
        return bool(self.alive) and all(self.alive.values())

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: the state, plus `running`, `directory` and each node's `alive`."""
        data = self.state.to_json()
        data["directory"] = str(self.directory)
        data["running"] = self.running
        for node in data["nodes"]:
            node["alive"] = self.alive.get(node["node_id"], False)
        return data


class LocalKafka:
    """A handle on a running local cluster (from `start_cluster`)."""

    def __init__(
        self,
        directory: Path,
        state: ClusterState,
        env: Mapping[str, str] | None = None,
        procs: Mapping[int, subprocess.Popen[bytes]] | None = None,
        already_running: bool = False,
    ) -> None:
        self.directory = directory
        self.already_running = already_running
        self._state = state
        self._env = dict(os.environ if env is None else env)
        self._procs: dict[int, subprocess.Popen[bytes]] = dict(procs or {})
        self.security: Security | None = load_security(directory)

    @property
    def secure(self) -> bool:
        """Whether the cluster is secured (SASL/SCRAM over TLS, ACLs required)."""
        return self.security is not None

    @property
    def client_table(self) -> dict[str, str]:
        """The super user's librdkafka properties (empty on a plaintext cluster)."""
        return {} if self.security is None else self.security.admin_table

    @property
    def admin_config_file(self) -> Path | None:
        """The admin's ``--config`` file on a secured cluster (None on a plaintext one)."""
        return None if self.security is None else self.security.directory / f"{ADMIN_USER}.toml"

    def add_user(self, name: str, password: str | None = None, timeout: float = 30.0) -> Path:
        """Create (or reset) the SCRAM user ``name`` on a secured cluster; its ``--config``
        file (bootstrap servers and ``[kafka]`` table, 0600) is returned."""
        if self.security is None:
            raise MarshalError("users are for a secured local Kafka (kafka start --secure)")
        password = password or new_password()
        probe.upsert_scram_user(
            self.bootstrap, self.client_table, name, password, MECHANISM, SCRAM_ITERATIONS, timeout
        )
        return self.security.write_client_file(name, password, self.bootstrap)

    @property
    def bootstrap(self) -> str:
        """The `bootstrap.servers` string naming every node."""
        return self._state.bootstrap

    @property
    def node_ids(self) -> list[int]:
        """The ids of the cluster's nodes."""
        return [node.node_id for node in self._state.nodes]

    def alive(self) -> dict[int, bool]:
        """Which nodes are alive now."""
        self._reap()
        return {node.node_id: _node_alive(node) for node in self._state.nodes}

    def stop(self, grace: float = DEFAULT_GRACE_S, progress: Progress = no_progress) -> None:
        """Stop every node and remove the state (see `stop_cluster`)."""
        stop_cluster(self.directory, grace, progress)
        self._reap()

    def kill_node(self, node_id: int) -> None:
        """kill -9 one node (its process group) and wait until it is gone."""
        node = self._state.node(node_id)
        _require_processes(self._state, "kill a node")
        process.kill(node)
        proc = self._procs.get(node_id)
        if proc is not None:
            proc.wait(timeout=10.0)

    def restart_node(self, node_id: int, timeout: float = DEFAULT_START_TIMEOUT_S) -> None:
        """Start a node again from its own data (killing it first if it runs); wait for it."""
        node = self._state.node(node_id)
        _require_processes(self._state, "restart a node")
        if _node_alive(node):
            self.kill_node(node_id)
        with locked(self.directory / LOCK_FILE):
            proc = process.launch(list(node.argv), Path(node.node_dir), self._env)
            self._procs[node_id] = proc
            self._state = self._state.with_node(replace(node, pid=proc.pid))
            save_state(self.directory, self._state)
        self.wait_ready([node_id], timeout)

    def leader_of(self, topic: str, partition: int, timeout: float = 10.0) -> int | None:
        """The node id leading `topic`/`partition` now, or None if there is no leader."""
        return probe.leader_of(self.bootstrap, topic, partition, timeout, self.client_table)

    def quorum_leader(self, timeout: float = 10.0) -> int | None:
        """The live node leading the controller quorum (from the nodes' logs), or None if no
        live node has said so within ``timeout`` (a container's log is not read)."""
        deadline = time.monotonic() + timeout
        while True:
            alive = {n for n, up in self.alive().items() if up}
            dirs = [Path(node.node_dir) for node in self._state.nodes if not node.container_id]
            leader = process.quorum_leader(dirs)
            if leader in alive or time.monotonic() >= deadline:
                return leader if leader in alive else None
            time.sleep(0.2)

    def wait_ready(self, node_ids: Iterable[int], timeout: float) -> None:
        """Wait until the given nodes answer with every broker listed; raise with a log tail."""
        wanted = [self._state.node(node_id) for node_id in node_ids]
        try:
            probe.wait_until_ready(
                {node.node_id: node.bootstrap for node in wanted},
                expected_brokers=len(self._state.nodes),
                timeout=timeout,
                check=lambda: self._check_alive(wanted),
                client=self.client_table,
            )
        except probe.NotReadyError as exc:
            first = self._state.node(min(exc.pending))
            raise MarshalError(f"{exc}; last log lines:\n{_tail(first)}") from exc

    def _check_alive(self, nodes: Iterable[NodeState]) -> None:
        """Raise a MarshalError with its log tail if one of `nodes` has exited."""
        for node in nodes:
            proc = self._procs.get(node.node_id)
            code = proc.poll() if proc is not None else None
            if code is not None or (proc is None and not _node_alive(node)):
                how = f"exited with code {code}" if code is not None else "is not running"
                raise MarshalError(
                    f"kafka node {node.node_id} {how} while starting; last log lines:\n"
                    f"{_tail(node)}"
                )

    def _reap(self) -> None:
        """Collect the exit status of our own node processes that have ended."""
        for proc in self._procs.values():
            proc.poll()


def start_cluster(options: StartOptions, progress: Progress = no_progress) -> LocalKafka:
    """Start a local cluster in ``options.directory`` (or find the one running); see the top."""
    directory = options.directory.resolve()
    env = dict(os.environ if options.env is None else options.env)
    with locked(directory / LOCK_FILE):
        existing = load_state(directory)
        if existing is not None and options.fresh:
            progress(f"kafka: --fresh: stopping the cluster in {directory}; its data is lost")
            _stop_locked(directory, existing, DEFAULT_GRACE_S, no_progress)
        elif existing is not None:
            count = len(existing.nodes)
            if options.secure and load_security(directory) is None:
                raise MarshalError(
                    f"a plaintext local Kafka is recorded in {directory}; stop it first "
                    "(or start with --fresh, which loses its data)"
                )
            if options.nodes not in (None, count):
                raise MarshalError(
                    f"a {count}-node local Kafka is recorded in {directory}; stop it first "
                    "(or start with --fresh, which loses its data)"
                )
            status = _status_of(directory, existing)
            if status.running:
                progress(f"kafka: already running in {directory} ({count} node(s))")
                return LocalKafka(directory, existing, env, already_running=True)
            timeout = options.timeout or DEFAULT_START_TIMEOUT_S
            return _restart_dead_locked(directory, status, env, timeout, progress)
        nodes = check_node_count(options.nodes or 1)
        choice = choose_backend(options.backend, env, nodes)
        progress(f"kafka: {choice.reason}")
        timeout = options.timeout or DEFAULT_START_TIMEOUT_S
        if choice.name == "docker":
            if options.secure:
                raise MarshalError("a secured local Kafka needs --backend maven (or auto)")
            return _start_docker(directory, env, timeout, progress)
        java = find_java(env)
        cache_dir = options.cache_dir or default_cache_dir(env)
        classpath = classpath_for(choice, env, cache_dir, progress)
        return _start_processes(
            directory, nodes=nodes, choice=choice, java=java, classpath=classpath, env=env,
            timeout=timeout, progress=progress, secure=options.secure,
        )  # fmt: skip


def _restart_dead_locked(
    directory: Path,
    status: ClusterStatus,
    env: dict[str, str],
    timeout: float,
    progress: Progress,
) -> LocalKafka:
    """Start the dead nodes of a recorded cluster again from their own data (the caller holds
    the lock); wait until every node answers. The live nodes are left as they are."""
    state = status.state
    dead = [node for node in state.nodes if not status.alive.get(node.node_id)]
    if state.backend == "docker":
        raise MarshalError(
            f"the local Kafka container recorded in {directory} is gone and its data with it: "
            "start with --fresh (or stop it first)"
        )
    ids = ", ".join(str(node.node_id) for node in dead)
    progress(f"kafka: node(s) {ids} of the cluster in {directory} are dead; starting them again")
    procs: dict[int, subprocess.Popen[bytes]] = {}
    for node in dead:
        proc = process.launch(list(node.argv), Path(node.node_dir), env)
        procs[node.node_id] = proc
        state = state.with_node(replace(node, pid=proc.pid))
    save_state(directory, state)
    cluster = LocalKafka(directory, state, env, procs)
    cluster.wait_ready(cluster.node_ids, timeout)
    progress(f"kafka: node(s) {ids} back; {len(state.nodes)} node(s) at {state.bootstrap}")
    return cluster


def _start_processes(
    directory: Path,
    *,
    nodes: int,
    choice: BackendChoice,
    java: str,
    classpath: str,
    env: dict[str, str],
    timeout: float,
    progress: Progress,
    secure: bool = False,
) -> LocalKafka:
    """Write, format and launch `nodes` JVM nodes, then wait for them (steps 3 and 4)."""
    started = time.monotonic()
    specs = plan_nodes(nodes)
    cluster_id = new_cluster_id()
    node_dirs: dict[int, Path] = {}
    shutil.rmtree(directory / SECURE_DIR, ignore_errors=True)
    security = new_security(directory) if secure else None
    for spec in specs:
        node_dir = directory / f"node-{spec.node_id}"
        shutil.rmtree(node_dir, ignore_errors=True)
        (node_dir / "data").mkdir(parents=True)
        props = server_properties(spec, specs, node_dir / "data")
        if security is not None:
            props.update(security.server_properties(spec.broker_port, spec.controller_port, HOST))
        properties = node_dir / process.PROPERTIES
        properties.touch(mode=0o600)  # a secured node's holds passwords
        properties.write_text(render_properties(props), "utf-8")
        log4j = log4j2_properties(node_dir / process.SERVER_LOG)
        (node_dir / process.LOG4J2).write_text(log4j, "utf-8")
        node_dirs[spec.node_id] = node_dir
    progress(f"kafka: formatting storage of {nodes} node(s), cluster id {cluster_id}")
    scram = () if security is None else ("--add-scram", security.scram_argument())
    process.format_storage(java, classpath, cluster_id, node_dirs, env, scram)
    flags = jvm_flags(nodes, env, JVM_OPTS_ENV)
    procs: dict[int, subprocess.Popen[bytes]] = {}
    launched: list[NodeState] = []
    try:
        for spec in specs:
            node_dir = node_dirs[spec.node_id]
            argv = process.node_argv(java, classpath, flags, node_dir)
            proc = process.launch(argv, node_dir, env)
            procs[spec.node_id] = proc
            node = NodeState(
                spec.node_id,
                proc.pid,
                spec.broker_port,
                spec.controller_port,
                str(node_dir),
                tuple(argv),
            )
            launched.append(node)
        bootstrap = bootstrap_of(specs)
        state = ClusterState(choice.name, bootstrap, cluster_id, tuple(launched), time.time())
        save_state(directory, state)
        pids = ", ".join(str(node.pid) for node in launched)
        progress(f"kafka: launched {nodes} node(s) (pids {pids}); waiting until they answer")
        cluster = LocalKafka(directory, state, env, procs)
        cluster.wait_ready(cluster.node_ids, timeout)
    except BaseException:
        process.terminate(launched, grace=5.0)
        for proc in procs.values():
            proc.poll()
        remove_state(directory)
        raise
    if security is not None:
        admin_file = security.write_client_file(ADMIN_USER, security.admin_password, bootstrap)
        progress(f"kafka: secured (SASL {MECHANISM} over TLS, ACLs required); super user "
                 f"{ADMIN_USER}: --config {admin_file}")  # fmt: skip
    elapsed = time.monotonic() - started
    progress(f"kafka: {nodes} node(s) ready in {elapsed:.1f}s at {state.bootstrap}")
    return cluster


def _start_docker(
    directory: Path, env: dict[str, str], timeout: float, progress: Progress
) -> LocalKafka:
    """Start the one-node Docker backend and wait for it."""
    started = time.monotonic()
    port = pick_free_ports(1)[0]
    progress(f"kafka: starting container {docker.IMAGE}")
    container_id = docker.start_container(port, env)
    node = NodeState(1, 0, port, 0, str(directory), container_id=container_id)
    state = ClusterState("docker", node.bootstrap, "", (node,), time.time())
    save_state(directory, state)
    cluster = LocalKafka(directory, state, env)
    try:
        cluster.wait_ready([1], timeout)
    except BaseException:
        docker.remove_container(container_id)
        remove_state(directory)
        raise
    progress(f"kafka: 1 node ready in {time.monotonic() - started:.1f}s at {state.bootstrap}")
    return cluster


def stop_cluster(
    directory: Path, grace: float = DEFAULT_GRACE_S, progress: Progress = no_progress
) -> bool:
    """Stop the cluster in `directory` and remove its state; False if none was recorded."""
    directory = directory.resolve()
    if not state_path(directory).exists():
        progress(f"kafka: no local Kafka recorded in {directory}; nothing to stop")
        return False
    with locked(directory / LOCK_FILE):
        state = load_state(directory)
        if state is None:
            progress(f"kafka: no local Kafka recorded in {directory}; nothing to stop")
            return False
        _stop_locked(directory, state, grace, progress)
        return True


def _stop_locked(directory: Path, state: ClusterState, grace: float, progress: Progress) -> None:
    """Stop `state`'s nodes (the caller holds the lock) and remove the state file."""
    started = time.monotonic()
    for node in state.nodes:
        if node.container_id:
            docker.remove_container(node.container_id)
    process.terminate([node for node in state.nodes if not node.container_id], grace)
    remove_state(directory)
    elapsed = time.monotonic() - started
    progress(f"kafka: stopped {len(state.nodes)} node(s) in {directory} in {elapsed:.1f}s")


def cluster_status(directory: Path) -> ClusterStatus | None:
    """The recorded cluster in `directory` and which of its nodes are alive; None if none."""
    directory = directory.resolve()
    state = load_state(directory)
    return None if state is None else _status_of(directory, state)


def _status_of(directory: Path, state: ClusterState) -> ClusterStatus:
    """The status of a recorded state."""
    return ClusterStatus(directory, state, {n.node_id: _node_alive(n) for n in state.nodes})


def _node_alive(node: NodeState) -> bool:
    """Whether a node (process or container) is alive."""
    if node.container_id:
        return docker.container_running(node.container_id)
    return process.is_alive(node)


def _require_processes(state: ClusterState, what: str) -> None:
    """Refuse node-level operations on the container backend."""
    if state.backend == "docker":
        raise MarshalError(f"cannot {what} on the docker backend; use --backend maven")


def _tail(node: NodeState) -> str:
    """The log tail of a node (nothing useful for a container)."""
    if node.container_id:
        return f"  (see `docker logs {node.container_id}`)"
    return process.log_tail(Path(node.node_dir))
