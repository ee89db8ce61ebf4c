"""Prometheus metrics, ``/healthz`` and ``/readyz``: an `Observer` of the supervisor, served over
HTTP from a daemon thread (``--metrics-port``).

What the supervisor reports as it happens (claims won and lost, children started and exited,
fencing kills, coordination writes, the children's `ipc.Stats`) goes into counters and
histograms at once. What is a state (the claims held, each claim's lease and heartbeat age, each
partition's lag) is taken from the snapshot the loop hands to `tick` and computed when Prometheus
scrapes, so a busy loop pays nothing for it.

Every metric is named ``marshal_*`` and carries the labels ``group`` and ``client_id``. A
metric *per claim* also carries ``topic`` (the data topic), ``partition`` and ``slice``: under
``--ordering key`` or ``unordered`` a claim is one slice of a partition, one worker, and
``slice`` names it (``key.3of8``; empty for a whole partition), so each worker has its own
series, as each partition does without slices. Metrics *per topic* (errors, kills, restarts,
latency) count a slice's under its data topic, and add no series per slice.

==========================================  =========  ============================================
marshal_claims_held                         gauge      claims held now (a partition, or a slice)
marshal_heartbeat_age_seconds               gauge      per claim: since the newest heartbeat that
                                                       was folded as valid (it set the lease)
marshal_lease_remaining_seconds             gauge      per claim: until its child must stop
marshal_lag_records                         gauge      per claim: high watermark - position (a
                                                       slice's: an upper bound, it takes only some;
                                                       AMO: from its read, `Stats.read_to`)
marshal_handler_call_seconds                gauge      per claim: how long the handler call in
                                                       progress has run (absent: none; up to
                                                       0.25 s long while calls follow each other)
marshal_handler_call_slow                   gauge      per claim: 1 while that call is past half
                                                       of --handler-timeout, plus that 0.25 s
                                                       (killed at the whole)
marshal_records_handled_total               counter    records the handler completed
marshal_handler_latency_seconds             histogram  per handler call (a batch for handle_batch)
marshal_handler_errors_total                counter    by ``policy``: what dealt with the failure
marshal_fencing_kills_total                 counter    children SIGKILLed to fence them
marshal_child_restarts_total                counter    children restarted after a failure
marshal_child_exits_total                   counter    by exit ``code`` (see child.py)
marshal_claims_won_total / _lost_ / _released_  counter
marshal_failovers_total                     counter    by ``topic``: claims won from a holder that
                                                       had gone stale (not released)
marshal_record_failures                     gauge      per claim: failures the log counts for the
                                                       record it fails on (absent: none)
marshal_record_parked                       gauge      per claim: 1 while that record is parked
marshal_group_claims                        gauge      the group's claims (partitions or slices)
marshal_group_claims_unheld                 gauge      of them, held by no live member (this
                                                       member's fold; every member tells the same)
marshal_group_members                       gauge      the group's live members
marshal_reloads_total                       counter    SIGHUP reloads
marshal_coordination_write_seconds          histogram  by ``kind`` (message type) and ``outcome``
                                                       (ok, failed); its _count counts the writes
marshal_ready, marshal_healthy              gauge      as /readyz and /healthz answer
marshal_member_dormant                      gauge      1 while another instance of the client id
                                                       has taken this one's place (dormant)
marshal_process_*                           (process)  CPU, memory, open files of the supervisor
==========================================  =========  ============================================

Lag is computed from what the children already know: each `Stats` carries the high watermark
from the child consumer's cache (updated by every fetch, no extra request to the broker), and
the supervisor subtracts the claim's position (ALO: handled and reported; AMO: granted, so a
batch in hand counts as done). It is as fresh as the child's last report (about a second).

``/healthz`` answers 200 while the loop has run a healthy turn within `HEALTH_WINDOW_S` (the
condition that also feeds the systemd watchdog), and while it is still starting; else 503. Its
text names every partition whose handler call is past half the handler timeout (still 200: the
watchdog deals with it at the whole timeout).
``/readyz`` answers 200 from `ready` (the log caught up, the claim loop running) until the
supervisor begins to stop, except while it is dormant (replaced by another instance of its
client id: its text names that instance); else 503.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from marshal_workers.childlink.sharedlease import default_margin, lease_deadline
from marshal_workers.common.errors import ConfigError
from marshal_workers.core.observations import LossCause
from marshal_workers.ipc.messages import LATENCY_BUCKETS, Stats
from marshal_workers.protocol.members import is_member_key
from marshal_workers.protocol.slicing import data_topic, records_at_most, split_topic
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.supervisor.observe import ClaimSnapshot, Observer

HEALTH_WINDOW_S = 5.0
WRITE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
POLICY_STOP = "stop"  # a HandlerFailed: the child stopped on the failure

Clock = Callable[[], float]


class Metrics(Observer):
    """Counts what the supervisor reports and answers scrapes and health checks."""

    def __init__(
        self,
        group: str,
        client_id: str,
        heartbeat_interval: float,
        clock: Clock = time.monotonic,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.base = (group, client_id)
        hb = heartbeat_interval
        self.lease_span = lease_deadline(0.0, hb, default_margin(hb))  # from a heartbeat's sending
        self.clock = clock
        self.registry = registry if registry is not None else CollectorRegistry()
        self.is_ready = False
        self.is_stopping = False
        self.replacer: str | None = None  # dormant: the instance that took this one's place
        self._claims: Mapping[ClaimKey, ClaimSnapshot] = {}
        self._tick_at: float | None = None
        self._healthy_at: float | None = None
        self._high: dict[ClaimKey, int] = {}
        self._read_to: dict[ClaimKey, int | None] = {}  # an AMO slice child's `Stats.read_to`
        self._latency: dict[str, tuple[list[int], float]] = {}  # topic: (bucket counts, sum)
        self._lock = threading.Lock()
        base = ["group", "client_id"]
        claim = [*base, "topic", "partition", "slice"]
        r = self.registry
        self.handled = Counter("marshal_records_handled", "Records handled.", claim, registry=r)
        self.errors = Counter(
            "marshal_handler_errors",
            "Handler failures, by the policy that dealt with them.",
            [*base, "topic", "policy"],
            registry=r,
        )
        self.fencing_kills = Counter(
            "marshal_fencing_kills", "Children killed to fence them.", [*base, "topic"], registry=r
        )
        self.restarts = Counter(
            "marshal_child_restarts",
            "Children restarted after a failure.",
            [*base, "topic"],
            registry=r,
        )
        self.exits = Counter(
            "marshal_child_exits", "Children exited, by exit code.", [*base, "code"], registry=r
        )
        self.won = Counter("marshal_claims_won", "Claims won or resumed.", base, registry=r)
        self.lost = Counter("marshal_claims_lost", "Claims lost.", base, registry=r)
        self.released = Counter("marshal_claims_released", "Claims released.", base, registry=r)
        self.reloads = Counter("marshal_reloads", "SIGHUP reloads.", base, registry=r)
        self.failovers = Counter(
            "marshal_failovers",
            "Claims won from a holder that had gone stale (not released).",
            [*base, "topic"],
            registry=r,
        )
        self._records: dict[ClaimKey, tuple[int, bool]] = {}  # failures, parked
        self._group: tuple[int, int, int] | None = None  # claims, unheld, members
        # counters exported at 0 before their first event, so that increase() and rate() see
        # the first one (a series that appears at 1 reads as no increase)
        for counter in (self.won, self.lost, self.released, self.reloads):
            counter.labels(*self.base)
        self._topics_seen: set[str] = set()
        self.amo_lost_records = Counter(
            "marshal_amo_lost_records",
            "AMO: records reserved in the log and never handled, by cause (0 without a crash).",
            [*claim, "cause"],
            registry=r,
        )
        self.writes = Histogram(
            "marshal_coordination_write_seconds",
            "Coordination writes until acknowledged or failed.",
            [*base, "kind", "outcome"],
            buckets=WRITE_BUCKETS,
            registry=r,
        )
        ProcessCollector(namespace="marshal", registry=r)
        r.register(_StateCollector(self))

    # ---- observer hooks (the supervisor's loop thread) --------------------------------------

    def ready(self) -> None:
        self.is_ready = True

    def stopping(self) -> None:
        self.is_stopping = True

    def dormant(self, instance: str) -> None:
        self.replacer = instance

    def resumed(self) -> None:
        self.replacer = None

    def tick(self, claims: Mapping[ClaimKey, ClaimSnapshot], healthy: bool) -> None:
        now = self.clock()
        self._claims, self._tick_at = claims, now
        if healthy:
            self._healthy_at = now

    def claim_won(self, key: ClaimKey, token: int) -> None:
        self.won.labels(*self.base).inc()
        topic = data_topic(key.topic)
        if topic not in self._topics_seen and not is_member_key(key):
            self._topics_seen.add(topic)  # the topic's counters at 0 (see __init__)
            for counter in (self.failovers, self.restarts, self.fencing_kills):
                counter.labels(*self.base, topic)

    def claim_lost(self, key: ClaimKey, reason: str) -> None:
        self.lost.labels(*self.base).inc()
        self._high.pop(key, None)
        self._read_to.pop(key, None)
        self._records.pop(key, None)

    def claim_released(self, key: ClaimKey) -> None:
        self.released.labels(*self.base).inc()
        self._high.pop(key, None)
        self._read_to.pop(key, None)
        self._records.pop(key, None)

    def failover(self, key: ClaimKey, previous_client: str) -> None:
        self.failovers.labels(*self.base, data_topic(key.topic)).inc()

    def record_failures(self, key: ClaimKey, offset: int, failures: int, parked: bool) -> None:
        if failures:
            self._records[key] = (failures, parked)
        else:
            self._records.pop(key, None)

    def group_view(self, claims: int, unheld: int, members: int) -> None:
        self._group = (claims, unheld, members)

    def child_started(self, key: ClaimKey, pid: int, restart: bool) -> None:
        if restart:
            self.restarts.labels(*self.base, data_topic(key.topic)).inc()

    def child_exited(self, key: ClaimKey, pid: int, code: int) -> None:
        self.exits.labels(*self.base, str(code)).inc()

    def fencing_kill(self, key: ClaimKey, pid: int, why: str) -> None:
        self.fencing_kills.labels(*self.base, data_topic(key.topic)).inc()

    def handler_failed(self, key: ClaimKey, offset: int, error: str) -> None:
        self.errors.labels(*self.base, data_topic(key.topic), POLICY_STOP).inc()

    def coordination_write(self, kind: str, seconds: float, ok: bool) -> None:
        self.writes.labels(*self.base, kind, "ok" if ok else "failed").observe(seconds)

    def reloading(self) -> None:
        self.reloads.labels(*self.base).inc()

    def amo_lost(self, key: ClaimKey, start: int, end: int, cause: LossCause) -> None:
        labels = (*self.base, *claim_labels(key), cause.value)
        self.amo_lost_records.labels(*labels).inc(records_at_most(key.topic, start, end))

    def child_stats(self, key: ClaimKey, stats: Stats) -> None:
        topic = data_topic(key.topic)
        if stats.handled:
            self.handled.labels(*self.base, *claim_labels(key)).inc(stats.handled)
        for policy, count in stats.errors:
            self.errors.labels(*self.base, topic, policy).inc(count)
        if stats.high_watermark is not None:
            self._high[key] = stats.high_watermark
        self._read_to[key] = stats.read_to  # (None: its own records wait, or not a slice)
        if any(stats.latency_counts):
            with self._lock:
                empty = ([0] * (len(LATENCY_BUCKETS) + 1), 0.0)
                counts, total = self._latency.get(topic, empty)
                for i, n in enumerate(stats.latency_counts[: len(counts)]):
                    counts[i] += n
                self._latency[topic] = (counts, total + stats.latency_sum)

    # ---- health (any thread) ----------------------------------------------------------------

    def health(self) -> tuple[bool, str]:
        """/healthz: whether the loop ran a healthy turn lately (True while still starting)."""
        if not self.is_ready or self._healthy_at is None:
            return True, "starting"
        age = self.clock() - self._healthy_at
        slow = sorted(
            f"{k.topic}/{k.partition} ({s.call_s:.1f}s)"
            for k, s in self._claims.items()
            if s.call_slow and s.call_s is not None
        )
        note = f"; slow handler call: {', '.join(slow)}" if slow else ""
        if age <= HEALTH_WINDOW_S:
            return True, f"ok: healthy loop turn {age:.1f}s ago{note}"
        return False, f"no healthy loop turn for {age:.1f}s{note}"

    def readiness(self) -> tuple[bool, str]:
        """/readyz: caught up and claiming, not stopping, not dormant (healthy all the same:
        a dormant member's loop runs, and claims again once its replacer falls silent)."""
        if self.is_stopping:
            return False, "stopping"
        if not self.is_ready:
            return False, "catching up on the coordination log"
        replacer = self.replacer
        if replacer is not None:
            client = self.base[1]
            return False, (
                f"dormant: instance {replacer} of client id {client} took this one's place "
                "(a second host with this --client-id?); it claims again once that one falls "
                "silent"
            )
        return True, "ready"

    @property
    def is_dormant(self) -> bool:
        """Replaced by another instance of this client id, and not stopping."""
        return self.replacer is not None and not self.is_stopping

    # ---- scrape-time state (the HTTP thread) ------------------------------------------------

    def state_metrics(self) -> list[Metric]:
        """The gauges and the handler latency histogram, computed now."""
        labels = ["group", "client_id"]
        per_claim = [*labels, "topic", "partition", "slice"]
        held = GaugeMetricFamily(
            "marshal_claims_held", "Claims held (a partition, or a slice).", labels=labels
        )
        age = GaugeMetricFamily(
            "marshal_heartbeat_age_seconds",
            "Since the newest heartbeat folded as valid.",
            labels=per_claim,
        )
        lease = GaugeMetricFamily(
            "marshal_lease_remaining_seconds", "Until the child must stop.", labels=per_claim
        )
        lag = GaugeMetricFamily(
            "marshal_lag_records", "High watermark minus position.", labels=per_claim
        )
        call = GaugeMetricFamily(
            "marshal_handler_call_seconds",
            "How long the handler call in progress has run.",
            labels=per_claim,
        )
        slow = GaugeMetricFamily(
            "marshal_handler_call_slow",
            "1 while the handler call in progress is past half the handler timeout.",
            labels=per_claim,
        )
        claims, tick_at = self._claims, self._tick_at
        since_tick = self.clock() - tick_at if tick_at is not None else 0.0
        count = 0
        for key, snap in claims.items():
            if is_member_key(key) or snap.phase == "lost":
                continue
            count += 1
            values = [*self.base, *claim_labels(key)]
            if snap.lease_remaining is not None:  # None: revoked (a fast stop)
                remaining = snap.lease_remaining - since_tick
                lease.add_metric(values, remaining)
                age.add_metric(values, self.lease_span - remaining)
            high = self._high.get(key)
            if high is not None:
                read = self._read_to.get(key)  # an AMO slice's read past its position
                lag.add_metric(values, max(0, high - max(snap.position, read or 0)))
            if snap.call_s is not None:
                call.add_metric(values, snap.call_s + since_tick)
            slow.add_metric(values, 1.0 if snap.call_slow else 0.0)
        held.add_metric(list(self.base), count)
        failures = GaugeMetricFamily(
            "marshal_record_failures",
            "Failures the log counts for the record the claim fails on.",
            labels=per_claim,
        )
        parked = GaugeMetricFamily(
            "marshal_record_parked",
            "1 while the claim's failing record is parked.",
            labels=per_claim,
        )
        for key, (n, is_parked) in list(self._records.items()):
            values = [*self.base, *claim_labels(key)]
            failures.add_metric(values, n)
            parked.add_metric(values, 1.0 if is_parked else 0.0)
        group = [
            GaugeMetricFamily(name, text, labels=labels)
            for name, text in (
                ("marshal_group_claims", "The group's claims (partitions or slices)."),
                ("marshal_group_claims_unheld", "The group's claims no live member holds."),
                ("marshal_group_members", "The group's live members."),
            )
        ]
        if self._group is not None:
            for family, value in zip(group, self._group, strict=True):
                family.add_metric(list(self.base), value)
        ready = GaugeMetricFamily("marshal_ready", "1 while /readyz says ready.", labels=labels)
        ready.add_metric(list(self.base), 1.0 if self.readiness()[0] else 0.0)
        healthy = GaugeMetricFamily("marshal_healthy", "1 while /healthz says ok.", labels=labels)
        healthy.add_metric(list(self.base), 1.0 if self.health()[0] else 0.0)
        dormant = GaugeMetricFamily(
            "marshal_member_dormant",
            "1 while another instance of this client id has taken this one's place.",
            labels=labels,
        )
        dormant.add_metric(list(self.base), 1.0 if self.is_dormant else 0.0)
        latency = HistogramMetricFamily(
            "marshal_handler_latency_seconds",
            "Handler call duration (a whole batch for handle_batch plugins).",
            labels=[*labels, "topic"],
        )
        with self._lock:
            snapshot = {t: (list(c), s) for t, (c, s) in self._latency.items()}
        for topic, (counts, total) in sorted(snapshot.items()):
            cumulative, buckets = 0, []
            for bound, n in zip((*LATENCY_BUCKETS, float("inf")), counts, strict=True):
                cumulative += n
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            latency.add_metric([*self.base, topic], buckets, sum_value=total)
        return [held, age, lease, lag, call, slow, failures, parked, *group, ready, healthy,
                dormant, latency]  # fmt: skip


def claim_labels(key: ClaimKey) -> tuple[str, str, str]:
    """A claim's ``topic`` (the data topic), ``partition`` and ``slice`` (empty: all of it)."""
    topic, part = split_topic(key.topic)
    return topic, str(key.partition), "" if part is None else part.name


class _StateCollector(Collector):
    """Hands the scrape-time metrics of a `Metrics` to the registry."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self.metrics.state_metrics()


# ---- the HTTP server ------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    metrics: Metrics  # set on the subclass made for each server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._answer(200, generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST)
        elif path in ("/healthz", "/readyz"):
            check = self.metrics.health if path == "/healthz" else self.metrics.readiness
            ok, text = check()
            self._answer(200 if ok else 503, f"{text}\n".encode())
        else:
            self._answer(404, b"not found: try /metrics, /healthz or /readyz\n")

    def _answer(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class MetricsServer:
    """Serves a `Metrics` on ``host:port`` from a daemon thread (port 0: any free port)."""

    def __init__(self, metrics: Metrics, host: str, port: int) -> None:
        handler = type("MetricsHandler", (_Handler,), {"metrics": metrics})
        server_class = _Server6 if ":" in host else ThreadingHTTPServer
        try:
            self._server = server_class((host, port), handler)
        except OSError as exc:
            raise ConfigError(
                f"metrics_port = {port}: cannot serve on {host}:{port}: {exc.strerror or exc}"
            ) from None
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="marshal-metrics", daemon=True
        )

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Begin serving."""
        self._thread.start()

    def close(self) -> None:
        """Stop serving and close the socket."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(5)
        self._server.server_close()
