"""Render the Grafana dashboard's panels from a running demo, scraped by a real Prometheus.

    .venv/bin/python monitoring/render_dashboard.py [--out docs/dashboard.png] [--seconds 180]

What it does, on this machine only (loopback): starts a local one-node Kafka, writes orders to
an 8-partition topic at a steady rate, and runs three `marshal-run` ALO members (the ledger
handler) with `--metrics-port`; one partition holds a record the handler always fails on, so
it fails, is counted in the log and is parked. Debian's `prometheus` (the server) scrapes the
members every 2 s with monitoring/alerts.yml loaded. Along the way one member is killed with
SIGKILL (a failover) and started again, another is stopped with TERM and started again (a
graceful hand-over), and a second host runs the first member's client id for a while (the
first goes dormant, and claims again once the second is stopped). At the end it runs every
query of monitoring/grafana-dashboard.json against that Prometheus over the run's time
(`query_range`, the variables set to "all") and draws the panels with matplotlib where the
dashboard's grid puts them, with the alerts firing at the end listed under them.

Why not Grafana: Grafana is in no registry this project may use (Debian does not package it;
its Go module is AGPL, which the project does not take). The picture is therefore the
dashboard's own queries on real data, laid out as the dashboard lays them out, drawn by this
script; Grafana draws the same series with its own look. Prints what it did; exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DASHBOARD = ROOT / "monitoring" / "grafana-dashboard.json"
METRICS_PORTS = (19401, 19402, 19403, 19404)  # the fourth: a duplicate of c1 on another host
PROM_PORT = 19490
POISON_AT = 3000  # the offset the handler fails on: partition 3 is filled past it up front
GROUP, TOPIC, COORD = "demo.dashboard", "dashboard.orders", "__marshal_dashboard"


def sh(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


class Demo:
    """Kafka, a producer, three members and Prometheus, all under one temporary directory."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.others: list[subprocess.Popen[bytes]] = []
        self.stop_producing = threading.Event()
        self.kafka_dir = work / "kafka"
        out = sh(str(BIN / "marshal-admin"), "kafka", "start", "--dir", str(self.kafka_dir))
        self.bootstrap = out.strip().splitlines()[-1].split("=", 1)[1]
        where = ["--bootstrap-servers", self.bootstrap, "--coordination-topic", COORD]
        sh(str(BIN / "marshal-admin"), "init", "--partitions", "2", *where)
        sh(str(BIN / "marshal-admin"), "topic", "create", TOPIC, "--partitions", "8",
           "--bootstrap-servers", self.bootstrap)  # fmt: skip
        self.where = where

    def produce(self) -> None:
        from confluent_kafka import Producer  # noqa: PLC0415

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20})
        for i in range(POISON_AT + 50):  # partition 3 reaches the poison record at once
            producer.produce(TOPIC, f"o{i}".encode(), partition=3)
        producer.flush(30)

        def steady() -> None:
            n = 0
            while not self.stop_producing.is_set():
                for p in (0, 1, 2, 4, 5, 6, 7):
                    producer.produce(TOPIC, f"o{n}".encode(), partition=p)
                n += 1
                producer.poll(0)
                time.sleep(0.1)  # 10 records/s per partition: none reaches POISON_AT
            producer.flush(30)

        threading.Thread(target=steady, daemon=True).start()

    def start(self, client: str, duplicate: bool = False) -> None:
        """Start member ``client``; a ``duplicate`` runs as if on another host (its own run
        directory, the fourth metrics port) with the same client id."""
        port = METRICS_PORTS[3 if duplicate else int(client[-1]) - 1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")}
        env.update(MARSHAL_LEDGER_DIR=str(self.work / "ledger"),
                   MARSHAL_LEDGER_DELAY_MS="2", MARSHAL_LEDGER_FAIL_AT_OFFSET=str(POISON_AT),
                   XDG_RUNTIME_DIR=str(self.work / ("run2" if duplicate else "run")))  # fmt: skip
        name = f"{client}-duplicate" if duplicate else client
        log = open(self.work / f"{name}.log", "ab")  # noqa: SIM115
        self.procs[name] = subprocess.Popen(
            [str(BIN / "marshal-run"), "--handler", "ledger", "--mode", "alo", "--topic", TOPIC,
             "--group", GROUP, "--client-id", client, *self.where, "--heartbeat-interval", "2",
             "--metrics-port", str(port), "--retries", "1", "--retry-backoff", "0.2",
             "--max-handler-failures", "2", "--poison-park-after", "4", "--log-format", "json"],
            env=env, stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
        log.close()

    def prometheus(self) -> None:
        config = self.work / "prometheus.yml"
        shutil.copy(ROOT / "monitoring" / "alerts.yml", self.work / "alerts.yml")
        targets = ", ".join(f'"127.0.0.1:{p}"' for p in METRICS_PORTS)
        config.write_text(
            "global: {scrape_interval: 2s, evaluation_interval: 2s}\n"
            "rule_files: [alerts.yml]\n"
            "scrape_configs:\n"
            f"  - job_name: marshal-workers\n    static_configs: [{{targets: [{targets}]}}]\n"
        )
        log = open(self.work / "prometheus.log", "ab")  # noqa: SIM115
        self.others.append(subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={self.work / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{PROM_PORT}"],
            stdout=log, stderr=log, start_new_session=True,
        ))  # fmt: skip
        log.close()

    def close(self) -> None:
        self.stop_producing.set()
        for proc in [*self.procs.values(), *self.others]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in [*self.procs.values(), *self.others]:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        subprocess.run([str(BIN / "marshal-admin"), "kafka", "stop", "--dir",
                        str(self.kafka_dir)], capture_output=True, check=False)  # fmt: skip


def prom(path: str, **params: Any) -> Any:
    url = f"http://127.0.0.1:{PROM_PORT}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.load(answer)["data"]


def legend(template: str, labels: dict[str, str]) -> str:
    out = template
    for key, value in labels.items():
        out = out.replace("{{" + key + "}}", value)
    return " ".join(out.replace("{{slice}}", "").split()) or "value"


def render(out: Path, start: float, end: float, marks: list[tuple[float, str]]) -> list[str]:
    """Draw every panel of the dashboard; return the lines of what each query returned."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    board = json.loads(DASHBOARD.read_text())
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in board["panels"])
    fig = plt.figure(figsize=(16, rows * 0.42 + 1.2), facecolor="#181b1f")
    grid = fig.add_gridspec(rows, 24, hspace=3.0, wspace=2.0, top=0.94, bottom=0.07)
    report = []
    for panel in board["panels"]:
        g = panel["gridPos"]
        ax = fig.add_subplot(grid[g["y"] : g["y"] + g["h"] - 1, g["x"] : g["x"] + g["w"]])
        ax.set_facecolor("#111217")
        ax.set_title(panel["title"], color="#d8d9da", fontsize=10, loc="left")
        ax.tick_params(colors="#8e8e8e", labelsize=7)
        for spine in ax.spines.values():
            spine.set_color("#2c3235")
        ax.grid(color="#2c3235", linewidth=0.5)
        for target in panel["targets"]:
            expr = target["expr"].replace("$group", ".*")
            found = prom("query_range", query=expr, start=start, end=end, step=2)["result"]
            report.append(f"{panel['title']}: {len(found)} series for {expr}")
            for series in found[:12]:
                xs = [float(t) - start for t, _ in series["values"]]
                ys = [float(v) for _, v in series["values"]]
                name = legend(target["legendFormat"], series["metric"])
                ax.plot(xs, ys, linewidth=1.1, label=name)
        for at, what in marks:
            ax.axvline(at - start, color="#5a5a5a", linewidth=0.8, linestyle="--")
            if panel["id"] == 1:
                ax.text(at - start, ax.get_ylim()[1], f" {what}", color="#a0a0a0", fontsize=7,
                        va="top", rotation=90)  # fmt: skip
        if ax.lines:
            ax.legend(fontsize=6, loc="upper left", ncol=2, facecolor="#181b1f",
                      labelcolor="#d8d9da", edgecolor="#2c3235")  # fmt: skip
        ax.set_xlim(0, end - start)
        ax.set_xlabel("seconds into the demo", color="#8e8e8e", fontsize=7)
    firing = [a for a in prom("alerts")["alerts"] if a["state"] == "firing"]
    names = ", ".join(sorted({f"{a['labels']['alertname']}" for a in firing})) or "none"
    fig.suptitle(f"marshal-workers dashboard: group {GROUP}, 3 members, 8 partitions "
                 f"(alerts firing at the end: {names})", color="#d8d9da", fontsize=12)  # fmt: skip
    fig.savefig(out, dpi=90, facecolor=fig.get_facecolor())
    report.append(f"alerts firing at the end: {names}")
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    ap.add_argument("--seconds", type=float, default=180.0)
    ap.add_argument("--keep", type=Path, help="keep the logs, ledger and data in this directory")
    args = ap.parse_args()
    if shutil.which("prometheus") is None:
        raise SystemExit("needs Debian's prometheus: apt-get install -y prometheus")
    with tempfile.TemporaryDirectory(prefix="marshal-dashboard-") as tmp:
        work = Path(tmp) if args.keep is None else args.keep
        work.mkdir(parents=True, exist_ok=True)
        demo = Demo(work)
        marks: list[tuple[float, str]] = []
        try:
            demo.prometheus()
            demo.produce()
            start = time.time()
            for client in ("c1", "c2", "c3"):
                demo.start(client)
            span = args.seconds
            plan = [(0.35, "kill -9 c3", "kill"), (0.45, "c3 back", "c3"),
                    (0.65, "TERM c2", "term"), (0.72, "c2 back", "c2"),
                    (0.80, "c1 on a 2nd host", "duplicate"),
                    (0.90, "TERM 2nd c1", "term duplicate")]  # fmt: skip
            for share, what, action in plan:
                time.sleep(max(0.0, start + share * span - time.time()))
                marks.append((time.time(), what))
                print(f"{time.time() - start:6.1f}s  {what}", flush=True)
                if action == "kill":
                    os.killpg(demo.procs["c3"].pid, signal.SIGKILL)
                    demo.procs["c3"].wait()
                elif action == "term":
                    demo.procs["c2"].send_signal(signal.SIGTERM)
                    demo.procs["c2"].wait(60)
                elif action == "duplicate":
                    demo.start("c1", duplicate=True)  # the first c1 goes dormant
                elif action == "term duplicate":
                    demo.procs["c1-duplicate"].send_signal(signal.SIGTERM)
                    demo.procs["c1-duplicate"].wait(60)  # the first c1 claims again
                else:
                    demo.start(action)
            time.sleep(max(0.0, start + span - time.time()))
            end = time.time()
            for line in render(args.out, start, end, marks):
                print(line)
            print(f"wrote {args.out}")
        finally:
            demo.close()


if __name__ == "__main__":
    main()
