"""Riding out one broker failure (issue 9, item 8): the HB rule, and late heartbeats credited."""

from __future__ import annotations

from marshal_workers import events as ev
from marshal_workers.brokercheck import (
    FailureDetection,
    failure_detection,
    heartbeat_warning,
    min_heartbeat_s,
)
from marshal_workers.config import RunConfig
from marshal_workers.coordination import Coordinator
from marshal_workers.coordlog import Appended, LogError
from marshal_workers.lease import default_margin
from marshal_workers.memlog import MemoryLog, MemoryTopic
from marshal_workers.observe import Observer
from marshal_workers.protocol import ClaimKey
from marshal_workers.rationalizer import Mode, RationalizerConfig
from marshal_workers.reader import LogReader

KEY = ClaimKey("g", "orders", 0)


class TestRule:
    def test_the_least_heartbeat_outlasts_the_stall(self) -> None:
        """At the rule's HB a lease outlasts the stall; half a second less, it does not."""
        for session_ms in (3_000, 6_000, 9_000, 18_000):
            detection = FailureDetection(session_ms)
            hb = min_heartbeat_s(detection)
            needed = detection.stall_ms / 1000 + 1.0

            def lasts(h: float, needed: float = needed) -> float:
                return 1.5 * h - default_margin(h) - min(1.0, h / 4) - needed

            assert lasts(hb) > 0 >= lasts(hb - 0.5)

    def test_detection_is_the_slowest_broker_and_kraft_wins_over_zookeeper(self) -> None:
        """The largest session timeout of any broker; KRaft's setting when a broker has both."""
        configs = {
            1: {"broker.session.timeout.ms": "6000", "zookeeper.session.timeout.ms": "18000"},
            2: {"broker.session.timeout.ms": "9000", "replica.lag.time.max.ms": "30000"},
        }
        detection = failure_detection(configs)
        assert detection == FailureDetection(9000, 30000, "broker.session.timeout.ms")
        assert failure_detection({1: {}}) is None

    def test_warning_names_the_least_interval_and_the_setting(self) -> None:
        """One line, only when HB is below the rule's."""
        detection = FailureDetection(6000)
        line = heartbeat_warning(1.0, detection)
        assert line is not None and "\n" not in line
        assert "below 8s" in line and "broker.session.timeout.ms=6000" in line
        assert heartbeat_warning(8.0, detection) is None


class StallingLog(MemoryLog):
    """Appends land, but while ``stalled`` the writer is told they were not acknowledged (as
    when the producer's wait times out and the record is delivered when the stall ends)."""

    stalled = False

    def append(self, partition: int, key: bytes, value: bytes, timeout_s: float) -> Appended:
        appended = super().append(partition, key, value, timeout_s)
        if self.stalled:
            raise LogError("not acknowledged within 1.0s")
        return appended


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_heartbeat_whose_append_timed_out_counts_from_when_it_was_sent() -> None:
    """A heartbeat sent during a stall and folded valid after it extends the lease from its
    send time (it used to be ignored, so every lease ran out in a stall longer than HB/2)."""
    topic = MemoryTopic(1, lambda: 0)
    log = StallingLog(topic)
    config = RunConfig("h:h", Mode.ALO, ("orders",), "g", "a", heartbeat_interval=8.0)
    reader = LogReader(log, RationalizerConfig(config.heartbeat_interval_ms, 1))
    clock = Clock()
    co = Coordinator(config, log, reader, Observer(), clock=clock, wall=lambda: 0.0)
    verdict, _ = co.send_and_fold(co.claiming(KEY))
    assert isinstance(verdict, ev.ClaimGranted)
    log.stalled = True
    clock.now = 104.0
    co.heartbeat(KEY, 10)  # times out; the record lands all the same
    clock.now = 106.0
    co.heartbeat(KEY, 20)
    log.stalled = False
    clock.now = 110.0
    accepted = [e for e in co.poll() if isinstance(e, ev.HeartbeatAccepted)]
    assert [co.sent_at(e) for e in accepted] == [104.0, 106.0]


def test_a_late_heartbeat_of_another_instance_is_not_credited() -> None:
    """Only this instance's own heartbeats are matched with its timed-out sends."""
    topic = MemoryTopic(1, lambda: 0)
    log = StallingLog(topic)
    config = RunConfig("h:h", Mode.ALO, ("orders",), "g", "a", heartbeat_interval=8.0)
    other = RunConfig("h:h", Mode.ALO, ("orders",), "g", "a", heartbeat_interval=8.0)
    reader = LogReader(log, RationalizerConfig(config.heartbeat_interval_ms, 1))
    co = Coordinator(config, log, reader, Observer(), clock=Clock(), wall=lambda: 0.0)
    co_other = Coordinator(other, MemoryLog(topic), reader, Observer(), wall=lambda: 0.0)
    co.send_and_fold(co.claiming(KEY))
    log.stalled = True
    co.heartbeat(KEY, 10)
    log.stalled = False
    co_other.send(co_other.heartbeat_msg(KEY, 30), 1.0)  # a takeover by a new instance
    events = [e for e in co.poll() if isinstance(e, ev.HeartbeatAccepted)]
    late, takeover = events
    assert co.sent_at(takeover) is None
    assert co.sent_at(late) == 100.0
