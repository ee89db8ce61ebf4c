"""End to end, with real `marshal-run` processes on the session broker: systemd notifications on
a real datagram socket, the metrics and health endpoints, SIGUSR1 stack dumps, and SIGHUP
reloads that bring new handler code in fresh children while the claims stay (the ledger says
so: new pids, same client, same tokens, no gap, no overlap)."""

from __future__ import annotations

import json
import os
import signal
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from marshal_workers.common.ledgerfile import find_gaps, find_overlaps
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.kafkalog import KafkaLog
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.rationalizer import RationalizerConfig
from tests.integration.fleet import REPO, Fleet, MakeFleet, Member, http_get

pytestmark = pytest.mark.kafka
HB = 1.0


@pytest.fixture
def fleet(make_fleet: MakeFleet) -> Fleet:
    return make_fleet(hb=HB, partitions=2)


def log_events(member: Member) -> list[dict[str, Any]]:
    """The JSON log lines of a member (other output, such as faulthandler's, is skipped)."""
    events = []
    for line in member.log_path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events


def logged(member: Member, event: str) -> list[dict[str, Any]]:
    return [e for e in log_events(member) if e.get("event") == event]


class NotifySocket:
    """systemd's side of sd_notify: a datagram socket bound at a short path."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="sdn")
        self.path = str(Path(self._dir.name) / "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.received: list[dict[str, str]] = []

    def wait_for(self, key: str, value: str | None, timeout: float, after: int = 0) -> int:
        """Index of the first datagram at or after ``after`` that sets ``key`` (to ``value``)."""
        deadline = time.monotonic() + timeout
        while True:
            for i in range(after, len(self.received)):
                got = self.received[i].get(key)
                if got is not None and (value is None or got == value):
                    return i
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no {key}={value or '*'} within {timeout}s; got {self.received}")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            self.received.append(dict(x.split("=", 1) for x in data.decode().splitlines()))

    def close(self) -> None:
        self.sock.close()
        self._dir.cleanup()


class TestSystemd:
    def test_ready_watchdog_status_reload_and_stopping_reach_the_notify_socket(
        self, fleet: Fleet
    ) -> None:
        """READY=1 once claiming, then WATCHDOG=1 and STATUS=; HUP: RELOADING=1 then READY=1;
        TERM: STOPPING=1. Children do not inherit NOTIFY_SOCKET."""
        notify = NotifySocket()
        try:
            env = {"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "1000000"}
            member = fleet.start("a", env=env)
            ready = notify.wait_for("READY", "1", 40)
            notify.wait_for("WATCHDOG", "1", 5, after=ready)
            fleet.wait_for(lambda: len(member.children()) == 2, 30, "a's 2 children")
            status = notify.wait_for("STATUS", None, 10, after=ready)
            while "2 claims" not in notify.received[status]["STATUS"]:
                status = notify.wait_for("STATUS", None, 10, after=status + 1)
            assert f"{fleet.topic}/0,{fleet.topic}/1" in notify.received[status]["STATUS"]
            for child in member.children():
                assert "NOTIFY_SOCKET" not in psutil.Process(child).environ()
            member.signal(signal.SIGHUP)
            reloading = notify.wait_for("RELOADING", "1", 10, after=status)
            assert int(notify.received[reloading]["MONOTONIC_USEC"]) > 0
            notify.wait_for("READY", "1", 30, after=reloading)
            member.signal(signal.SIGTERM)
            notify.wait_for("STOPPING", "1", 10, after=reloading)
            assert member.wait(30) == 0
        finally:
            notify.close()


class TestMetricsAndStackDumps:
    def test_metrics_health_readiness_and_usr1_stack_dumps(self, fleet: Fleet) -> None:
        """/metrics names what the issue asks for; /healthz and /readyz say 200 while running
        and /readyz 503 once TERM begins; USR1 logs the supervisor's stacks, and the children,
        stuck in their handler, dump theirs through faulthandler at once."""
        fleet.produce(10)  # offsets 0-4 of each partition; the handler will hang at offset 5
        member = fleet.start(
            "a",
            "--metrics-port",
            "0",
            "--stop-timeout",
            "3",
            env={"MARSHAL_LEDGER_HANG_AT_OFFSET": "5"},
        )
        fleet.wait_for(lambda: bool(logged(member, "metrics_serving")), 30, "the metrics server")
        port = logged(member, "metrics_serving")[0]["port"]
        fleet.wait_for(lambda: http_get(port, "/readyz")[0] == 200, 40, "/readyz 200")
        assert http_get(port, "/healthz")[0] == 200
        fleet.wait_for(lambda: len(fleet.ledger()) == 10, 30, "offsets 0-4 of both partitions")

        def scrape() -> str:
            return http_get(port, "/metrics")[1]

        def lag_of(partition: int) -> str:
            labels = f'client_id="a",group="{fleet.group}",partition="{partition}"'
            return f'marshal_lag_records{{{labels},slice="",topic="{fleet.topic}"}} 0.0'

        fleet.wait_for(
            lambda: all(lag_of(p) in scrape() for p in (0, 1)), 10, "both children's stats"
        )
        text = scrape()
        for name in (
            "marshal_claims_held",
            "marshal_heartbeat_age_seconds",
            "marshal_lease_remaining_seconds",
            "marshal_lag_records",
            "marshal_records_handled_total",
            "marshal_handler_latency_seconds_bucket",
            "marshal_coordination_write_seconds_bucket",
            "marshal_fencing_kills_total",
            "marshal_child_restarts_total",
            "marshal_handler_errors_total",
            "marshal_ready",
        ):
            assert name in text, name
        assert f'marshal_claims_held{{client_id="a",group="{fleet.group}"}} 2.0' in text
        handled = f'marshal_records_handled_total{{client_id="a",group="{fleet.group}"'
        assert text.count(handled) == 2

        fleet.produce(4)
        time.sleep(1.0)  # the children fetch offset 5 and hang in their handler
        children = member.children()
        member.signal(signal.SIGUSR1)
        fleet.wait_for(lambda: bool(logged(member, "stack_dump_done")), 10, "the stack dump")
        # one event name for supervisor and children (snake_case): the supervisor's by its pid
        dumps = [d for d in logged(member, "stack_dump") if d["pid"] == member.pid]
        assert dumps and any("dump_stacks" in d["stack"] for d in dumps)

        def stuck_dumps() -> dict[int, str]:
            return {
                e["pid"]: e["stack"]
                for e in logged(member, "stack_dump")
                if e.get("source") == "faulthandler"
            }

        fleet.wait_for(
            lambda: set(stuck_dumps()) == set(children), 10, "the stuck children's dumps"
        )
        for stack in stuck_dumps().values():
            assert "ledger.py" in stack and "in handle" in stack, stack
        assert all(psutil.pid_exists(c) for c in children), "SIGUSR1 must not end a child"
        lines = member.log_path.read_text().splitlines()
        spliced = [x for x in lines if "}{" in x or ('{"' in x and not x.startswith("{"))]
        assert spliced == [], "log lines of two processes were spliced into each other"

        member.signal(signal.SIGTERM)
        fleet.wait_for(lambda: http_get(port, "/readyz")[0] == 503, 3, "/readyz 503 while stopping")
        assert http_get(port, "/healthz")[0] == 200
        assert member.wait(30) == 0


RELOADABLE = '''"""A handler whose version is written down by each process that runs it."""
import os
from pathlib import Path

from marshal_workers.plugins.ledger import handle as ledger_handle

VERSION = {version!r}


def handle(record, ctx):
    ledger_handle(record, ctx)
    mark = Path(os.environ["RELOAD_TEST_DIR"]) / f"version-{{os.getpid()}}"
    if not mark.exists():
        mark.write_text(VERSION)
'''


def fold_all(fleet: Fleet) -> list[ev.Event]:
    log = KafkaLog(fleet.bootstrap, fleet.coordination)
    reader = FoldedLog(log, RationalizerConfig(int(fleet.hb * 1000), log.num_partitions))
    events: list[ev.Event] = []
    reader.catch_up(30, on_event=events.append)
    log.close()
    return events


class TestReload:
    def test_sighup_runs_new_handler_code_in_new_children_with_the_same_claims(
        self, fleet: Fleet, tmp_path: Path
    ) -> None:
        """HUP: each partition goes on in a new pid running the edited handler, under the same
        client and token, with no gap, no overlap, and no claim or release in between."""
        code_dir, marks = tmp_path / "code", tmp_path / "marks"
        code_dir.mkdir()
        marks.mkdir()
        module = code_dir / "reloadable_handler.py"
        module.write_text(RELOADABLE.format(version="1"))
        env = {
            "PYTHONPATH": f"{REPO}{os.pathsep}{code_dir}",
            "PYTHONDONTWRITEBYTECODE": "1",
            "RELOAD_TEST_DIR": str(marks),
        }
        fleet.produce_steadily(200)
        member = fleet.start("a", "--handler", "reloadable_handler:handle", env=env)
        fleet.wait_for(lambda: fleet.counts() == {"a": 2}, 40, "a holding both partitions")
        fleet.wait_for(lambda: {r.partition for r in fleet.ledger()} == {0, 1}, 20, "both handled")
        old_pids = {r.pid for r in fleet.ledger()}
        module.write_text(RELOADABLE.format(version="2.0"))
        member.signal(signal.SIGHUP)
        fleet.wait_for(lambda: bool(logged(member, "reloaded")), 30, "the reload")

        def new_pids_per_partition() -> dict[int, set[int]]:
            out: dict[int, set[int]] = {0: set(), 1: set()}
            for r in fleet.ledger():
                if r.pid not in old_pids:
                    out[r.partition].add(r.pid)
            return out

        fleet.wait_for(
            lambda: all(new_pids_per_partition().values()), 20, "new pids on both partitions"
        )
        fleet.stop_producing()
        fleet.wait_for(fleet.handled_everything, 30, "every record handled")
        stopped_at = time.time()
        member.signal(signal.SIGTERM)
        assert member.wait(30) == 0

        rows = fleet.ledger()
        assert {r.client_id for r in rows} == {"a"}
        for partition in (0, 1):
            mine = [r for r in rows if r.partition == partition]
            assert len({r.token for r in mine}) == 1, "the claim changed"
            assert len({r.pid for r in mine}) == 2, "one child before, one after the reload"
        versions = {int(p.name.split("-")[1]): p.read_text() for p in marks.iterdir()}
        assert {versions[p] for p in old_pids} == {"1"}
        assert {versions[p] for ps in new_pids_per_partition().values() for p in ps} == {"2.0"}
        assert not find_overlaps(rows), "old and new child overlapped"
        expected = {(fleet.topic, p): range(end) for p, end in fleet.end_offsets().items()}
        assert not find_gaps(rows, expected), "records were skipped"
        events = [
            e
            for e in fold_all(fleet)
            if isinstance(e, ev.ClaimVerdict) and e.key.topic == fleet.topic
        ]
        assert sum(isinstance(e, ev.ClaimGranted) for e in events) == 2, "claims were re-won"
        released = [e for e in events if isinstance(e, ev.Released)]
        assert len(released) == 2
        assert all(e.log_time / 1000 > stopped_at - 0.5 for e in released), "released by HUP"
