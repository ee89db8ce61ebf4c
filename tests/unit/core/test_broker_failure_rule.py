"""Riding out one broker failure: the HB rule, and late heartbeats credited."""

from __future__ import annotations

from marshal_workers.childlink.sharedlease import default_margin
from marshal_workers.config.runconfig import RunConfig
from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core.heldclaim import Phase
from marshal_workers.core.member import Member
from marshal_workers.fleet.brokercheck import (
    FailureDetection,
    failure_detection,
    heartbeat_warning,
    min_heartbeat_s,
)
from marshal_workers.log.memlog import MemoryLog, MemoryTopic
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.wire import Appended, ClaimKey, Heartbeat, encode, record_key
from marshal_workers.supervisor.runtime import member_settings

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

    def test_a_combined_node_adds_the_controller_failover(self) -> None:
        """A node that is broker and controller may be the active controller: when it dies the
        other voters first elect a new one (fetch timeout, election timeout, one back-off after
        a split vote), and only that one fences the dead broker a session timeout later. A
        3-node local cluster measured 10.1 s of stall when the victim led the quorum, 5.8-7.3 s
        when it did not (session 6 s)."""
        quorum = {
            "controller.quorum.fetch.timeout.ms": "2000",
            "controller.quorum.election.timeout.ms": "1000",
            "controller.quorum.election.backoff.max.ms": "1000",
        }
        combined = {"broker.session.timeout.ms": "6000", "process.roles": "broker,controller"}
        detection = failure_detection({i: {**combined, **quorum} for i in (1, 2, 3)})
        assert detection is not None
        assert detection.controller_failover_ms == 4000
        assert detection.stall_ms == 6000 + 4000 + 3000
        assert min_heartbeat_s(detection) == 11.0
        # brokers only (the controllers run apart): a broker's death moves no controller
        broker_only = failure_detection({1: {"broker.session.timeout.ms": "6000",
                                             "process.roles": "broker", **quorum}})  # fmt: skip
        assert broker_only is not None and broker_only.stall_ms == 6000 + 3000
        # combined nodes that do not say their quorum timeouts: Kafka's defaults
        bare = failure_detection({1: combined, 2: combined, 3: combined})
        assert bare is not None and bare.controller_failover_ms == 2000 + 1000 + 1000
        # one combined node (marshal-admin kafka's default): no other voter, no failover (its
        # death stops the cluster), so `init` at the default HB of 10 s warns of nothing
        single = failure_detection({1: {**combined, **quorum}})
        assert single is not None and single.controller_failover_ms == 0
        assert heartbeat_warning(10.0, single) is None

    def test_the_failover_counts_from_three_voters_read_from_the_quorum(self) -> None:
        """Two voters have no majority once one dies, as one voter has none: the quorum cannot
        fail over, so no failover is added (the cluster stops). Three voters or more can: the
        count comes from the quorum's configuration (``controller.quorum.voters``), not from
        how many brokers said they are controllers."""
        combined = {"broker.session.timeout.ms": "6000", "process.roles": "broker,controller"}
        two = {**combined, "controller.quorum.voters": "1@h:1,2@h:2"}
        assert failure_detection({1: two, 2: two}).controller_failover_ms == 0  # type: ignore[union-attr]
        three = {**combined, "controller.quorum.voters": "1@h:1,2@h:2,3@h:3"}
        # two combined brokers answered, but the quorum has three voters: it fails over
        detection = failure_detection({1: three, 2: three})
        assert detection is not None and detection.controller_failover_ms == 4000
        # a quorum with no static voter list (bootstrap servers): the combined brokers seen
        dynamic = {**combined, "controller.quorum.bootstrap.servers": "h:1,h:2"}
        assert failure_detection({1: dynamic, 2: dynamic}).controller_failover_ms == 0  # type: ignore[union-attr]
        assert failure_detection({i: dynamic for i in (1, 2, 3)}).controller_failover_ms == 4000  # type: ignore[union-attr]

    def test_warning_names_the_least_interval_and_the_setting(self) -> None:
        """One line, only when HB is below the rule's."""
        detection = FailureDetection(6000)
        line = heartbeat_warning(1.0, detection)
        assert line is not None and "\n" not in line
        assert "below 8s" in line and "broker.session.timeout.ms=6000" in line
        assert heartbeat_warning(8.0, detection) is None


def member(instance: str = "i1") -> tuple[Member, MemoryTopic, list[cmd.Command]]:
    """A member (HB 8 s) on a one-partition memory topic; its commands are kept."""
    topic = MemoryTopic(1, lambda: 0)
    config = RunConfig("h:h", Mode.ALO, ("orders",), "g", "a", heartbeat_interval=8.0,
                       instance_id=instance)  # fmt: skip
    return Member(member_settings(config, 1)), topic, []


def land(topic: MemoryTopic, c: cmd.Command) -> Appended:
    assert isinstance(c, cmd.Append)
    return topic.append(c.partition, record_key(c.message), encode(c.message))


def test_a_heartbeat_whose_append_timed_out_counts_from_when_it_was_sent() -> None:
    """A heartbeat given up on during a stall, folded valid after it, extends the lease from
    its send time (it used to be ignored, so every lease ran out in a stall longer than HB/2)."""
    core, topic, _ = member()
    log = MemoryLog(topic)
    core.feed(inp.RecordsRead(100.0, log.poll(0)))
    out = core.begin(100.0, 0.0, [KEY])
    for c in out:  # the claims land and are acknowledged
        if isinstance(c, cmd.Append):
            core.feed(inp.AppendDone(100.0, c.op, land(topic, c)))
    core.feed(inp.RecordsRead(100.0, log.poll(0)))
    core.feed(inp.StartFound(100.0, KEY, 0))
    stalled = []
    for now in (104.0, 106.0):  # heartbeats sent in the stall: told they failed, yet they land
        beats = [c for c in core.feed(inp.Tick(now, 0.0)) if isinstance(c, cmd.Append)]
        for c in beats:
            land(topic, c)
            core.feed(inp.AppendFailed(now, c.op, "not acknowledged within 1.0s"))
            stalled.append(now)
    assert stalled
    lease_before = core.held[KEY].lease
    out = core.feed(inp.RecordsRead(110.0, log.poll(0)))
    leases = [c.deadline for c in out if isinstance(c, cmd.SetLease) and c.key == KEY]
    margin = default_margin(8.0)
    assert leases and leases[-1] == max(stalled) + 16.0 - margin > lease_before


def test_a_late_heartbeat_of_another_instance_is_not_credited() -> None:
    """Only this instance's own heartbeats are matched with its given-up sends: another
    instance's takeover is not (it takes the claim over instead)."""
    core, topic, _ = member()
    log = MemoryLog(topic)
    core.feed(inp.RecordsRead(100.0, log.poll(0)))
    for c in core.begin(100.0, 0.0, [KEY]):
        if isinstance(c, cmd.Append):
            core.feed(inp.AppendDone(100.0, c.op, land(topic, c)))
    core.feed(inp.RecordsRead(100.0, log.poll(0)))
    core.feed(inp.StartFound(100.0, KEY, 0))
    for c in core.feed(inp.Tick(100.0, 0.0)):  # the start's heartbeat lands: the child starts
        if isinstance(c, cmd.Append):
            core.feed(inp.AppendDone(100.0, c.op, land(topic, c)))
    core.feed(inp.RecordsRead(100.0, log.poll(0)))
    assert core.held[KEY].child
    for c in core.feed(inp.Tick(104.0, 0.0)):
        if isinstance(c, cmd.Append):  # given up on, and it never lands
            core.feed(inp.AppendFailed(104.0, c.op, "not acknowledged within 1.0s"))
    takeover = Heartbeat(0, "i2", "a", "g", "orders", 0, 30)
    topic.append(0, record_key(takeover), encode(takeover))
    out = core.feed(inp.RecordsRead(110.0, log.poll(0)))
    assert not [c for c in out if isinstance(c, cmd.SetLease) and c.deadline > 0]
    assert core.held[KEY].phase is Phase.LOST  # taken over by instance i2: its child is killed
