"""The audit reads the coordination topic to one moment: every partition's end asked once, and
Spark's Kafka source told those offsets (with ``latest`` each job resolved the end again, and
the partitions' reads ended seconds apart; a review found 90 false zombie_work from it)."""

from __future__ import annotations

import json
from typing import Any

from marshal_workers.audit import sources


class RecordingReader:
    """Spark's ``spark.read`` as far as `sources.kafka_frame` uses it: the options it is given."""

    def __init__(self) -> None:
        self.given: dict[str, str] = {}

    def format(self, _: str) -> RecordingReader:
        return self

    def options(self, **given: str) -> RecordingReader:
        self.given.update(given)
        return self

    def option(self, key: str, value: str) -> RecordingReader:
        self.given[key] = value
        return self

    def load(self) -> str:
        return "frame"


class FakeSpark:
    def __init__(self) -> None:
        self.read = RecordingReader()


def read_options(ends: dict[int, int] | None) -> dict[str, str]:
    spark: Any = FakeSpark()
    assert sources.kafka_frame(spark, "b:9092", "__marshal", {}, ends) == "frame"
    given: dict[str, str] = spark.read.given
    return given


def test_the_coordination_topic_is_read_to_the_ends_asked_once() -> None:
    options = read_options({0: 17, 1: 0, 2: 4})
    assert options["startingOffsets"] == "earliest"
    assert json.loads(options["endingOffsets"]) == {"__marshal": {"0": 17, "1": 0, "2": 4}}


def test_without_ends_a_topic_is_read_to_its_end_when_read() -> None:
    """(The ledger topic: rows are checked against the claims, whenever each was written.)"""
    assert read_options(None)["endingOffsets"] == "latest"
