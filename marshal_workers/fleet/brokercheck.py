"""Whether the heartbeat interval outlasts the cluster's failure detection.

When a broker dies, every ``acks=all`` write to a partition it leads or follows stalls until
the cluster notices: the controller fences the broker after ``broker.session.timeout.ms``
(KRaft; ``zookeeper.session.timeout.ms`` on ZooKeeper clusters), elects new leaders and drops
the broker from the in-sync sets; a leader also drops a silent follower by itself after
``replica.lag.time.max.ms``. Clients then refresh their metadata and retry. So a coordination
write can stall for about

    D = min(detection, replica lag) for a dead follower, detection + re-election for a dead
        leader, where re-election and the clients' retry take about ELECTION_SLACK_MS;

D = detection + ELECTION_SLACK_MS bounds both. On a cluster of combined nodes
(``process.roles=broker,controller``) the dead node may also be the quorum's leader: the
detection then starts only once the other voters have elected a new one (QUORUM_FAILOVER's
timeouts), and D grows by that failover. Only a quorum of three voters or more fails over: one
or two voters have no majority left once one dies, and the cluster stops, which no lease rides
out. The voters are counted from the quorum's configuration (``controller.quorum.voters``);
a quorum without a static voter list (``controller.quorum.bootstrap.servers``) counts the
combined brokers that answered. Heartbeats go out every HB/2, so the last one
confirmed before the stall was sent at most HB/2 before it began, and its lease runs until
2*HB - margin after that send, that is at least 1.5*HB - margin after the stall began. A
heartbeat sent during the stall lands when the stall ends (the producer keeps retrying it) and
counts from when it was sent, although its append timed out (the member core credits it:
`core.keeping.Keeping.late_heartbeat_landed`), so the
lease is extended about one turn of the supervisor's loop (LOOP_TURN_MS) after the stall. The
supervisor kills a child a kill grace, min(1 s, HB/4), before its lease ends. No lease runs out
when

    1.5*HB - margin - kill grace > D + LOOP_TURN_MS

with margin = HB/10 (capped at 2 s): the rule is written once, in `protocol.leases`.
`min_heartbeat_s` gives the least such HB (a multiple of 0.5 s); `heartbeat_warning` the line
`marshal-run` and `marshal-admin init` print when the configured HB is below it. Pure but for
`read_failure_detection`, which asks the brokers (describe_configs). When no broker answers
(the principal lacks DescribeConfigs on the cluster), `cluster_heartbeat_check` says once that
the check could not run and what permission it lacks, instead of staying silent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException

# confluent_kafka.admin re-exports these without an __all__, which mypy --strict refuses.
from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

from marshal_workers.protocol import leases

KRAFT_SESSION: Final = "broker.session.timeout.ms"
ZK_SESSION: Final = "zookeeper.session.timeout.ms"
REPLICA_LAG: Final = "replica.lag.time.max.ms"
ROLES: Final = "process.roles"
# A combined node (broker and controller) may lead the KRaft quorum: the voters left notice
# its silence after the fetch timeout, elect within the election timeout, and may need one
# back-off after a split vote (two voters left). Kafka's defaults where a node does not say.
# Counted where the quorum has three voters or more (FAILOVER_VOTERS): with one or two, the
# death of one leaves no majority and stops the cluster.
QUORUM_FAILOVER: Final[Mapping[str, int]] = {
    "controller.quorum.fetch.timeout.ms": 2_000,
    "controller.quorum.election.timeout.ms": 1_000,
    "controller.quorum.election.backoff.max.ms": 1_000,
}
VOTERS: Final = "controller.quorum.voters"
FAILOVER_VOTERS: Final = 3  # the fewest voters that still have a majority after one dies
ELECTION_SLACK_MS: Final = 3_000  # re-election, metadata propagation, the clients' retries
LOOP_TURN_MS: Final = 1_000  # from a heartbeat landing to its lease extension
KAFKA_DEFAULT_SESSION_MS: Final = 9_000  # broker.session.timeout.ms's default (KRaft)


@dataclass(frozen=True, slots=True)
class FailureDetection:
    """How long the cluster takes to notice a dead broker (the largest value of any broker)."""

    session_timeout_ms: int
    replica_lag_ms: int | None = None
    source: str = KRAFT_SESSION
    controller_failover_ms: int = 0  # a combined node may lead the quorum (0: none is)

    @property
    def stall_ms(self) -> int:
        """How long a coordination write may stall when one broker dies (see the module doc)."""
        return self.session_timeout_ms + self.controller_failover_ms + ELECTION_SLACK_MS


def min_heartbeat_s(detection: FailureDetection) -> float:
    """The least heartbeat interval (seconds, a multiple of 0.5) whose leases outlast a stall."""
    return leases.min_heartbeat_s((detection.stall_ms + LOOP_TURN_MS) / 1000)


def heartbeat_warning(heartbeat_interval_s: float, detection: FailureDetection) -> str | None:
    """One line if ``heartbeat_interval_s`` is too small to ride out one broker failure."""
    least = min_heartbeat_s(detection)
    if heartbeat_interval_s >= least:
        return None
    return (
        f"heartbeat interval {heartbeat_interval_s:g}s is below {least:g}s: a broker failure "
        f"stalls coordination writes for up to about {detection.stall_ms / 1000:g}s "
        f"({detection.source}={detection.session_timeout_ms}"
        f"{' plus a controller failover' if detection.controller_failover_ms else ''} "
        "plus re-election), longer than "
        "the leases last, so every claim would be lost (see docs/operating.md, 'Heartbeat "
        "interval and broker failures')"
    )


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _voter_count(voters: str | None) -> int:
    """How many voters ``controller.quorum.voters`` lists (``id@host:port,...``); 0 if unset."""
    return len([v for v in (voters or "").split(",") if v.strip()])


def failure_detection(configs: Mapping[int, Mapping[str, str]]) -> FailureDetection | None:
    """The cluster's failure detection from each broker's config (None if no broker said)."""
    sessions: list[tuple[int, str]] = []
    lags: list[int] = []
    failovers = [0]
    voters = 0  # the quorum's configured voters (the most any broker lists)
    for config in configs.values():
        if "controller" in (config.get(ROLES) or "").split(","):
            failovers.append(
                sum(_int(config.get(name)) or default for name, default in QUORUM_FAILOVER.items())
            )
        voters = max(voters, _voter_count(config.get(VOTERS)))
        kraft, zk = _int(config.get(KRAFT_SESSION)), _int(config.get(ZK_SESSION))
        if kraft is not None:
            sessions.append((kraft, KRAFT_SESSION))
        elif zk is not None:
            sessions.append((zk, ZK_SESSION))
        lag = _int(config.get(REPLICA_LAG))
        if lag is not None:
            lags.append(lag)
    if not sessions:
        return None
    session, source = max(sessions)
    # no static voter list: the combined brokers seen (controller-only voters do not answer)
    voters = voters or len(failovers) - 1
    failover = max(failovers) if voters >= FAILOVER_VOTERS else 0
    return FailureDetection(session, max(lags) if lags else None, source, failover)


def read_failure_detection(
    admin: Any, timeout_s: float, topic: str | None = None
) -> FailureDetection | str:
    """Ask every broker for its failure-detection settings; a broker that does not answer is
    left out. If none answers, why (nothing is refused for that): the principal may lack
    DescribeConfigs on the cluster. The brokers are listed by a metadata request for ``topic``
    (the coordination topic): every answer lists them, and one for no topic in particular
    carries every topic of the cluster."""
    try:
        brokers = list(admin.list_topics(topic, timeout=timeout_s).brokers)
    except KafkaException as exc:
        return f"the brokers could not be listed ({exc.args[0].str() if exc.args else exc})"
    configs: dict[int, dict[str, str]] = {}
    refused: list[str] = []
    for broker in brokers:  # librdkafka takes one BROKER resource per call
        resource = ConfigResource(ResourceType.BROKER, str(broker))
        try:
            future = admin.describe_configs([resource], request_timeout=timeout_s)[resource]
            entries = future.result(timeout=timeout_s)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() in _NOT_ALLOWED:
                refused.append(str(err.str()))
            continue
        except (TimeoutError, ValueError):
            continue
        configs[int(broker)] = {
            name: entry.value for name, entry in entries.items() if entry.value is not None
        }
    detection = failure_detection(configs)
    if detection is not None:
        return detection
    if refused:
        return (
            f"the brokers refused to describe their configs ({refused[0]}): this principal "
            "lacks DescribeConfigs on the cluster (marshal-admin acls --role worker)"
        )
    return "no broker described its failure detection"


_NOT_ALLOWED: Final = frozenset(
    {KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED}
)


def cluster_heartbeat_check(
    admin: Any, heartbeat_interval_s: float, timeout_s: float = 10.0, topic: str | None = None
) -> tuple[str, str] | None:
    """What to say once about the heartbeat interval on this cluster: None if it suffices;
    (``heartbeat_interval_too_small``, the warning) if it does not; or
    (``heartbeat_check_skipped``, why) if the brokers' settings could not be read."""
    detection = read_failure_detection(admin, timeout_s, topic)
    if isinstance(detection, str):
        return (
            "heartbeat_check_skipped",
            f"the heartbeat-interval check against the brokers' failure detection could not "
            f"run: {detection}",
        )
    warning = heartbeat_warning(heartbeat_interval_s, detection)
    return None if warning is None else ("heartbeat_interval_too_small", warning)
