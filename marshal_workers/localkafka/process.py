"""Node processes: formatting storage, launching ``kafka.Kafka``, liveness, signals, log tails.

Each node is `java ... -cp LIBS/* kafka.Kafka server.properties` started in its own
session, so its pid is also its process group and a signal to the group reaches anything
it spawned. A pid from the state file is trusted only while the process is not a zombie
and its command line still names the node's properties file (pids get reused).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import psutil

from marshal_workers.common.errors import MarshalError
from marshal_workers.localkafka.state import NodeState

BROKER_MAIN = "kafka.Kafka"
STORAGE_TOOL_MAIN = "kafka.tools.StorageTool"
FORMAT_TIMEOUT_S = 120.0
STDOUT_LOG = "stdout.log"
SERVER_LOG = "server.log"
PROPERTIES = "server.properties"
LOG4J2 = "log4j2.properties"
KILL_WAIT_S = 10.0
WAIT_POLL_S = 0.02
TOOL_FLAGS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")
SHARE_FEATURE = "share.version=1"
"""The feature level that turns share groups (KIP-932) on, given to `format` explicitly: Kafka
4.2 formats it by default, but a cluster without it refuses every share consumer."""


def node_argv(java: str, classpath: str, flags: Iterable[str], node_dir: Path) -> list[str]:
    """The command line that runs the node whose files are in `node_dir`."""
    return [
        java,
        *flags,
        f"-Dlog4j2.configurationFile={node_dir / LOG4J2}",
        f"-Dkafka.logs.dir={node_dir}",
        "-cp",
        classpath,
        BROKER_MAIN,
        str(node_dir / PROPERTIES),
    ]


def format_storage(
    java: str,
    classpath: str,
    cluster_id: str,
    node_dirs: Mapping[int, Path],
    env: Mapping[str, str],
    extra: Iterable[str] = (),
) -> None:
    """Run the KRaft StorageTool `format` for every node (in parallel); one line on failure.
    ``extra`` arguments go to every node's format (a secured cluster's ``--add-scram``)."""
    running: dict[int, subprocess.Popen[bytes]] = {}
    try:
        for node_id, node_dir in node_dirs.items():
            argv = [
                java, *TOOL_FLAGS, f"-Dlog4j2.configurationFile={node_dir / LOG4J2}",
                "-cp", classpath, STORAGE_TOOL_MAIN,
                "format", "-t", cluster_id, "-c", str(node_dir / PROPERTIES),
                "--feature", SHARE_FEATURE, *extra,
            ]  # fmt: skip
            with (node_dir / "format.log").open("wb") as log:
                running[node_id] = subprocess.Popen(
                    argv, cwd=node_dir, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, env=dict(env),
                )  # fmt: skip
        for node_id, proc in running.items():
            try:
                code = proc.wait(timeout=FORMAT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                code = -1
            if code != 0:
                log_path = node_dirs[node_id] / "format.log"
                last = _telling_line(log_path)
                raise MarshalError(
                    f"formatting the storage of kafka node {node_id} failed (exit {code}): "
                    f"{last} (see {log_path})"
                )
    finally:
        for proc in running.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def launch(argv: list[str], node_dir: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Start a node process in its own session, its output appended to `stdout.log`."""
    with (node_dir / STDOUT_LOG).open("ab") as out:
        return subprocess.Popen(
            argv, cwd=node_dir, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env=dict(env), start_new_session=True, close_fds=True,
        )  # fmt: skip


def is_alive(node: NodeState) -> bool:
    """Whether the node's pid is a live (non-zombie) process still running this node."""
    try:
        proc = psutil.Process(node.pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            _reap(node.pid)
            return False
        cmdline = proc.cmdline()
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True
    return str(Path(node.node_dir) / PROPERTIES) in cmdline


def terminate(nodes: Iterable[NodeState], grace: float) -> None:
    """SIGTERM each live node's process group, wait up to `grace` seconds, then SIGKILL."""
    live = [node for node in nodes if is_alive(node)]
    still = wait_gone(_signal_groups(live, signal.SIGTERM), grace)
    if still:
        leftover = [node for node in live if node.pid in {p.pid for p in still}]
        wait_gone(_signal_groups(leftover, signal.SIGKILL), KILL_WAIT_S)


def kill(node: NodeState) -> None:
    """SIGKILL the node's process group (kill -9) and wait for it to be gone."""
    if is_alive(node):
        wait_gone(_signal_groups([node], signal.SIGKILL), KILL_WAIT_S)


def wait_gone(procs: Iterable[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to `timeout` s until `procs` have exited; those still running.

    A zombie counts as gone: a node whose parent is not us (started by an earlier
    command) is reaped by init, which can take a second after the JVM has exited.
    """
    deadline = time.monotonic() + timeout
    running = list(procs)
    while True:
        running = [proc for proc in running if _running(proc)]
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(WAIT_POLL_S)


def _running(proc: psutil.Process) -> bool:
    """Whether `proc` (the same process, not a reused pid) runs and is not a zombie."""
    try:
        if not proc.is_running():
            return False
        if proc.status() == psutil.STATUS_ZOMBIE:
            _reap(proc.pid)
            return False
    except psutil.NoSuchProcess:
        return False
    return True


def _signal_groups(nodes: Iterable[NodeState], sig: signal.Signals) -> list[psutil.Process]:
    """Send `sig` to each node's process group; the processes signalled, to wait on."""
    procs: list[psutil.Process] = []
    for node in nodes:
        try:
            procs.append(psutil.Process(node.pid))
            os.killpg(node.pid, sig)
        except (psutil.NoSuchProcess, ProcessLookupError):
            continue
        except PermissionError as exc:
            raise MarshalError(f"not allowed to signal kafka node {node.node_id}: {exc}") from exc
    return procs


def _reap(pid: int) -> None:
    """Collect the exit status of `pid` if it is our child (so it stops being a zombie)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


_LEADER_LINE = re.compile(r"Completed transition to Leader\(.*?ReplicaKey\(id=(\d+),.*?epoch=(\d+)")


def quorum_leader(node_dirs: Iterable[Path]) -> int | None:
    """The node id that leads the KRaft controller quorum, read from the nodes' server logs:
    the newest epoch any node became leader in (None if no log says). A node logs each of its
    own transitions to leader; epochs only grow, so the largest names the current leader
    unless it died after (the caller knows which nodes are alive)."""
    best: tuple[int, int] | None = None
    for node_dir in node_dirs:
        try:
            text = (node_dir / SERVER_LOG).read_text("utf-8", "replace")
        except OSError:
            continue
        for match in _LEADER_LINE.finditer(text):
            epoch, node_id = int(match.group(2)), int(match.group(1))
            if best is None or epoch > best[0]:
                best = (epoch, node_id)
    return None if best is None else best[1]


def log_tail(node_dir: Path, lines: int = 20) -> str:
    """The last lines of a node's output and server log, indented, for an error message."""
    parts: list[str] = []
    for name, count in ((STDOUT_LOG, 8), (SERVER_LOG, lines)):
        path = node_dir / name
        try:
            text = path.read_text("utf-8", "replace").splitlines()[-count:]
        except OSError:
            continue
        if text:
            parts.append(f"  --- {path} ---")
            parts += [f"  {line}" for line in text]
    return "\n".join(parts) if parts else "  (no log output)"


def _telling_line(path: Path) -> str:
    """The line of a tool's output that says what went wrong: its first error, else its last."""
    try:
        lines = [ln.strip() for ln in path.read_text("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return "no output"
    errors = [ln for ln in lines if "Exception" in ln or "Error" in ln or "ERROR" in ln]
    chosen = errors[0] if errors else (lines[-1] if lines else "no output")
    return chosen[:300]
