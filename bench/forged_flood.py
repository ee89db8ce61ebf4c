"""Benchmark: what a flood of forged claims of invented groups costs a member and `status`.

    .venv/bin/python bench/forged_flood.py [--claims 200000] [--groups 1000] [--old PATH]
                                           [--bootstrap-servers HOST:PORT]

A hostile (or careless) writer appends valid ClaimingPartition records for ``--groups``
invented groups, each on its home partition, to a fleet's coordination topic. The script
prints, before and after the flood: the resident memory of a running member's supervisor
(its children hold no coordination state), that of a member started after the flood (it folds
the whole log at start), their catch-up, and how long `marshal-admin status --group` takes.
Figures only, no assertion (these machines are noisy). Without --bootstrap-servers it starts
a local one-node Kafka in a temporary directory and stops it. ``--old PATH`` runs the same
scenario, on a topic of its own, with PATH first on PYTHONPATH (a checkout of an older commit,
e.g. ``git worktree add /tmp/old 12b0663``), and prints the two side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from marshal_workers.localkafka import StartOptions, start_cluster
from marshal_workers.log.topicadmin import ensure_coordination_topic
from marshal_workers.protocol.wire import coordination_partition

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]
COORDINATION_PARTITIONS = 4
DATA_PARTITIONS = 8


def mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 1e6


def start_member(
    bootstrap: str, names: dict[str, str], client: str, root: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    log = open(root / f"{client}.log", "ab")  # noqa: SIM115 (the member's, until it ends)
    return subprocess.Popen(
        [
            str(BIN / "marshal-run"), "--handler", "ledger", "--mode", "alo",
            "--topic", names["topic"], "--group", names["group"], "--client-id", client,
            "--bootstrap-servers", bootstrap, "--coordination-topic", names["coordination"],
            "--heartbeat-interval", "2", "--log-format", "json",
        ],
        stdout=log, stderr=log, start_new_session=True,
        env={**env, "MARSHAL_LEDGER_DIR": str(root / "ledger")},
    )  # fmt: skip


def wait_logged(root: Path, client: str, event: str, timeout: float = 300.0) -> dict[str, object]:
    """The first JSON log line of ``client`` with ``event`` (waiting for it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in (root / f"{client}.log").read_text(errors="replace").splitlines():
            if line.startswith("{") and f'"event": "{event}"' in line:
                found: dict[str, object] = json.loads(line)
                return found
        time.sleep(0.2)
    raise SystemExit(f"{client} logged no {event} within {timeout:.0f}s")


def status_seconds(
    bootstrap: str, names: dict[str, str], env: dict[str, str], runs: int = 3
) -> float:
    """The best of ``runs`` `marshal-admin status --group` wall times."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(
            [str(BIN / "marshal-admin"), "status", "--group", names["group"],
             "--bootstrap-servers", bootstrap, "--coordination-topic", names["coordination"],
             "--heartbeat-interval", "2"],
            capture_output=True, text=True, check=False, env=env,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"status failed: {done.stderr.strip()}")
        best = min(best, time.perf_counter() - start)
    return best


def flood(bootstrap: str, topic: str, claims: int, groups: int) -> float:
    """Append ``claims`` valid claims of ``groups`` invented groups; return the seconds."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000}
    )
    start = time.perf_counter()
    per_group = -(-claims // groups)
    for i in range(claims):
        group, part = f"forged{i % groups}", i // groups
        home = coordination_partition("ft", part, COORDINATION_PARTITIONS)
        value = f"ClaimingPartition/1/1/i/forger/{group}/ft/{part}".encode()
        producer.produce(
            topic, value=value, key=f"{group}/ft/{part}/claim".encode(), partition=home
        )
        producer.poll(0)
    assert producer.flush(60) == 0
    assert per_group > 0
    return time.perf_counter() - start


def run(bootstrap: str, claims: int, groups: int, path: str) -> dict[str, float]:
    """The scenario with the code at ``path`` (first on PYTHONPATH); its figures."""
    env = {**os.environ, "PYTHONPATH": path}
    uid = uuid.uuid4().hex[:8]
    names = {"coordination": f"__marshal_flood_{uid}", "topic": f"flood_{uid}", "group": f"g_{uid}"}
    ensure_coordination_topic(bootstrap, names["coordination"], COORDINATION_PARTITIONS)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(names["topic"], DATA_PARTITIONS, -1)])[names["topic"]].result(30)
    root = Path(tempfile.mkdtemp(prefix="marshal-flood-"))
    members: list[subprocess.Popen[bytes]] = []
    try:
        members.append(start_member(bootstrap, names, "a", root, env))
        wait_logged(root, "a", "supervisor_started")
        time.sleep(8)  # claims won, children started, steady
        out = {"a_before_mb": mb(members[0].pid)}
        out["status_before_s"] = status_seconds(bootstrap, names, env)
        out["flood_s"] = flood(bootstrap, names["coordination"], claims, groups)
        time.sleep(10)  # the running member folds them
        out["a_after_mb"] = mb(members[0].pid)
        members.append(start_member(bootstrap, names, "b", root, env))
        started = time.monotonic()
        wait_logged(root, "b", "caught_up")
        out["b_start_s"] = time.monotonic() - started
        time.sleep(8)
        out["b_mb"] = mb(members[1].pid)
        out["status_after_s"] = status_seconds(bootstrap, names, env)
        out["running"] = float(all(m.poll() is None for m in members))
        return out
    finally:
        for m in members:
            if m.poll() is None:
                os.killpg(m.pid, 15)
                m.wait(30)
        shutil.rmtree(root, ignore_errors=True)


ROWS = (
    ("a_before_mb", "member a (running), supervisor RSS before the flood, MB"),
    ("a_after_mb", "member a (running), supervisor RSS after the flood, MB"),
    ("b_mb", "member b (started after the flood), supervisor RSS, MB"),
    ("b_start_s", "member b, launch to caught up, s"),
    ("status_before_s", "marshal-admin status --group before the flood, s (best of 3)"),
    ("status_after_s", "marshal-admin status --group after the flood, s (best of 3)"),
    ("flood_s", "the flood written in, s"),
    ("running", "members still running (1 = all)"),
)


def report(results: dict[str, dict[str, float]], claims: int, groups: int) -> None:
    """The figures side by side, with the ratio old/new where both ran."""
    print(f"\n{claims} forged claims of {groups} invented groups on a fleet's topic")
    names = list(results)
    print(
        f"{'':64}" + "".join(f"{n:>10}" for n in names) + ("  old/new" if len(names) == 2 else "")
    )
    for key, label in ROWS:
        values = [results[n][key] for n in names]
        ratio = f"  {values[1] / values[0]:.2f}x" if len(values) == 2 and values[0] else ""
        print(f"{label:64}" + "".join(f"{v:>10.2f}" for v in values) + ratio)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--claims", type=int, default=200_000)
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--old", help="a checkout of an older commit to compare with")
    args = parser.parse_args()
    impls = {"new": str(REPO)}
    if args.old:
        impls["old"] = str(Path(args.old).resolve())
    with tempfile.TemporaryDirectory(prefix="marshal-bench-") as tmp:
        cluster = None
        bootstrap = args.bootstrap_servers
        if bootstrap is None:
            cluster = start_cluster(StartOptions(directory=Path(tmp), nodes=1))
            bootstrap = cluster.bootstrap
        try:
            results = {}
            for name, path in impls.items():
                results[name] = run(bootstrap, args.claims, args.groups, path)
                print(f"{name} ({path}): {results[name]}", flush=True)
        finally:
            if cluster is not None:
                cluster.stop()
    report(results, args.claims, args.groups)


if __name__ == "__main__":
    main()
