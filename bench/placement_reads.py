"""Benchmark: what each member reads from the coordination topic, spread groups against placed.

    .venv/bin/python bench/placement_reads.py [--bootstrap-servers HOST:PORT] [--groups 20]
                                              [--members 2] [--partitions 2]
                                              [--coordination-partitions 20] [--seconds 60]
                                              [--hb 2]

Real `marshal-run` supervisors (ALO, `bench.handlers.count`; no record is produced, so only
the coordination runs) on one real broker, two runs side by side, each on a coordination topic
of its own with ``--coordination-partitions``:

- ``spread``: a version-1 topic (`marshal-admin init --spread-groups`): every group is spread
  over every partition, as before placement, and every member reads every partition;
- ``placed``: a version-2 topic (`marshal-admin init`): each new group is placed at its home
  with a window of one, and its members read that one partition.

In each run ``--groups`` groups of ``--members`` members (each group with a data topic of
``--partitions`` partitions) start together, run for ``--seconds`` after the last one has
claimed, and stop (SIGTERM); a member's figures cover its whole life (start, the creation
scan of a placed group's first member, settling, the run, its stop). Each member's supervisor
has librdkafka statistics on (``statistics.interval.ms`` in its ``[kafka]`` table) and logs at
its stop what its coordination log's consumer received from the broker: every byte
(``rx_bytes``: fetch responses, empty ones included, and the other requests' answers) and the
records' bytes (``rxmsg_bytes``). The
figures are per member, the mean and the largest, and per member per second of the whole run
(first start to last stop).

Prints figures; asserts nothing (these machines are noisy); exits 0. Without
``--bootstrap-servers`` it starts a local one-node Kafka in a temporary directory and stops it.
Every process it starts is stopped before it exits, whatever happens.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from marshal_workers.localkafka import StartOptions, start_cluster
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.kafkalog import KafkaLog
from marshal_workers.log.topicadmin import ensure_coordination_topic
from marshal_workers.protocol.members import is_live, is_member_key
from marshal_workers.protocol.rationalizer import RationalizerConfig

MARSHAL_RUN = Path(sys.executable).with_name("marshal-run")
HANDLER = "bench.handlers:count"  # no record is produced: never called
LAYOUTS = ("spread", "placed")


@dataclass(frozen=True, slots=True)
class Member:
    group: str
    client_id: str
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass(frozen=True, slots=True)
class Figures:
    layout: str
    members: int
    seconds: float
    received: list[int]  # per member: every byte its coordination consumer received
    records: list[int]  # per member: the records' bytes of it
    followed: list[int]  # per member: how many coordination partitions it followed


def start_member(bootstrap: str, coordination: str, group: str, topic: str, client: str,
                 hb: float, root: Path) -> Member:  # fmt: skip
    config = root / "stats.toml"
    if not config.exists():
        config.write_text('[kafka]\n"statistics.interval.ms" = "1000"\n')
    command = [
        str(MARSHAL_RUN), "--handler", HANDLER, "--mode", "alo", "--topic", topic,
        "--group", group, "--client-id", client, "--bootstrap-servers", bootstrap,
        "--coordination-topic", coordination, "--heartbeat-interval", str(hb),
        "--log-format", "json", "--config", str(config),
    ]  # fmt: skip
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")},
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        "XDG_RUNTIME_DIR": str(root / "run"),
    }
    log = root / f"{group}-{client}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=out, start_new_session=True)
    return Member(group, client, proc, log)


def last_line(path: Path, event: str) -> dict[str, object]:
    found: dict[str, object] = {}
    for line in path.read_text(errors="replace").splitlines():
        if f'"{event}"' in line:
            found = json.loads(line)
    return found


def run_layout(bootstrap: str, root: Path, layout: str, args: argparse.Namespace) -> Figures:
    uid = uuid.uuid4().hex[:6]
    coordination = f"__marshal_{layout}_{uid}"
    ensure_coordination_topic(
        bootstrap, coordination, args.coordination_partitions, placed=layout == "placed"
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    groups = [f"g{i}_{uid}" for i in range(args.groups)]
    topics = {g: f"data_{g}" for g in groups}
    futures = admin.create_topics([NewTopic(t, args.partitions, 1) for t in topics.values()])
    for future in futures.values():
        future.result(60)
    members: list[Member] = []
    began = time.monotonic()
    try:
        print(f"  {layout}: starting {args.groups} groups x {args.members} members", flush=True)
        for g in groups:
            for m in range(args.members):
                members.append(
                    start_member(bootstrap, coordination, g, topics[g], f"m{m}", args.hb, root)
                )
        wait_settled(bootstrap, coordination, groups, args)
        print(f"  {layout}: every group settled; running {args.seconds:g} s", flush=True)
        time.sleep(args.seconds)
    finally:
        for member in members:
            if member.proc.poll() is None:
                member.proc.send_signal(signal.SIGTERM)
        for member in members:
            try:
                member.proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(member.proc.pid, signal.SIGKILL)
                member.proc.wait(10)
    seconds = time.monotonic() - began
    received, records, followed = [], [], []
    for member in members:
        stopped = last_line(member.log, "supervisor_stopped")
        located = last_line(member.log, "group_located")
        received.append(int(str(stopped.get("coordination_bytes", 0))))
        records.append(int(str(stopped.get("coordination_record_bytes", 0))))
        followed.append(len(located.get("followed", []) or []))  # type: ignore[arg-type]
    return Figures(layout, len(members), seconds, received, records, followed)


def wait_settled(bootstrap: str, coordination: str, groups: list[str],
                 args: argparse.Namespace, timeout_s: float = 600) -> None:  # fmt: skip
    """Until every group's data partitions are held and every member is live."""
    log = KafkaLog(bootstrap, coordination, client_id="bench-placement")
    reader = FoldedLog(log, RationalizerConfig(int(args.hb * 1000), log.num_partitions))
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            reader.poll(0.5)
            now, hb_ms = int(time.time() * 1000), int(args.hb * 1000)
            held: dict[str, int] = {g: 0 for g in groups}
            live: dict[str, int] = {g: 0 for g in groups}
            for world in reader.worlds.values():
                for key, state in world.claims.items():
                    if key.group not in held or not is_live(state, now, hb_ms):
                        continue
                    if is_member_key(key):
                        live[key.group] += 1
                    elif state.holder_client is not None:
                        held[key.group] += 1
            if all(held[g] == args.partitions and live[g] == args.members for g in groups):
                return
        raise SystemExit(f"the groups did not settle within {timeout_s:.0f}s")
    finally:
        log.close()


def report(figures: list[Figures]) -> None:
    print(
        "\nbytes each member's coordination consumer received from the broker "
        "(librdkafka statistics; mean over members, largest in brackets)"
    )
    head = f"  {'layout':<8} {'members':>7} {'followed':>8} {'seconds':>7} "
    print(head + f"{'bytes':>22} {'record bytes':>22} {'bytes/s':>9} {'record bytes/s':>14}")
    for f in figures:
        mean_rx, mean_msg = statistics.mean(f.received), statistics.mean(f.records)
        print(
            f"  {f.layout:<8} {f.members:>7} {statistics.mean(f.followed):>8.1f} "
            f"{f.seconds:>7.0f} {mean_rx:>12,.0f} [{max(f.received):>8,}] "
            f"{mean_msg:>12,.0f} [{max(f.records):>8,}] {mean_rx / f.seconds:>9,.0f} "
            f"{mean_msg / f.seconds:>14,.0f}"
        )
    by = {f.layout: f for f in figures}
    if "spread" in by and "placed" in by:
        s, p = by["spread"], by["placed"]
        ratio = statistics.mean(s.received) / max(1, statistics.mean(p.received))
        ratio_records = statistics.mean(s.records) / max(1, statistics.mean(p.records))
        print(f"  spread / placed: bytes {ratio:.1f}x, record bytes {ratio_records:.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bootstrap-servers")
    ap.add_argument("--groups", type=int, default=20)
    ap.add_argument("--members", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=2, help="data partitions per group")
    ap.add_argument("--coordination-partitions", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--hb", type=float, default=2.0)
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    args = ap.parse_args()
    layouts = args.layouts.split(",")
    figures: list[Figures] = []
    with tempfile.TemporaryDirectory(prefix="marshal-bench-placement-") as tmp:
        root = Path(tmp)
        (root / "run").mkdir()

        def all_runs(bootstrap: str) -> None:
            for layout in layouts:
                figures.append(run_layout(bootstrap, root, layout, args))

        if args.bootstrap_servers:
            all_runs(args.bootstrap_servers)
        else:
            cluster = start_cluster(StartOptions(directory=root / "kafka", nodes=1))
            try:
                all_runs(cluster.bootstrap)
            finally:
                cluster.stop()
    report(figures)


if __name__ == "__main__":
    main()
