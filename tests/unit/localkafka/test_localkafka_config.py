"""Unit tests of the pure parts of marshal_workers.localkafka (no broker, no JVM)."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from marshal_workers.common.errors import ConfigError, MarshalError
from marshal_workers.localkafka import cluster_status, stop_cluster
from marshal_workers.localkafka import process as node_process
from marshal_workers.localkafka.backend import choose_backend
from marshal_workers.localkafka.cli import kafka
from marshal_workers.localkafka.config import (
    check_node_count,
    jvm_flags,
    new_cluster_id,
    pick_free_ports,
    plan_nodes,
    render_properties,
    server_properties,
)
from marshal_workers.localkafka.docker import start_container
from marshal_workers.localkafka.jars import (
    BROKER_JAR,
    MVN_PURPOSE,
    is_resolved,
    kafka_home_classpath,
    pom_digest,
    resolve_jars,
)
from marshal_workers.localkafka.maven import MARKER, find_java, find_mvn, resolve_cached
from marshal_workers.localkafka.paths import default_cache_dir, default_cluster_dir, pom_text
from marshal_workers.localkafka.probe import wait_until_ready
from marshal_workers.localkafka.state import (
    ClusterState,
    NodeState,
    load_state,
    save_state,
    state_path,
)


def _props(nodes: int, node_id: int = 1) -> dict[str, str]:
    specs = plan_nodes(nodes, list(range(20000, 20000 + 2 * nodes)))
    return server_properties(specs[node_id - 1], specs, Path("/data"))


def _node(pid: int = 1, node_dir: str = "/nowhere/node-1") -> NodeState:
    return NodeState(1, pid, 20000, 20001, node_dir, ("java", "kafka.Kafka"))


# --- server properties -------------------------------------------------------------------


def test_single_node_properties_use_replication_factor_one() -> None:
    """One node: combined roles, RF 1 everywhere, and itself as the only voter."""
    props = _props(1)
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:20001"
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "default.replication.factor",
        "min.insync.replicas",
    ):
        assert props[key] == "1", key


def test_three_node_properties_replicate_three_ways_with_min_isr_two() -> None:
    """Three nodes: RF 3, min ISR 2, and all three listed as voters."""
    props = _props(3, node_id=2)
    assert props["node.id"] == "2"
    assert props["default.replication.factor"] == "3"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert props["transaction.state.log.min.isr"] == "2"
    voters = props["controller.quorum.voters"]
    assert voters == "1@127.0.0.1:20001,2@127.0.0.1:20003,3@127.0.0.1:20005"


def test_properties_suit_tests() -> None:
    """No auto-created topics, one partition by default, no initial rebalance delay."""
    props = _props(1)
    assert props["auto.create.topics.enable"] == "false"
    assert props["num.partitions"] == "1"
    assert props["group.initial.rebalance.delay.ms"] == "0"


def test_share_groups_are_formatted_on_and_may_lock_briefly() -> None:
    """Storage is formatted with share.version=1, and a share group may ask for 1 s locks."""
    assert node_process.SHARE_FEATURE == "share.version=1"
    props = _props(1)
    assert props["group.share.min.record.lock.duration.ms"] == "1000"
    assert props["share.coordinator.state.topic.num.partitions"] == "5"


def test_listeners_are_loopback_only() -> None:
    """Every listener and advertised listener binds 127.0.0.1."""
    props = _props(3, node_id=3)
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:20004,CONTROLLER://127.0.0.1:20005"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:20004"


def test_render_properties_writes_one_escaped_line_per_key() -> None:
    """Rendering gives key=value lines with backslashes and newlines escaped."""
    text = render_properties({"a": "1", "b": "x\\y", "c": "p\nq"})
    assert text.splitlines()[1:] == ["a=1", "b=x\\\\y", "c=p\\nq"]


def test_jvm_flags_shrink_the_heap_for_three_nodes_and_env_comes_last() -> None:
    """Three nodes get a smaller heap; $MARSHAL_KAFKA_JVM_OPTS flags are appended."""
    assert "-Xmx512m" in jvm_flags(1, {}, "OPTS")
    flags = jvm_flags(3, {"OPTS": "-XX:TieredStopAtLevel=4 -Dx=1"}, "OPTS")
    assert "-Xmx320m" in flags
    assert flags[-2:] == ["-XX:TieredStopAtLevel=4", "-Dx=1"]


# --- ports, node plans, cluster ids ------------------------------------------------------


def test_pick_free_ports_gives_distinct_bindable_ports() -> None:
    """Picked ports are distinct and can be bound on 127.0.0.1 right away."""
    ports = pick_free_ports(6)
    assert len(set(ports)) == 6
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_plan_nodes_numbers_nodes_from_one() -> None:
    """Nodes are 1..n, each with a broker then a controller port."""
    specs = plan_nodes(3, [1, 2, 3, 4, 5, 6])
    assert [(s.node_id, s.broker_port, s.controller_port) for s in specs] == [
        (1, 1, 2),
        (2, 3, 4),
        (3, 5, 6),
    ]
    assert specs[1].bootstrap == "127.0.0.1:3"


@pytest.mark.parametrize("nodes", [0, 2, 4])
def test_other_cluster_sizes_are_refused(nodes: int) -> None:
    """Only 1 or 3 nodes are supported; anything else is a ConfigError (exit 2)."""
    with pytest.raises(ConfigError, match="1 or 3 nodes"):
        check_node_count(nodes)


def test_cluster_id_is_a_kafka_uuid() -> None:
    """A cluster id is 16 random bytes in unpadded URL-safe base64, not starting with '-'."""
    for _ in range(50):
        cid = new_cluster_id()
        assert len(cid) == 22 and not cid.startswith("-")
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


# --- backend choice ------------------------------------------------------------------------


def _no_docker() -> bool:
    return False


def _docker() -> bool:
    return True


def test_kafka_home_wins_in_auto() -> None:
    """With KAFKA_HOME set, auto uses that distribution without probing Docker."""
    choice = choose_backend(None, {"KAFKA_HOME": "/opt/kafka"}, engine_answers=_docker)
    assert choice.name == "kafka-home"


def test_a_docker_engine_with_testcontainers_picks_docker() -> None:
    """No KAFKA_HOME, an engine answers, testcontainers importable: docker."""
    choice = choose_backend(None, {}, engine_answers=_docker, has_testcontainers=_docker)
    assert choice.name == "docker"


def test_a_docker_engine_without_testcontainers_falls_back_to_maven_and_says_so() -> None:
    """Without testcontainers, auto says so in its one reason line and uses Maven."""
    choice = choose_backend(None, {}, engine_answers=_docker, has_testcontainers=_no_docker)
    assert choice.name == "maven"
    assert "testcontainers is not installed" in choice.reason
    assert "\n" not in choice.reason


def test_no_kafka_home_and_no_docker_picks_maven() -> None:
    """No KAFKA_HOME and no Docker engine: maven."""
    assert choose_backend(None, {}, engine_answers=_no_docker).name == "maven"


def test_three_nodes_never_use_docker_in_auto() -> None:
    """The docker backend runs one node, so auto does not even probe for three."""

    def probe() -> bool:
        raise AssertionError("probed")

    assert choose_backend(None, {}, nodes=3, engine_answers=probe).name == "maven"


def test_env_and_option_override_auto() -> None:
    """$MARSHAL_KAFKA_BACKEND overrides auto, and --backend overrides the env."""
    env = {"MARSHAL_KAFKA_BACKEND": "maven", "KAFKA_HOME": "/opt/kafka"}
    assert choose_backend(None, env, engine_answers=_docker).name == "maven"
    assert choose_backend("kafka-home", env).name == "kafka-home"


@pytest.mark.parametrize(
    ("requested", "env", "nodes", "message"),
    [
        ("zookeeper", {}, 1, "unknown kafka backend"),
        ("kafka-home", {}, 1, "needs KAFKA_HOME"),
        ("docker", {}, 3, "runs 1 node"),
    ],
)
def test_impossible_backend_requests_are_config_errors(
    requested: str, env: dict[str, str], nodes: int, message: str
) -> None:
    """An unknown backend, kafka-home without KAFKA_HOME, docker with 3 nodes: ConfigError."""
    with pytest.raises(ConfigError, match=message):
        choose_backend(requested, env, nodes=nodes, engine_answers=_no_docker)


# --- java, mvn and the jar cache -----------------------------------------------------------


def test_missing_java_is_one_line_saying_what_to_install(tmp_path: Path) -> None:
    """No JAVA_HOME and no java on PATH: a one-line MarshalError naming a Java runtime."""
    with pytest.raises(MarshalError) as info:
        find_java({"PATH": str(tmp_path)})
    message = str(info.value)
    assert "\n" not in message
    assert "java not found" in message and "install a Java 17+ runtime" in message


def test_java_home_is_preferred_over_path(tmp_path: Path) -> None:
    """$JAVA_HOME/bin/java is used when it is executable."""
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    assert find_java({"JAVA_HOME": str(tmp_path), "PATH": ""}) == str(java)


def test_missing_mvn_is_one_line_saying_what_to_install(tmp_path: Path) -> None:
    """No mvn on PATH: a one-line MarshalError naming Maven (and KAFKA_HOME as the other way)."""
    with pytest.raises(MarshalError, match=r"mvn not found.*install Maven.*KAFKA_HOME") as info:
        find_mvn(MVN_PURPOSE, {"PATH": str(tmp_path)})
    assert "\n" not in str(info.value)


def test_cli_start_without_java_ends_with_one_error_line(tmp_path: Path) -> None:
    """`start` with no java on PATH exits 1 and its last stderr line is the error, no traceback."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "KAFKA_HOME")}
    env.update(PATH=str(tmp_path / "empty-bin"), MARSHAL_KAFKA_BACKEND="maven")
    done = subprocess.run(
        [sys.executable, "-m", "marshal_workers.localkafka", "start", "--dir", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "error: java not found" in done.stderr.strip().splitlines()[-1]
    assert "bootstrap.servers" not in done.stdout


def _fake_cache(cache: Path, digest: str) -> None:
    (cache / "libs").mkdir(parents=True)
    (cache / "libs" / BROKER_JAR).write_bytes(b"")
    (cache / MARKER).write_text(digest + "\n")


def test_a_complete_cache_is_reused_without_maven(tmp_path: Path) -> None:
    """A cache with the current pom's marker is used as is, even with no java or mvn."""
    _fake_cache(tmp_path, pom_digest())
    assert is_resolved(tmp_path)
    assert resolve_jars(tmp_path, {"PATH": ""}) == tmp_path / "libs"


def test_a_stale_or_partial_cache_is_not_complete(tmp_path: Path) -> None:
    """A marker for another pom, or no marker at all, means resolve again."""
    _fake_cache(tmp_path / "stale", "0" * 64)
    assert not is_resolved(tmp_path / "stale")
    (tmp_path / "partial" / "libs").mkdir(parents=True)
    assert not is_resolved(tmp_path / "partial")


def test_resolve_cached_installs_libs_then_the_marker_and_sweeps_leftovers(
    tmp_path: Path,
) -> None:
    """Maven runs once into a fresh work-* dir (old ones swept), its libs/ become the cache's
    and the marker holds the digest; a complete cache is not resolved again."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("java", "mvn"):
        (bin_dir / tool).write_text("#!/bin/sh\n")
        (bin_dir / tool).chmod(0o755)
    cache = tmp_path / "cache"
    (cache / "work-killed").mkdir(parents=True)
    runs: list[Path] = []
    lines: list[str] = []

    def run_maven(mvn: str, work: Path) -> None:
        assert mvn == str(bin_dir / "mvn") and work.parent == cache
        assert not (cache / "work-killed").exists()
        runs.append(work)
        (work / "libs").mkdir()
        (work / "libs" / "a.jar").write_bytes(b"")

    def resolve() -> None:
        resolve_cached(
            cache,
            is_complete=(cache / MARKER).is_file,
            run_maven=run_maven,
            digest="d1",
            what="the test jars",
            mvn_purpose="test",
            env={"PATH": str(bin_dir)},
            progress=lines.append,
        )

    resolve()
    resolve()
    assert len(runs) == 1 and not runs[0].exists()
    assert (cache / "libs" / "a.jar").is_file()
    assert (cache / MARKER).read_text() == "d1\n"
    assert lines[0] == f"resolving the test jars with Maven into {cache}"
    assert lines[1].startswith("resolved the test jars in ")


def test_the_pom_pins_kafka_4_2_2() -> None:
    """The packaged pom asks for kafka_2.13 4.2.2 and a log4j2 slf4j binding."""
    pom = pom_text()
    assert "<artifactId>kafka_2.13</artifactId>" in pom
    assert "<kafka.version>4.2.2</kafka.version>" in pom
    assert "log4j-slf4j-impl" in pom


def test_kafka_home_without_jars_is_refused(tmp_path: Path) -> None:
    """A KAFKA_HOME that is not a Kafka distribution gives a one-line error."""
    with pytest.raises(MarshalError, match="has no libs/kafka_"):
        kafka_home_classpath(tmp_path)
    (tmp_path / "libs").mkdir()
    (tmp_path / "libs" / "kafka_2.13-4.2.2.jar").write_bytes(b"")
    assert kafka_home_classpath(tmp_path) == f"{tmp_path / 'libs'}/*"


def test_cache_and_cluster_dirs_follow_the_environment() -> None:
    """Env vars choose the jar cache and cluster dir before the XDG/home defaults."""
    assert default_cache_dir({"MARSHAL_KAFKA_CACHE": "/c", "XDG_CACHE_HOME": "/x"}) == Path("/c")
    xdg = default_cache_dir({"XDG_CACHE_HOME": "/x"})
    assert xdg == Path("/x/marshal-workers/kafka-4.2.2")
    home = default_cache_dir({"HOME": "/h"})
    assert home == Path("/h/.cache/marshal-workers/kafka-4.2.2")
    assert default_cluster_dir({"MARSHAL_KAFKA_DIR": "/k"}) == Path("/k")
    assert default_cluster_dir({}) == Path(".marshal/kafka")


# --- state file, liveness, stop/status without a cluster -----------------------------------


def test_state_round_trips_through_json(tmp_path: Path) -> None:
    """What save_state writes, load_state reads back equal."""
    state = ClusterState("maven", "127.0.0.1:20000", "cid", (_node(),), 12.5)
    save_state(tmp_path, state)
    assert load_state(tmp_path) == state
    assert state.to_json()["nodes"][0]["bootstrap"] == "127.0.0.1:20000"


def test_a_corrupt_state_file_is_one_clear_error(tmp_path: Path) -> None:
    """An unreadable state file raises a MarshalError naming it."""
    state_path(tmp_path).write_text("{not json")
    with pytest.raises(MarshalError, match="unreadable local Kafka state"):
        load_state(tmp_path)


def test_unknown_node_id_is_refused() -> None:
    """Asking a state for a node it does not have is a MarshalError listing the ids."""
    state = ClusterState("maven", "b", "cid", (_node(),))
    with pytest.raises(MarshalError, match=r"no node 7 .*nodes: 1"):
        state.node(7)


def test_a_pid_running_something_else_is_not_a_live_node() -> None:
    """A live pid whose command line does not name the node's properties is not the node."""
    assert not node_process.is_alive(_node(pid=os.getpid()))


def test_a_dead_pid_is_not_a_live_node() -> None:
    """A pid that has exited is not alive."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert not node_process.is_alive(_node(pid=proc.pid))


def test_stop_and_status_with_nothing_recorded(tmp_path: Path) -> None:
    """stop is a no-op (False) and status is None when no cluster was started; no dir is made."""
    where = tmp_path / "never"
    assert stop_cluster(where) is False
    assert cluster_status(where) is None
    assert not where.exists()


def test_cli_status_and_stop_exit_1_when_nothing_runs(tmp_path: Path) -> None:
    """`status` says not running with exit 1; `stop` stops nothing: exit 1, naming where it
    looked (a stop that silently did nothing left a cluster running, started elsewhere)."""
    runner = CliRunner()
    status = runner.invoke(kafka, ["status", "--dir", str(tmp_path)])
    assert status.exit_code == 1 and "not running" in status.output
    as_json = runner.invoke(kafka, ["status", "--dir", str(tmp_path), "--json"])
    assert as_json.exit_code == 1 and '"running": false' in as_json.output
    stop = runner.invoke(kafka, ["stop", "--dir", str(tmp_path)])
    assert stop.exit_code == 1 and str(tmp_path.resolve()) in str(stop.exception)


def test_log_tail_of_a_node_without_logs() -> None:
    """A node directory with no logs yields a placeholder, not an exception."""
    assert node_process.log_tail(Path("/nonexistent-node-dir")) == "  (no log output)"


def test_readiness_wait_stops_as_soon_as_check_raises() -> None:
    """The liveness check runs first, so a dead node aborts the wait at once."""

    def dead() -> None:
        raise MarshalError("node 1 died")

    with pytest.raises(MarshalError, match="node 1 died"):
        wait_until_ready({1: "127.0.0.1:1"}, expected_brokers=1, timeout=30.0, check=dead)


def test_the_docker_backend_without_an_engine_fails_with_one_line() -> None:
    """With no Docker engine answering, the docker backend refuses in one line."""
    with pytest.raises(MarshalError, match="needs a running Docker engine") as info:
        start_container(29092, env={"PATH": ""})
    assert "\n" not in str(info.value)
