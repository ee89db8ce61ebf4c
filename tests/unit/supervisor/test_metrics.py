"""Metrics: what the observer hooks and the children's Stats add up to, the scrape-time gauges,
/healthz and /readyz, and the HTTP server on a real socket."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from marshal_workers.common.errors import ConfigError
from marshal_workers.config.settings import resolve
from marshal_workers.core.observations import AmoLost, LossCause
from marshal_workers.ipc.messages import LATENCY_BUCKETS, Stats
from marshal_workers.protocol.members import member_key
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.supervisor.metrics import HEALTH_WINDOW_S, Metrics, MetricsServer
from marshal_workers.supervisor.observe import ClaimSnapshot, deliver

HB = 1.0
KEY = ClaimKey("g", "orders", 3)


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def metrics(clock: Clock) -> Metrics:
    return Metrics("g", "c1", HB, clock=clock)


def samples(metrics: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape, keyed by name and labels."""
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    wanted = frozenset({"group": "g", "client_id": "c1", **labels}.items())
    return samples(metrics).get((name, wanted))


def latencies(*seconds: float) -> tuple[int, ...]:
    counts = [0] * (len(LATENCY_BUCKETS) + 1)
    for s in seconds:
        counts[
            next((i for i, b in enumerate(LATENCY_BUCKETS) if s <= b), len(LATENCY_BUCKETS))
        ] += 1
    return tuple(counts)


class TestCounting:
    def test_child_stats_add_up(self, metrics: Metrics) -> None:
        """Records handled, latency buckets and errors by policy accumulate over reports."""
        metrics.child_stats(KEY, Stats(3, latencies(0.002, 0.002, 0.2), 0.204, (("skip", 1),)))
        metrics.child_stats(KEY, Stats(2, latencies(0.002, 40.0), 40.002, (("dlq", 2),)))
        where = {"topic": "orders", "partition": "3", "slice": ""}
        assert value(metrics, "marshal_records_handled_total", **where) == 5
        assert value(metrics, "marshal_handler_errors_total", topic="orders", policy="skip") == 1
        assert value(metrics, "marshal_handler_errors_total", topic="orders", policy="dlq") == 2
        bucket = "marshal_handler_latency_seconds_bucket"
        assert value(metrics, bucket, topic="orders", le="0.0025") == 3
        assert value(metrics, bucket, topic="orders", le="0.25") == 4
        assert value(metrics, bucket, topic="orders", le="+Inf") == 5
        assert value(metrics, "marshal_handler_latency_seconds_count", topic="orders") == 5
        assert value(metrics, "marshal_handler_latency_seconds_sum", topic="orders") == 40.206

    def test_supervisor_events_are_counted(self, metrics: Metrics) -> None:
        """Failures that stopped a child, fencing kills, restarts, exits, claims, reloads."""
        metrics.handler_failed(KEY, 10, "boom")
        metrics.fencing_kill(KEY, 99, "lease ending")
        metrics.child_started(KEY, 100, restart=False)
        metrics.child_started(KEY, 101, restart=True)
        metrics.child_exited(KEY, 100, 4)
        metrics.claim_won(KEY, 5)
        metrics.claim_lost(KEY, "taken")
        metrics.claim_released(KEY)
        metrics.reloading()
        assert value(metrics, "marshal_handler_errors_total", topic="orders", policy="stop") == 1
        assert value(metrics, "marshal_fencing_kills_total", topic="orders") == 1
        assert value(metrics, "marshal_child_restarts_total", topic="orders") == 1
        assert value(metrics, "marshal_child_exits_total", code="4") == 1
        for name in ("won", "lost", "released"):
            assert value(metrics, f"marshal_claims_{name}_total") == 1
        assert value(metrics, "marshal_reloads_total") == 1

    def test_coordination_writes_by_kind_and_outcome(self, metrics: Metrics) -> None:
        """Each write lands in a histogram labelled with its message type and outcome."""
        metrics.coordination_write("Heartbeat", 0.004, True)
        metrics.coordination_write("Heartbeat", 0.003, True)
        metrics.coordination_write("ClaimingPartition", 2.0, False)
        name = "marshal_coordination_write_seconds_count"
        assert value(metrics, name, kind="Heartbeat", outcome="ok") == 2
        assert value(metrics, name, kind="ClaimingPartition", outcome="failed") == 1

    def test_amo_losses_are_counted_by_cause_through_the_cores_observation(
        self, metrics: Metrics
    ) -> None:
        """The core's typed observation reaches the counter of lost records."""
        deliver(metrics, AmoLost(KEY, 130, 200, LossCause.CRASH))
        deliver(metrics, AmoLost(KEY, 300, 350, LossCause.LEASE_EXPIRED))
        deliver(metrics, AmoLost(KEY, 400, 410, LossCause.CRASH))
        name = "marshal_amo_lost_records_total"
        where = {"topic": "orders", "partition": "3", "slice": ""}
        assert value(metrics, name, **where, cause="crash") == 80
        assert value(metrics, name, **where, cause="lease_expired") == 50


class TestScrapeTimeState:
    def test_claims_lease_heartbeat_age_and_lag(self, metrics: Metrics, clock: Clock) -> None:
        """Gauges come from the last tick's snapshot, aged to the scrape; members not counted."""
        member = member_key("g", "c1")
        metrics.child_stats(KEY, Stats(0, latencies(), 0.0, (), high_watermark=120))
        metrics.tick(
            {
                KEY: ClaimSnapshot(KEY, 7, 100, 1.5, 4242, "running"),
                member: ClaimSnapshot(member, 1, 0, 1.5, None, "running"),
            },
            healthy=True,
        )
        clock.now += 0.5
        labels = {"topic": "orders", "partition": "3", "slice": ""}
        assert value(metrics, "marshal_claims_held") == 1
        assert value(metrics, "marshal_lease_remaining_seconds", **labels) == pytest.approx(1.0)
        span = 2 * HB - 0.1  # 2*HB minus the default margin
        age = value(metrics, "marshal_heartbeat_age_seconds", **labels)
        assert age == pytest.approx(span - 1.0)
        assert value(metrics, "marshal_lag_records", **labels) == 20

    def test_a_slow_handler_call_is_shown(self, metrics: Metrics, clock: Clock) -> None:
        """A call past half the handler timeout: its age and the slow flag in the metrics, and
        the partition named in /healthz (still healthy: the watchdog ends it at the whole)."""
        metrics.ready()
        metrics.tick(
            {KEY: ClaimSnapshot(KEY, 7, 100, 1.5, 4242, "running", 6.0, True)}, healthy=True
        )
        clock.now += 0.5
        labels = {"topic": "orders", "partition": "3", "slice": ""}
        assert value(metrics, "marshal_handler_call_seconds", **labels) == pytest.approx(6.5)
        assert value(metrics, "marshal_handler_call_slow", **labels) == 1
        ok, text = metrics.health()
        assert ok and "slow handler call: orders/3 (6.0s)" in text
        metrics.tick({KEY: ClaimSnapshot(KEY, 7, 101, 1.5, 4242, "running")}, healthy=True)
        assert value(metrics, "marshal_handler_call_slow", **labels) == 0
        assert value(metrics, "marshal_handler_call_seconds", **labels) is None
        assert "slow" not in metrics.health()[1]

    def test_released_claims_disappear(self, metrics: Metrics) -> None:
        """A claim no longer in the snapshot has no gauges left."""
        metrics.tick({KEY: ClaimSnapshot(KEY, 7, 100, 1.5, 4242, "running")}, healthy=True)
        metrics.claim_released(KEY)
        metrics.tick({}, healthy=True)
        assert value(metrics, "marshal_claims_held") == 0
        names = {name for name, _ in samples(metrics)}
        assert "marshal_lease_remaining_seconds" not in names

    def test_a_revoked_lease_has_no_lease_gauges(self, metrics: Metrics) -> None:
        """A claim without a lease (revoked by a fast stop) is held, with no lease or age."""
        metrics.tick({KEY: ClaimSnapshot(KEY, 7, 100, None, 4242, "stopping")}, healthy=True)
        assert value(metrics, "marshal_claims_held") == 1
        names = {name for name, _ in samples(metrics)}
        assert "marshal_lease_remaining_seconds" not in names
        assert "marshal_heartbeat_age_seconds" not in names

    def test_process_metrics_are_prefixed(self, metrics: Metrics) -> None:
        """Even the process collector's metrics are named marshal_*."""
        names = {name for name, _ in samples(metrics)}
        assert "marshal_process_cpu_seconds_total" in names
        assert all(n.startswith("marshal_") for n in names)


class TestHealth:
    def test_health_follows_healthy_loop_turns(self, metrics: Metrics, clock: Clock) -> None:
        """Starting: ok; then ok while a healthy turn happened within the window; else not."""
        assert metrics.health() == (True, "starting")
        metrics.ready()
        metrics.tick({}, healthy=True)
        assert metrics.health()[0]
        clock.now += HEALTH_WINDOW_S - 1
        metrics.tick({}, healthy=False)
        assert metrics.health()[0]
        clock.now += 2
        metrics.tick({}, healthy=False)
        assert not metrics.health()[0]
        metrics.tick({}, healthy=True)
        assert metrics.health()[0]

    def test_readiness_from_ready_until_stopping(self, metrics: Metrics) -> None:
        """Not ready while catching up, ready after ready(), not ready once stopping."""
        assert not metrics.readiness()[0]
        metrics.ready()
        assert metrics.readiness() == (True, "ready")
        metrics.stopping()
        assert metrics.readiness() == (False, "stopping")

    def test_a_dormant_member_is_healthy_not_ready_and_says_so(self, metrics: Metrics) -> None:
        """Replaced by another instance of its client id, a member is dormant: its loop runs
        (healthy, so no watchdog restarts it) but it claims nothing, so /readyz says 503 and
        names the instance, and `marshal_member_dormant` is 1 (an alert's series: the log
        lines alone left a dormant member unseen). Resumed: ready and 0 again; a TERM while
        dormant reads as stopping."""
        metrics.ready()
        metrics.tick({}, healthy=True)
        assert value(metrics, "marshal_member_dormant") == 0.0
        metrics.dormant("inst-2")
        ok, text = metrics.readiness()
        assert not ok and text.startswith("dormant:") and "inst-2" in text and "c1" in text
        assert metrics.health()[0]
        assert value(metrics, "marshal_member_dormant") == 1.0
        assert value(metrics, "marshal_ready") == 0.0
        metrics.resumed()
        assert metrics.readiness() == (True, "ready")
        assert value(metrics, "marshal_member_dormant") == 0.0
        metrics.dormant("inst-3")
        metrics.stopping()
        assert metrics.readiness() == (False, "stopping")
        assert value(metrics, "marshal_member_dormant") == 0.0


@pytest.fixture
def server(metrics: Metrics) -> Iterator[MetricsServer]:
    s = MetricsServer(metrics, "127.0.0.1", 0)
    s.start()
    try:
        yield s
    finally:
        s.close()


def get(server: MetricsServer, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class TestServer:
    def test_serves_metrics_health_and_readiness(
        self, server: MetricsServer, metrics: Metrics
    ) -> None:
        """/metrics in the text format; /healthz and /readyz with 200 or 503; 404 elsewhere."""
        status, text = get(server, "/metrics")
        assert status == 200 and "marshal_claims_held" in text
        assert get(server, "/readyz")[0] == 503
        metrics.ready()
        metrics.tick({}, healthy=True)
        assert get(server, "/healthz") == (200, "ok: healthy loop turn 0.0s ago\n")
        assert get(server, "/readyz") == (200, "ready\n")
        metrics.stopping()
        assert get(server, "/readyz") == (503, "stopping\n")
        assert get(server, "/nope")[0] == 404

    def test_a_taken_port_is_a_configuration_error(self, metrics: Metrics) -> None:
        """Binding a port in use fails with one line naming the setting."""
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            with pytest.raises(ConfigError, match=f"metrics_port = {port}"):
                MetricsServer(metrics, "127.0.0.1", port)


class TestSettings:
    def test_metrics_port_from_flag_environment_and_file(self) -> None:
        """--metrics-port / MARSHAL_METRICS_PORT: off by default, a TCP port when given."""
        assert resolve({}, None, {}).values["metrics_port"] is None
        assert resolve({}, None, {"MARSHAL_METRICS_PORT": "9100"}).values["metrics_port"] == 9100
        assert resolve({"metrics_port": "9200"}, None, {}).values["metrics_port"] == 9200
        assert resolve({}, None, {}).values["metrics_host"] == "127.0.0.1"

    def test_a_bad_port_is_refused_naming_the_setting(self) -> None:
        """Out of range or not a number: ConfigError naming metrics_port and its source."""
        with pytest.raises(ConfigError, match="metrics_port = '70000' from --metrics-port"):
            resolve({"metrics_port": "70000"}, None, {})
        with pytest.raises(ConfigError, match="MARSHAL_METRICS_PORT"):
            resolve({}, None, {"MARSHAL_METRICS_PORT": "http"})


SLICE = ClaimKey("g", "orders+key.1of4", 3)  # slice 1 of 4 of orders/3 (ordering key)


class TestSlices:
    def test_a_slices_metrics_name_the_data_topic_and_the_slice(
        self, metrics: Metrics, clock: Clock
    ) -> None:
        """Per-claim series carry topic = the data topic and slice = the slice's name (empty
        for a whole partition); per-topic series count a slice under its data topic, so the
        slices of a partition add no series there."""
        where = {"topic": "orders", "partition": "3", "slice": "key.1of4"}
        metrics.child_stats(SLICE, Stats(3, latencies(0.002), 0.002, (("skip", 1),), 50))
        metrics.child_stats(KEY, Stats(2, latencies(0.002), 0.002, (), 60))
        deliver(metrics, AmoLost(SLICE, 10, 15, LossCause.CRASH))
        metrics.fencing_kill(SLICE, 99, "lease ending")
        snaps = {SLICE: ClaimSnapshot(SLICE, 7, 40, 1.5, 4242, "running"),
                 KEY: ClaimSnapshot(KEY, 8, 45, 1.5, 4243, "running")}  # fmt: skip
        metrics.tick(snaps, healthy=True)
        assert value(metrics, "marshal_records_handled_total", **where) == 3
        whole = {**where, "slice": ""}
        assert value(metrics, "marshal_records_handled_total", **whole) == 2
        assert value(metrics, "marshal_amo_lost_records_total", **where, cause="crash") == 5
        striped = ClaimKey("g", "orders+unordered.1of4", 3)  # offsets 1, 5, 9, ... of orders/3
        deliver(metrics, AmoLost(striped, 10, 30, LossCause.CRASH))  # 13, 17, 21, 25, 29
        where_striped = {**where, "slice": "unordered.1of4"}
        assert value(metrics, "marshal_amo_lost_records_total", **where_striped, cause="crash") == 5
        assert value(metrics, "marshal_lag_records", **where) == 10
        assert value(metrics, "marshal_lag_records", **whole) == 15
        assert value(metrics, "marshal_lease_remaining_seconds", **where) == pytest.approx(1.5)
        assert value(metrics, "marshal_handler_errors_total", topic="orders", policy="skip") == 1
        assert value(metrics, "marshal_fencing_kills_total", topic="orders") == 1
        assert value(metrics, "marshal_handler_latency_seconds_count", topic="orders") == 2
        assert value(metrics, "marshal_claims_held") == 2
        assert not any("+" in dict(labels).get("topic", "") for _, labels in samples(metrics))

    def test_an_amo_slice_that_read_past_its_position_lags_from_its_read(
        self, metrics: Metrics, clock: Clock
    ) -> None:
        """AMO: a key slice's position moves only with its own reservations, so a slice with
        few or no records stayed far behind the high watermark and its lag grew for ever (a
        review: 2,220 then 4,450 records on a caught-up group, and the shipped alert on lag
        growing would fire). Its child says how far it read with nothing of its own waiting
        (`Stats.read_to`): the lag counts from there."""
        where = {"topic": "orders", "partition": "3", "slice": "key.1of4"}
        metrics.child_stats(SLICE, Stats(0, latencies(), 0.0, (), 4460, read_to=4455))
        metrics.tick({SLICE: ClaimSnapshot(SLICE, 7, 0, 1.5, 4242, "running")}, healthy=True)
        assert value(metrics, "marshal_lag_records", **where) == 5
        metrics.child_stats(SLICE, Stats(0, latencies(), 0.0, (), 4470))  # its own to handle
        metrics.tick({SLICE: ClaimSnapshot(SLICE, 7, 0, 1.5, 4242, "running")}, healthy=True)
        assert value(metrics, "marshal_lag_records", **where) == 4470


class TestDashboardSignals:
    """What the dashboard and the alert rules need: failovers, a claim's failing or parked
    record, and the group's claims no live member holds, from the core's observations."""

    def test_failovers_are_counted_by_topic(self, metrics: Metrics) -> None:
        """At 0 from the first claim won on the topic (a series that appears at 1 would show
        no increase in Prometheus), then one per failover."""
        from marshal_workers.core.observations import ClaimWon, Failover  # noqa: PLC0415

        deliver(metrics, ClaimWon(KEY, 1))
        assert value(metrics, "marshal_failovers_total", topic="orders") == 0.0
        assert value(metrics, "marshal_child_restarts_total", topic="orders") == 0.0
        assert value(metrics, "marshal_claims_lost_total") == 0.0
        deliver(metrics, Failover(KEY, "c9"))
        assert value(metrics, "marshal_failovers_total", topic="orders") == 1.0

    def test_a_failing_then_parked_record_then_an_operators_decision(
        self, metrics: Metrics
    ) -> None:
        from marshal_workers.core.observations import RecordFailures  # noqa: PLC0415

        labels = {"topic": "orders", "partition": "3", "slice": ""}
        deliver(metrics, RecordFailures(KEY, 120, 3, False))
        assert value(metrics, "marshal_record_failures", **labels) == 3.0
        assert value(metrics, "marshal_record_parked", **labels) == 0.0
        deliver(metrics, RecordFailures(KEY, 120, 10, True))
        assert value(metrics, "marshal_record_parked", **labels) == 1.0
        deliver(metrics, RecordFailures(KEY, 120, 0, False))  # retried or skipped
        assert value(metrics, "marshal_record_failures", **labels) is None
        assert value(metrics, "marshal_record_parked", **labels) is None

    def test_the_groups_unheld_claims_and_members(self, metrics: Metrics) -> None:
        from marshal_workers.core.observations import GroupView  # noqa: PLC0415

        assert value(metrics, "marshal_group_claims_unheld") is None  # not told yet
        deliver(metrics, GroupView(8, 2, 3))
        assert value(metrics, "marshal_group_claims") == 8.0
        assert value(metrics, "marshal_group_claims_unheld") == 2.0
        assert value(metrics, "marshal_group_members") == 3.0
