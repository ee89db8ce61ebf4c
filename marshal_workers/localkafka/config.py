"""Pure configuration of a local KRaft cluster: ports, node layout, properties, JVM flags.

Nothing here starts a process; `cluster` does, from what these functions render. Every
node runs in combined mode (`process.roles=broker,controller`) on 127.0.0.1 only, with a
static controller quorum (`controller.quorum.voters`) listing every node, so the same
`StorageTool format` call works for 1 and for 3 nodes and a killed node restarts from
its own data directory. Settings favour tests: small replication factors for 1 node,
RF 3 / min ISR 2 for 3 nodes, no auto-created topics, no initial rebalance delay, quick
detection of a dead broker, few threads and a small log-cleaner buffer to fit a small heap.

Share groups (KIP-932, production-ready from Kafka 4.2) are on: the storage is formatted with
the `share.version` feature at level 1 (`process.SHARE_FEATURE`; no broker property turns them
on in 4.2, `group.share.enable` is an internal switch of the preview). The share coordinator's
state topic gets few partitions, as the transaction log does, and a share group may ask for
record locks as short as one second (`share.record.lock.duration.ms`; the broker's floor is
15 s by default), so that benchmarks and tests of lock expiry need not wait long.
"""

from __future__ import annotations

import base64
import shlex
import socket
import uuid
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from marshal_workers.common.errors import ConfigError

VALID_NODE_COUNTS = (1, 3)
HOST = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node's identity and addresses: its id and its broker and controller ports."""

    node_id: int
    broker_port: int
    controller_port: int

    @property
    def bootstrap(self) -> str:
        """This node's own `host:port` for clients."""
        return f"{HOST}:{self.broker_port}"


def check_node_count(nodes: int) -> int:
    """Return `nodes` if it is a supported cluster size, else raise a ConfigError."""
    if nodes not in VALID_NODE_COUNTS:
        raise ConfigError(f"a local Kafka has 1 or 3 nodes, not {nodes}")
    return nodes


def pick_free_ports(count: int, host: str = HOST) -> list[int]:
    """`count` distinct ports free on `host` now, found by binding port 0 (all held at once)."""
    with ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def plan_nodes(nodes: int, ports: list[int] | None = None) -> list[NodeSpec]:
    """Node ids 1..n with a broker and a controller port each (picked free unless given)."""
    check_node_count(nodes)
    ports = pick_free_ports(2 * nodes) if ports is None else ports
    if len(ports) != 2 * nodes or len(set(ports)) != len(ports):
        raise ValueError(f"need {2 * nodes} distinct ports, got {ports}")
    return [NodeSpec(i + 1, ports[2 * i], ports[2 * i + 1]) for i in range(nodes)]


def bootstrap_of(specs: list[NodeSpec]) -> str:
    """The `bootstrap.servers` string naming every node."""
    return ",".join(spec.bootstrap for spec in specs)


def new_cluster_id() -> str:
    """A random Kafka cluster id: a UUID in unpadded URL-safe base64, not starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text


def server_properties(spec: NodeSpec, specs: list[NodeSpec], data_dir: Path) -> dict[str, str]:
    """The `server.properties` settings of node `spec` in the cluster of `specs`."""
    nodes = len(specs)
    replication = str(min(3, nodes))
    min_isr = str(min(2, nodes))
    voters = ",".join(f"{s.node_id}@{HOST}:{s.controller_port}" for s in specs)
    props = {
        "process.roles": "broker,controller",
        "node.id": str(spec.node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://{HOST}:{spec.broker_port},CONTROLLER://{HOST}:{spec.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{spec.broker_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "default.replication.factor": replication,
        "min.insync.replicas": min_isr,
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.replication.factor": replication,
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": "5",
        "share.coordinator.state.topic.replication.factor": replication,
        "share.coordinator.state.topic.min.isr": min_isr,
        "share.coordinator.state.topic.num.partitions": "5",
        "group.share.min.record.lock.duration.ms": "1000",
        "broker.heartbeat.interval.ms": "1000",
        "broker.session.timeout.ms": "6000",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "background.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        "log.retention.check.interval.ms": "60000",
    }
    return props


def render_properties(props: Mapping[str, str]) -> str:
    """A properties file for `props` (values escaped the way java.util.Properties reads them)."""
    lines = ["# written by marshal_workers.localkafka; rewritten on every start"]
    lines += [f"{key}={_escape(value)}" for key, value in props.items()]
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    """Escape the characters java.util.Properties treats specially in a value."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def log4j2_properties(log_file: Path) -> str:
    """A log4j2 configuration that writes a node's log to `log_file`."""
    return "\n".join(
        [
            "status = warn",
            "shutdownHook = disable",
            "appender.file.type = File",
            "appender.file.name = file",
            f"appender.file.fileName = {log_file}",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = [%d] %p %m (%c)%n",
            "rootLogger.level = info",
            "rootLogger.appenderRef.file.ref = file",
            "logger.kafka-request.name = kafka.request.logger",
            "logger.kafka-request.level = warn",
            "logger.state-change.name = state.change.logger",
            "logger.state-change.level = warn",
            "",
        ]
    )


def jvm_flags(nodes: int, env: Mapping[str, str], jvm_opts_env: str) -> list[str]:
    """JVM flags for one node: a small heap that fits `nodes` JVMs, a fast start.

    C1-only JIT (`TieredStopAtLevel=1`) starts a node about a second sooner (two with three
    nodes on two cores) at some cost in peak throughput; benchmarks can put
    `-XX:TieredStopAtLevel=4` in `$MARSHAL_KAFKA_JVM_OPTS`, whose flags come last and win.
    """
    heap = "512m" if nodes == 1 else "320m"
    flags = [
        f"-Xmx{heap}",
        "-Xms128m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Xshare:auto",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
    ]
    return flags + shlex.split(env.get(jvm_opts_env, ""))
