"""The coordination reader's statistics callback never raises into a poll."""

from __future__ import annotations

import json
from types import SimpleNamespace

from marshal_workers.log.kafkalog import KafkaLog


def test_statistics_it_cannot_read_are_ignored_not_raised() -> None:
    """librdkafka's statistics arrive through the callback during ``consume``: what the callback
    raises, confluent-kafka raises from ``consume`` after dropping the records of that call,
    and the reader thread, which expects a `LogError`, would stop. Text it cannot read keeps
    the figures it had."""
    log = SimpleNamespace(_received={"reader": (10, 5)})
    for text in ("not json", "[]", json.dumps({"name": "reader", "rx_bytes": "many"}), "null"):
        KafkaLog._on_stats(log, text)  # type: ignore[arg-type]
    assert log._received == {"reader": (10, 5)}
    KafkaLog._on_stats(log, json.dumps({"name": "reader", "rx_bytes": 20, "rxmsg_bytes": 8}))  # type: ignore[arg-type]
    assert log._received == {"reader": (20, 8)}
