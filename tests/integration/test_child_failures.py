"""Error policies in a real child on a real broker; the test plays the supervisor.

A poison record (a handler that raises on chosen offsets, `failure_handlers`) is retried, then
dead-lettered, skipped, or stops the child, in ALO and in AMO. The dead-letter topic is read
back to check the record and its headers; the ledger shows what the handler completed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from confluent_kafka import Message

from marshal_workers.child.main import EXIT_HANDLER_FAILED
from marshal_workers.ipc.messages import (
    CAUSE_DLQ_FAILED,
    CAUSE_POISON_RATE,
    CAUSE_POLICY,
    GrantRequest,
    HandlerFailed,
    Progress,
    Started,
    Stop,
    Stopped,
)
from marshal_workers.protocol.modes import Mode
from tests.integration import failure_handlers
from tests.integration.childrun import (
    PARTITION,
    Supervised,
    grant_all,
    headers_of,
    make_spec,
    offsets,
    produce,
    read_topic,
)

pytestmark = pytest.mark.kafka

HANDLER = "tests.integration.failure_handlers:handle"
COUNT = 8  # records produced to the child's partition
FAST = {"retries": 2, "retry_backoff_s": 0.05}  # retries that do not slow the tests down


# ---------------------------------------------------------------- fixtures and helpers


@pytest.fixture
def poison(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Make offsets poison for the children started afterwards (``times``: only at first)."""

    def set_poison(*at: int, times: int | None = None) -> None:
        monkeypatch.setenv(failure_handlers.POISON_ENV, ",".join(map(str, at)))
        if times is not None:
            monkeypatch.setenv(failure_handlers.TIMES_ENV, str(times))

    return set_poison


spec_for = partial(make_spec, handler=HANDLER, **FAST)  # fast retries; keywords override


def run_alo_to_end(child: Supervised) -> Stopped:
    """Wait for Progress to reach COUNT, then Stop; the Stopped message (exit 0 checked)."""
    while child.expect(Progress).next_offset < COUNT:
        pass
    child.handle.send(Stop())
    stopped = child.expect(Stopped)
    assert child.wait_exit() == 0
    return stopped


def granted_end(child: Supervised) -> int:
    """The end of the last batch asked for (AMO: granted by `grant_all`)."""
    requests = child.of(GrantRequest)
    return requests[-1].end if requests else 0


def check_dead_letter(
    msg: Message, topic: str, offset: int, attempts: int
) -> dict[str, str | None]:
    """A dead letter of record ``offset`` of the test partition, with every header right."""
    assert msg.value() == f"{PARTITION}:{offset}".encode()
    h = headers_of(msg)
    assert h["error.type"] == "tests.integration.failure_handlers.Poisoned"
    assert h["error.message"] is not None and "poison at offset" in h["error.message"]
    assert h["error.traceback"] is not None
    assert "Traceback" in h["error.traceback"] and "Poisoned" in h["error.traceback"]
    assert (h["source.topic"], h["source.partition"]) == (topic, str(PARTITION))
    assert h["source.offset"] == str(offset)
    assert h["source.timestamp"] is not None and int(h["source.timestamp"]) > 1_600_000_000_000
    assert (h["group"], h["client_id"], h["fencing_token"]) == ("child-test", "c1", "42")
    assert h["attempts"] == str(attempts)
    return h


# ---------------------------------------------------------------- at-least-once


class TestAtLeastOnce:
    def test_dlq_writes_the_poison_record_with_its_headers_and_goes_on(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        poison: Callable[..., None],
        spawn: Callable[..., Supervised],
    ) -> None:
        """Poison at 3, three attempts: the DLQ holds record 3 with every header; the rest is
        handled once and Progress passes 3."""
        poison(3)
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        child = spawn(spec_for(kafka_bootstrap, topic, on_failure="dlq"))
        assert run_alo_to_end(child).next_offset == COUNT
        assert not child.of(HandlerFailed)
        assert offsets(ledger_dir) == [o for o in range(COUNT) if o != 3]
        (letter,) = read_topic(kafka_bootstrap, f"{topic}.dlq", 1)
        check_dead_letter(letter, topic, 3, attempts=3)

    def test_skip_goes_on_without_a_dead_letter(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        poison: Callable[..., None],
        spawn: Callable[..., Supervised],
    ) -> None:
        """Poison at 3 with skip: Progress passes it, everything else handled, no dead letter."""
        poison(3)
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        child = spawn(spec_for(kafka_bootstrap, topic, on_failure="skip"))
        assert run_alo_to_end(child).next_offset == COUNT
        assert not child.of(HandlerFailed)
        assert offsets(ledger_dir) == [o for o in range(COUNT) if o != 3]
        assert read_topic(kafka_bootstrap, f"{topic}.dlq", 0, timeout=1.0) == []

    def test_stop_reports_after_the_retries_and_commits_nothing_of_it(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        poison: Callable[..., None],
        spawn: Callable[..., Supervised],
    ) -> None:
        """Poison at 3 with stop: three attempts, HandlerFailed, exit 4, Progress stops at 3."""
        poison(3)
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        child = spawn(spec_for(kafka_bootstrap, topic, on_failure="stop"))
        failed = child.expect(HandlerFailed)
        assert child.wait_exit() == EXIT_HANDLER_FAILED
        assert (failed.offset, failed.attempts, failed.cause) == (3, 3, CAUSE_POLICY)
        assert failed.handled == 3
        assert "Poisoned" in failed.error
        assert max(p.next_offset for p in child.of(Progress)) == 3
        assert offsets(ledger_dir) == [0, 1, 2]

    def test_a_failed_dead_letter_stops_before_the_record(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        poison: Callable[..., None],
        spawn: Callable[..., Supervised],
    ) -> None:
        """dlq to a topic that does not exist: the record is not counted as handled; the child
        stops (cause dlq_failed) with Progress before it."""
        poison(3)
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        spec = spec_for(kafka_bootstrap, topic, on_failure="dlq", dlq_topic="{topic}.missing")
        child = spawn(spec)
        failed = child.expect(HandlerFailed)
        assert child.wait_exit() == EXIT_HANDLER_FAILED
        assert (failed.offset, failed.cause) == (3, CAUSE_DLQ_FAILED)
        assert max(p.next_offset for p in child.of(Progress)) == 3

    def test_too_many_poison_records_a_minute_stop_the_child(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        poison: Callable[..., None],
        spawn: Callable[..., Supervised],
    ) -> None:
        """max_poison_rate 2 with skip: 1 and 3 are skipped, 5 (the third) stops the child."""
        poison(1, 3, 5)
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        spec = spec_for(kafka_bootstrap, topic, on_failure="skip", max_poison_rate=2, retries=0)
        child = spawn(spec)
        failed = child.expect(HandlerFailed)
        assert child.wait_exit() == EXIT_HANDLER_FAILED
        assert (failed.offset, failed.cause) == (5, CAUSE_POISON_RATE)
        assert offsets(ledger_dir) == [0, 2, 4]
        assert max(p.next_offset for p in child.of(Progress)) == 5

    def test_a_transient_failure_is_cured_by_a_retry(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        poison: Callable[..., None],
        spawn: Callable[..., Supervised],
    ) -> None:
        """Offset 2 fails twice, then succeeds on the third attempt: all handled exactly once."""
        poison(2, times=2)
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        child = spawn(spec_for(kafka_bootstrap, topic, on_failure="stop"))
        run_alo_to_end(child)
        assert not child.of(HandlerFailed)
        assert offsets(ledger_dir) == list(range(COUNT))

    def test_stop_during_a_retry_wait_ends_before_the_record(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        poison: Callable[..., None],
        spawn: Callable[..., Supervised],
    ) -> None:
        """A long backoff on 3: Progress(3) comes at its start; Stop ends the child at once
        with Stopped(3), nothing of 3 committed (the next owner retries it)."""
        poison(3)
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        spec = spec_for(kafka_bootstrap, topic, on_failure="dlq", retries=5, retry_backoff_s=30.0)
        child = spawn(spec)
        while child.expect(Progress).next_offset < 3:
            pass
        assert child.of(Progress)[-1].next_offset == 3
        asked = time.monotonic()
        child.handle.send(Stop())
        assert child.expect(Stopped).next_offset == 3
        assert child.wait_exit() == 0
        assert time.monotonic() - asked < 5.0
        assert offsets(ledger_dir) == [0, 1, 2]

    @pytest.mark.parametrize("plugin", ["BatchLedger", "MessageBatchLedger"])
    def test_a_failing_batch_is_dead_lettered_whole(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        poison: Callable[..., None],
        spawn: Callable[..., Supervised],
        plugin: str,
    ) -> None:
        """handle_batch raising on a batch holding 3: every record of that batch is in the DLQ
        (with its batch range), every other record handled, each offset exactly once; the same
        for a plugin that takes the consumer's messages (its dead letters are records)."""
        poison(3)
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        handler = f"tests.integration.failure_handlers:{plugin}"
        child = spawn(spec_for(kafka_bootstrap, topic, on_failure="dlq", handler=handler))
        run_alo_to_end(child)
        handled = offsets(ledger_dir)
        letters = read_topic(kafka_bootstrap, f"{topic}.dlq", 1)
        dead = [int(headers_of(m)["source.offset"] or -1) for m in letters]
        assert 3 in dead
        assert sorted(handled + dead) == list(range(COUNT))
        ranges = {headers_of(m).get("batch") for m in letters}
        if len(dead) > 1:
            assert ranges == {f"{min(dead)}-{max(dead)}"}
        assert dead == list(range(min(dead), max(dead) + 1))


# ---------------------------------------------------------------- at-most-once


class TestAtMostOnce:
    @pytest.mark.parametrize("policy", ["dlq", "skip"])
    def test_dlq_and_skip_go_on_with_the_granted_batch(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        poison: Callable[..., None],
        spawn: Callable[..., Supervised],
        policy: str,
    ) -> None:
        """AMO, poison at 3: dead-lettered (or skipped), the rest of the batch and the next
        batches handled once; only granted records handled."""
        poison(3)
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        child = spawn(spec_for(kafka_bootstrap, topic, mode=Mode.AMO, on_failure=policy))
        grant_all(child, lambda: len(offsets(ledger_dir)) >= COUNT - 1)
        child.handle.send(Stop())
        grant_all(child, lambda: bool(child.of(Stopped)))
        assert child.wait_exit() == 0
        assert not child.of(HandlerFailed)
        assert offsets(ledger_dir) == [o for o in range(COUNT) if o != 3]
        letters = read_topic(kafka_bootstrap, f"{topic}.dlq", 1 if policy == "dlq" else 0, 2.0)
        if policy == "dlq":
            (letter,) = letters
            check_dead_letter(letter, topic, 3, attempts=3)
        else:
            assert letters == []

    def test_stop_loses_the_rest_of_the_granted_batch(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        poison: Callable[..., None],
        spawn: Callable[..., Supervised],
    ) -> None:
        """AMO, poison at 3 with stop: HandlerFailed, exit 4; nothing from 3 on is handled
        (the batch was granted: at most once)."""
        poison(3)
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        child = spawn(spec_for(kafka_bootstrap, topic, mode=Mode.AMO, on_failure="stop"))
        grant_all(child, lambda: bool(child.of(HandlerFailed)))
        assert child.wait_exit() == EXIT_HANDLER_FAILED
        (failed,) = child.of(HandlerFailed)
        assert (failed.offset, failed.cause, failed.attempts) == (3, CAUSE_POLICY, 3)
        assert granted_end(child) > 3
        assert offsets(ledger_dir) == [0, 1, 2]

    @pytest.mark.parametrize("on_failure", ["stop", "skip"])
    def test_a_stop_during_a_retry_wait_keeps_the_retries_and_loses_nothing(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        poison: Callable[..., None],
        spawn: Callable[..., Supervised],
        on_failure: str,
    ) -> None:
        """AMO, 3 fails once, then Stop during its backoff (a TERM, a rebalance, a reload):
        the run in hand was reserved, so a graceful stop finishes it, retries included; 3
        succeeds on its retry and the whole granted run is handled, Stopped at its end. (A
        review: the stop cut the retries short, `stop` then lost 3 and the rest of the run,
        14 records never tried; `skip` lost 3.)"""
        poison(3, times=1)
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        spec = spec_for(
            kafka_bootstrap,
            topic,
            mode=Mode.AMO,
            on_failure=on_failure,
            retries=2,
            retry_backoff_s=1.5,
            batch_size=COUNT,
        )
        child = spawn(spec)
        assert child.expect(Started).position == 0
        grant_all(child, lambda: offsets(ledger_dir) == [0, 1, 2])
        time.sleep(0.3)  # into the first backoff
        child.handle.send(Stop())
        grant_all(child, lambda: bool(child.of(Stopped)))
        assert child.wait_exit() == 0
        assert child.of(HandlerFailed) == []
        end = granted_end(child)
        assert child.of(Stopped)[-1].next_offset == end
        assert offsets(ledger_dir) == list(range(end))

    def test_stop_during_a_retry_wait_settles_the_record_and_finishes_the_batch(
        self,
        kafka_bootstrap: str,
        topic: str,
        ledger_dir: Path,
        poison: Callable[..., None],
        spawn: Callable[..., Supervised],
    ) -> None:
        """AMO, a long backoff on 3, then Stop: the retries are cut short, 3 is dead-lettered
        at once, the rest of the granted batch is handled, Stopped at the granted end."""
        poison(3)
        produce(kafka_bootstrap, topic, {PARTITION: COUNT})
        spec = spec_for(
            kafka_bootstrap,
            topic,
            mode=Mode.AMO,
            on_failure="dlq",
            retries=5,
            retry_backoff_s=30.0,
            batch_size=COUNT,
        )
        child = spawn(spec)
        assert child.expect(Started).position == 0
        grant_all(child, lambda: offsets(ledger_dir) == [0, 1, 2])
        time.sleep(0.3)  # into the first backoff
        asked = time.monotonic()
        child.handle.send(Stop())
        grant_all(child, lambda: bool(child.of(Stopped)))
        assert child.wait_exit() == 0
        assert time.monotonic() - asked < 5.0
        end = granted_end(child)
        assert child.of(Stopped)[-1].next_offset == end
        assert offsets(ledger_dir) == [o for o in range(end) if o != 3]
        (letter,) = read_topic(kafka_bootstrap, f"{topic}.dlq", 1)
        check_dead_letter(letter, topic, 3, attempts=1)
