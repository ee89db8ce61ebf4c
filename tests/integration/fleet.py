"""A fleet of real `marshal-run` supervisors on a real broker, for end-to-end tests.

Each `Fleet` gets its own coordination topic, data topic and group, so tests share the session
broker without seeing each other. Members are real processes in their own sessions (signals
from the test reach only whom they are sent to); handlers write the ledger (plugins/ledger.py),
and the test reads the coordination log itself to see who holds what.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from marshal_workers.clients.rdkafka import RDKAFKA_LOG
from marshal_workers.common.ledgerfile import LedgerRow, read_ledger
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.kafkalog import KafkaLog
from marshal_workers.log.topicadmin import ensure_coordination_topic
from marshal_workers.protocol.members import is_live, is_member_key
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import RationalizerConfig, resume_offset

REPO = Path(__file__).resolve().parents[2]
MARSHAL_RUN = Path(sys.executable).with_name("marshal-run")
MARSHAL_ADMIN = Path(sys.executable).with_name("marshal-admin")
MARSHAL_AUDIT = Path(sys.executable).with_name("marshal-audit")
DEFAULT_ADMINS = frozenset({"marshal-admin"})  # what marshal-run and marshal-admin default to


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie whose frozen parent cannot reap it does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Member:
    """One `marshal-run` process."""

    def __init__(self, client_id: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
        self.client_id = client_id
        self.proc = proc
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the supervisor process only."""
        os.kill(self.proc.pid, sig)

    def children(self) -> list[int]:
        """Pids of the supervisor's partition workers now (its fork server's children)."""
        return partition_workers(self.proc.pid)

    def wait(self, timeout: float) -> int:
        """The exit code, waiting up to ``timeout``."""
        return self.proc.wait(timeout)

    def log_tail(self, lines: int = 15) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


class Fleet:
    """Supervisors, a data topic with a producer, the ledger, and a view of the claims."""

    def __init__(
        self,
        bootstrap: str,
        root: Path,
        *,
        mode: str = "alo",
        hb: float = 1.0,
        partitions: int = 8,
        coordination_partitions: int = 2,
        ledger_delay_ms: int = 1,
        admin_client_ids: frozenset[str] | None = DEFAULT_ADMINS,
        placed: bool = False,
        coordination: str | None = None,
        group: str | None = None,
    ) -> None:
        """``placed``: a new coordination topic places its new groups (a version-2 topic
        record); ``coordination``: share that existing coordination topic instead."""
        uid = uuid.uuid4().hex[:8]
        self.bootstrap, self.root, self.mode, self.hb = bootstrap, root, mode, hb
        self.coordination = coordination or f"__marshal_{uid}"
        self.topic, self.group = f"data_{uid}", group or f"g_{uid}"
        self.ledger_dir = root / "ledger"
        self.ledger_delay_ms = ledger_delay_ms
        self.partitions = partitions
        self.members: list[Member] = []
        ensure_coordination_topic(
            bootstrap, self.coordination, coordination_partitions, placed=placed
        )
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(self.topic, partitions, -1)])[self.topic].result(30)
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "logger": RDKAFKA_LOG}
        )
        self._sent = 0
        self._producing = threading.Event()
        self._thread: threading.Thread | None = None
        log = KafkaLog(bootstrap, self.coordination)
        self.reader = FoldedLog(
            log,
            RationalizerConfig(
                int(hb * 1000), log.num_partitions, admin_client_ids=admin_client_ids
            ),
        )

    # ---- data ------------------------------------------------------------------------------

    def produce(self, n: int, key: Callable[[int], bytes] | None = None) -> None:
        """Write ``n`` records, round robin over the partitions, and wait for them; record i
        (counted over the fleet's life) gets ``key(i)`` as its key if given."""
        for _ in range(n):
            self._producer.produce(
                self.topic,
                f"r{self._sent}".encode(),
                key=None if key is None else key(self._sent),
                partition=self._sent % self.partitions,
            )
            self._sent += 1
            self._producer.poll(0)
        assert self._producer.flush(30) == 0

    def produce_steadily(self, per_second: int = 400) -> None:
        """Keep producing in the background until `stop_producing`."""
        self._producing.set()

        def loop() -> None:
            while self._producing.is_set():
                self.produce(max(1, per_second // 20))
                time.sleep(0.05)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop_producing(self) -> None:
        self._producing.clear()
        if self._thread is not None:
            self._thread.join(10)

    def end_offsets(self) -> dict[int, int]:
        """Each data partition's high watermark."""
        c = Consumer(
            {"bootstrap.servers": self.bootstrap, "group.id": "fleet-probe", "logger": RDKAFKA_LOG}
        )
        try:
            return {
                p: c.get_watermark_offsets(TopicPartition(self.topic, p), 10)[1]
                for p in range(self.partitions)
            }
        finally:
            c.close()

    # ---- members ---------------------------------------------------------------------------

    def start(
        self,
        client_id: str,
        *args: str,
        env: dict[str, str] | None = None,
        handler: str = "ledger",  # the entry point the wheel installs
        cwd: Path | None = None,
        pythonpath: bool = True,
    ) -> Member:
        """Start a supervisor with the ledger handler (or ``handler``), in ``cwd`` (or the
        test's), with the checkout on PYTHONPATH unless ``pythonpath`` is false."""
        log_path = self.root / f"{client_id}-{len(self.members)}.log"
        command = [
            str(MARSHAL_RUN),
            "--handler",
            handler,
            "--mode",
            self.mode,
            "--topic",
            self.topic,
            "--group",
            self.group,
            "--client-id",
            client_id,
            "--bootstrap-servers",
            self.bootstrap,
            "--coordination-topic",
            self.coordination,
            "--heartbeat-interval",
            str(self.hb),
            "--batch-size",
            "50",
            "--log-format",
            "json",
            *args,
        ]
        environment = {
            **{k: v for k, v in os.environ.items() if pythonpath or k != "PYTHONPATH"},
            **({"PYTHONPATH": str(REPO)} if pythonpath else {}),
            "MARSHAL_LEDGER_DIR": str(self.ledger_dir),
            "MARSHAL_LEDGER_DELAY_MS": str(self.ledger_delay_ms),
            # client-id locks per fleet: concurrent test sessions on one host reuse ids ("a")
            "XDG_RUNTIME_DIR": str(self.root / "run"),
            **(env or {}),
        }
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(
                command,
                env=environment,
                stdout=out,
                stderr=out,
                start_new_session=True,
                cwd=cwd,
            )
        member = Member(client_id, proc, log_path)
        self.members.append(member)
        return member

    # ---- observation -----------------------------------------------------------------------

    def holders(self) -> dict[int, str]:
        """Data partition -> client holding it with a live claim, per the coordination log."""
        self.reader.poll(0.2)
        now = int(time.time() * 1000)
        hb_ms = int(self.hb * 1000)
        out: dict[int, str] = {}
        for world in self.reader.worlds.values():
            for key, state in world.claims.items():
                holder = state.holder_client
                if key.topic == self.topic and holder is not None and is_live(state, now, hb_ms):
                    out[key.partition] = holder
        return out

    def slice_holders(self) -> dict[str, str]:
        """Claim topic (a slice's, ``data+key.0of4``) -> client holding it with a live claim."""
        self.reader.poll(0.2)
        now = int(time.time() * 1000)
        hb_ms = int(self.hb * 1000)
        return {
            key.topic: state.holder_client
            for world in self.reader.worlds.values()
            for key, state in world.claims.items()
            if key.topic.startswith(self.topic + "+")
            and state.holder_client is not None
            and is_live(state, now, hb_ms)
        }

    def counts(self) -> Counter[str]:
        """How many data partitions each client holds."""
        return Counter(self.holders().values())

    def positions(self, mode: Mode) -> dict[int, int | None]:
        """Each data partition's resume position per the log."""
        self.reader.poll(0.2)
        out: dict[int, int | None] = {}
        for world in self.reader.worlds.values():
            for key, state in world.claims.items():
                if key.topic == self.topic and not is_member_key(key):
                    out[key.partition] = resume_offset(state, mode)
        return out

    def positions_reach(self, ends: dict[int, int], mode: Mode) -> bool:
        """Whether every data partition's resume position is at ``ends`` (AMO: everything
        reserved)."""
        positions = self.positions(mode)
        return all((positions.get(p) or 0) >= end for p, end in ends.items())

    def wait_split(self, shares: list[int], timeout: float = 60) -> None:
        """Wait until the members hold partitions in these numbers (sorted)."""
        split = f"a {shares} split"
        self.wait_for(lambda: sorted(self.counts().values()) == shares, timeout, split)

    def slice_positions(self) -> dict[str, int | None]:
        """Each slice's resume position per the log (claim topic -> offset)."""
        self.reader.poll(0.2)
        return {
            key.topic: resume_offset(state, Mode(self.mode))
            for world in self.reader.worlds.values()
            for key, state in world.claims.items()
            if key.topic.startswith(self.topic + "+")
        }

    def committed(self) -> dict[int, int]:
        """The group's offsets committed to Kafka (what kafka-consumer-groups shows)."""
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group})
        try:
            found = c.committed(
                [TopicPartition(self.topic, p) for p in range(self.partitions)], timeout=10
            )
        finally:
            c.close()
        return {tp.partition: tp.offset for tp in found if tp.offset >= 0}

    def admin(
        self, *args: str, timeout: float = 90.0, heartbeat: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run `marshal-admin ARGS` against this fleet's coordination topic and, unless
        ``heartbeat`` is False (the command then reads the group's from the log), its heartbeat
        interval (no MARSHAL_* variables inherited)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")}
        command = [
            str(MARSHAL_ADMIN),
            *args,
            "--bootstrap-servers",
            self.bootstrap,
            "--coordination-topic",
            self.coordination,
        ]
        if heartbeat:
            command += ["--heartbeat-interval", str(self.hb)]
        return subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )

    def audit(self, out: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
        """Run `marshal-audit --json` (Spark, local) on this fleet's coordination topic and
        ledger, writing to ``out``: (exit code, the JSON summary, stderr)."""
        argv = [
            str(MARSHAL_AUDIT), "--bootstrap-servers", self.bootstrap,
            "--coordination-topic", self.coordination, "--ledger", str(self.ledger_dir),
            "--heartbeat-interval", str(self.hb), "--out", str(out), "--json", *extra,
        ]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        lines = proc.stdout.strip().splitlines()
        summary = json.loads(lines[-1]) if lines else {}
        return proc.returncode, summary, proc.stderr

    def poison_of(self, partition: int) -> dict[str, object] | None:
        """The poison record `marshal-admin status --json` shows for ``partition`` of this
        fleet's topic, or None: also while the group is unknown, before any member of it has
        written its first record (status then exits 1 saying so)."""
        out = self.admin("status", "--group", self.group, "--json")
        if out.returncode == 1 and f"group {self.group} is unknown" in out.stderr:
            return None
        assert out.returncode == 0, out.stderr
        for claim in json.loads(out.stdout)["claims"]:
            if claim["topic"] == self.topic and claim["partition"] == partition:
                found = claim.get("poison")
                return found if isinstance(found, dict) else None
        return None

    def ledger(self) -> list[LedgerRow]:
        return [r for r in read_ledger(self.ledger_dir) if r.topic == self.topic]

    def wait_for(self, check: Callable[[], bool], timeout: float, what: str) -> float:
        """Wait until ``check()``; return the seconds it took, or fail showing the members."""
        start = time.monotonic()
        while not check():
            if time.monotonic() - start > timeout:
                tails = "\n".join(
                    f"--- {m.client_id} (pid {m.pid})\n{m.log_tail()}" for m in self.members
                )
                pytest.fail(
                    f"timed out after {timeout:.0f}s waiting for {what}; "
                    f"holders {self.holders()}\n{tails}",
                    pytrace=False,
                )
            time.sleep(0.1)
        return time.monotonic() - start

    def handled_everything(self) -> bool:
        """Whether every produced record appears in the ledger."""
        ends = self.end_offsets()
        seen = {(r.partition, r.offset) for r in self.ledger()}
        return all((p, o) in seen for p, end in ends.items() for o in range(end))

    def close(self) -> None:
        """Kill whatever still runs (and its children), stop producing, close the reader."""
        self.stop_producing()
        for member in self.members:
            if member.proc.poll() is None:
                for pid in member.children():
                    _kill_group(pid)
                with_suppressed(lambda m=member: os.killpg(m.pid, signal.SIGKILL))
                member.proc.wait(10)
        self.reader.log.close()


def _kill_group(pid: int) -> None:
    with_suppressed(lambda: os.killpg(pid, signal.SIGKILL))


def with_suppressed(action: Callable[[], object]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        action()


def partition_workers(supervisor_pid: int) -> list[int]:
    """The partition workers under ``supervisor_pid``: the fork server's children (from the
    moment they are forked; not the fork server, the resource tracker, or the children's group
    guardians, which are the workers' own children)."""
    pids = []
    with contextlib.suppress(psutil.NoSuchProcess):
        for proc in psutil.Process(supervisor_pid).children():
            with contextlib.suppress(psutil.Error):
                if "multiprocessing.forkserver" not in " ".join(proc.cmdline()):
                    continue
                for worker in proc.children():
                    with contextlib.suppress(psutil.Error):
                        if worker.status() != psutil.STATUS_ZOMBIE:
                            pids.append(worker.pid)
    return sorted(pids)


MakeFleet = Callable[..., Fleet]  # the `make_fleet` fixture (conftest): Fleet's keywords


def log_events(path: Path, event: str) -> list[dict[str, object]]:
    """The JSON log lines of one event."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") == event:
            out.append(entry)
    return out


def http_get(port: int, path: str) -> tuple[int, str]:
    """GET ``path`` of a member's metrics server on loopback: (status, body); (0, why) when
    nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)
