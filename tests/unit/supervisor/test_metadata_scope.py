"""What the member and `status` ask the brokers' metadata for: their own topics, never the
cluster's every topic. A cluster of thousands of topics answers a metadata request for all of
them with all of them (each member's start, each partition discovery, each `status --lag`); a
member's cost is to follow its own group."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError

from marshal_workers.admin.status_read import StatusReader
from marshal_workers.clients import roles
from marshal_workers.common.errors import ConfigError
from marshal_workers.fleet import brokercheck
from marshal_workers.supervisor import datatopics


class Metadata:
    """A broker's metadata that answers for the topics asked for (None: every one, as a
    cluster does) and records what was asked."""

    def __init__(self, topics: dict[str, Any]) -> None:
        self.topics = topics
        self.asked: list[str | None] = []

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self.asked.append(topic)
        if topic is None:
            shown = dict(self.topics)
        elif topic in self.topics:
            shown = {topic: self.topics[topic]}
        else:
            error = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
            shown = {topic: SimpleNamespace(error=error, partitions={})}
        return SimpleNamespace(topics=shown, brokers={1: None, 2: None})


def topic_meta(partitions: int, error: Any = None) -> Any:
    return SimpleNamespace(
        error=error, partitions={p: SimpleNamespace(leader=1) for p in range(partitions)}
    )


CLUSTER = {
    "orders": topic_meta(3),
    "refunds": topic_meta(2),
    **{f"other{i}": topic_meta(1) for i in range(50)},
}


def data_topics(monkeypatch: pytest.MonkeyPatch, topics: list[str]) -> tuple[Any, Metadata]:
    broker = Metadata(CLUSTER)
    monkeypatch.setattr(roles, "Consumer", lambda config: broker)
    return datatopics.DataTopics("k1:9092", "g", topics), broker


def test_the_data_topics_are_asked_for_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    topics, broker = data_topics(monkeypatch, ["orders", "refunds"])
    keys = topics.partitions()
    assert broker.asked == ["orders", "refunds"]
    assert [(k.topic, k.partition) for k in keys] == [
        ("orders", 0), ("orders", 1), ("orders", 2), ("refunds", 0), ("refunds", 1)
    ]  # fmt: skip


def test_a_missing_data_topic_is_still_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    topics, _ = data_topics(monkeypatch, ["ordres"])
    with pytest.raises(ConfigError, match=r"topic 'ordres' does not exist on k1:9092 \(create it"):
        topics.partitions()


def test_a_data_topic_the_principal_may_not_describe_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Asked for by name, a topic the principal lacks Describe on answers with an authorization
    error (asked for among all, it was left out, and taken for missing)."""
    refused = topic_meta(0, KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    broker = Metadata({"orders": refused})
    monkeypatch.setattr(roles, "Consumer", lambda config: broker)
    topics = datatopics.DataTopics("k1:9092", "g", ["orders"])
    refusal = (
        r"not authorized to describe topic 'orders' on k1:9092, or it does not exist "
        r"\(see marshal-admin acls"
    )
    with pytest.raises(ConfigError, match=refusal):
        topics.partitions()


def test_the_failure_detection_check_asks_for_the_coordination_topic_only() -> None:
    broker = Metadata(CLUSTER)
    asked_configs: list[Any] = []

    def describe_configs(resources: list[Any], request_timeout: float) -> Any:
        asked_configs.extend(resources)
        raise brokercheck.KafkaException(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED))

    admin = SimpleNamespace(list_topics=broker.list_topics, describe_configs=describe_configs)
    brokercheck.read_failure_detection(admin, 1.0, topic="__marshal")
    assert broker.asked == ["__marshal"]
    assert sorted(r.name for r in asked_configs) == ["1", "2"]  # every broker still asked


def test_status_reads_the_ends_of_its_groups_topics_only() -> None:
    broker = Metadata(CLUSTER)
    asked: list[Any] = []

    def list_offsets(specs: dict[Any, Any], request_timeout: float) -> dict[Any, Any]:
        asked.extend(specs)
        return {}

    reader = SimpleNamespace(
        admin=SimpleNamespace(list_topics=broker.list_topics, list_offsets=list_offsets),
        timeout_s=1.0,
    )
    problems: list[str] = []
    StatusReader._ends(reader, ["refunds", "orders", "gone"], problems)  # type: ignore[arg-type]
    assert broker.asked == ["gone", "orders", "refunds"]
    assert sorted((tp.topic, tp.partition) for tp in asked) == [
        ("orders", 0), ("orders", 1), ("orders", 2), ("refunds", 0), ("refunds", 1)
    ]  # fmt: skip
    assert problems == ["lag of gone: Broker: Unknown topic or partition"]
