"""`marshal-admin init` on a brand-new multi-node cluster waits until the topic it created is
visible everywhere before reading its config, deterministically: a fake
admin client whose first config read fails as a lagging broker's does."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from marshal_workers.common.errors import MarshalError
from marshal_workers.log.topicadmin import await_topic


class RacingAdmin:
    """Metadata shows the topic at once; its config is unknown for the first ``lag`` reads."""

    def __init__(self, lag: int) -> None:
        self.lag = lag
        self.reads = 0

    def list_topics(self, topic: str, timeout: float) -> Any:
        part = SimpleNamespace(replicas=[1, 2, 3])
        meta = SimpleNamespace(error=None, partitions={0: part, 1: part})
        return SimpleNamespace(topics={topic: meta}, brokers={1: 0, 2: 0, 3: 0})

    def describe_configs(self, resources: list[Any], request_timeout: float) -> Any:
        self.reads += 1
        future: Future[Any] = Future()
        if self.reads <= self.lag:
            future.set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
        else:
            entry = SimpleNamespace(value="LogAppendTime")
            future.set_result({"message.timestamp.type": entry})
        return {resources[0]: future}


def test_config_read_that_races_creation_is_retried() -> None:
    """Two "Unknown topic or partition" answers, then the config: init succeeds."""
    admin = RacingAdmin(lag=2)
    info = await_topic(admin, "b:9092", "__marshal", timeout_s=5)  # type: ignore[arg-type]
    assert info.partitions == 2 and info.config["message.timestamp.type"] == "LogAppendTime"
    assert admin.reads == 3


def test_a_topic_that_never_shows_up_still_fails_in_time() -> None:
    """A broker that never learns the topic: one clear error after the timeout."""
    with pytest.raises(MarshalError, match="cannot read the config"):
        await_topic(RacingAdmin(lag=10**9), "b:9092", "__marshal", timeout_s=0.3)  # type: ignore[arg-type]
