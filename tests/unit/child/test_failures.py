"""Error policies without a broker: retries and backoff, the poison rate, verdicts, dead-letter
headers, and the settings that configure them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from marshal_workers.child.deadletters import PREFIX, dead_letter_headers
from marshal_workers.child.policy import (
    Failure,
    FailurePolicy,
    OnFailure,
    PoisonRate,
    attempt,
    decide,
    dlq_topic_for,
)
from marshal_workers.common.errors import ConfigError
from marshal_workers.config.settings import resolve
from marshal_workers.handler import Record
from marshal_workers.handler.errors import StopProcessing
from marshal_workers.ipc.messages import CAUSE_FATAL, CAUSE_POISON_RATE, CAUSE_POLICY


class Flaky:
    """A call that raises ``ValueError`` on its first ``failures`` calls, then returns."""

    def __init__(self, failures: int, error: type[Exception] = ValueError) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"call {self.calls}")


class Waits:
    """Records the waits asked for; answers ``answer`` (False cuts the retries short)."""

    def __init__(self, answer: bool = True) -> None:
        self.answer = answer
        self.asked: list[tuple[float, int]] = []

    def __call__(self, seconds: float, error: Exception, attempt_no: int) -> bool:
        self.asked.append((seconds, attempt_no))
        return self.answer


def run(
    call: Callable[[], object],
    policy: FailurePolicy,
    waits: Waits,
    checks: list[int] | None = None,
) -> Failure | None:
    seen = checks if checks is not None else []
    return attempt(call, policy, before_attempt=lambda: seen.append(1), wait=waits)


class TestBackoff:
    def test_doubles_from_the_initial_wait(self) -> None:
        """The waits after attempts 1, 2, 3 are b, 2b, 4b."""
        policy = FailurePolicy(retry_backoff_s=0.25)
        assert [policy.backoff(n) for n in (1, 2, 3)] == [0.25, 0.5, 1.0]

    def test_is_capped(self) -> None:
        """No wait is longer than the cap (30 s by default)."""
        policy = FailurePolicy(retry_backoff_s=1.0)
        assert policy.backoff(6) == 30.0
        assert policy.backoff(60) == 30.0


class TestAttempt:
    def test_success_first_time_asks_no_wait(self) -> None:
        """A call that returns is made once, with no wait."""
        call, waits = Flaky(0), Waits()
        assert run(call, FailurePolicy(retries=3), waits) is None
        assert call.calls == 1
        assert waits.asked == []

    def test_success_on_a_retry(self) -> None:
        """Two failures then success: three calls, the two backoffs between them."""
        call, waits = Flaky(2), Waits()
        assert run(call, FailurePolicy(retries=3, retry_backoff_s=0.1), waits) is None
        assert call.calls == 3
        assert waits.asked == [(0.1, 1), (0.2, 2)]

    def test_exhausted_gives_the_last_error_and_the_count(self) -> None:
        """retries=2: three calls in all, then the last error with attempts=3."""
        call, waits = Flaky(10), Waits()
        failure = run(call, FailurePolicy(retries=2), waits)
        assert failure is not None
        assert (failure.attempts, str(failure.error)) == (3, "call 3")
        assert call.calls == 3
        assert len(waits.asked) == 2

    def test_no_retries(self) -> None:
        """retries=0: one call, no wait."""
        call, waits = Flaky(10), Waits()
        failure = run(call, FailurePolicy(retries=0), waits)
        assert failure is not None and failure.attempts == 1
        assert waits.asked == []

    def test_the_check_runs_before_every_attempt(self) -> None:
        """before_attempt runs once per call."""
        checks: list[int] = []
        call = Flaky(2)
        run(call, FailurePolicy(retries=5), Waits(), checks)
        assert len(checks) == call.calls == 3

    def test_a_raising_check_abandons_the_unit(self) -> None:
        """A check that raises (the lease ended) propagates; no further call is made."""
        call = Flaky(10)

        def lease_gone() -> None:
            if call.calls >= 1:
                raise TimeoutError("lease")

        with pytest.raises(TimeoutError):
            attempt(call, FailurePolicy(retries=5), before_attempt=lease_gone, wait=Waits())
        assert call.calls == 1

    def test_a_refused_wait_cuts_the_retries_short(self) -> None:
        """wait returning False ends the retries after the attempt that failed."""
        call = Flaky(10)
        failure = run(call, FailurePolicy(retries=5), Waits(answer=False))
        assert failure is not None and failure.attempts == 1
        assert call.calls == 1

    def test_stop_processing_is_not_retried(self) -> None:
        """StopProcessing ends the attempts at once, and the failure is fatal."""
        call, waits = Flaky(10, StopProcessing), Waits()
        failure = run(call, FailurePolicy(retries=5), waits)
        assert failure is not None and failure.fatal
        assert call.calls == 1 and waits.asked == []


class TestPoisonRate:
    def test_admits_up_to_the_limit_within_a_minute(self) -> None:
        """With a limit of 3, the fourth within 60 s is refused (and not counted)."""
        rate = PoisonRate(3)
        assert [rate.admit(t) for t in (0.0, 1.0, 2.0, 3.0, 4.0)] == [True] * 3 + [False] * 2

    def test_the_window_slides(self) -> None:
        """Once the oldest is 60 s old, there is room again."""
        rate = PoisonRate(2)
        assert rate.admit(0.0) and rate.admit(30.0)
        assert not rate.admit(59.9)
        assert rate.admit(60.0)
        assert not rate.admit(61.0)
        assert rate.admit(90.0)

    def test_a_rate_started_with_earlier_units_counts_them(self) -> None:
        """A restarted child gets the partition's units of the last minute, as
        ages (seconds before its start), and counts them: room only for what is left."""
        rate = PoisonRate(3, ages=(50.0, 10.0), now=100.0)
        assert rate.admit(100.0)
        assert not rate.admit(100.5)
        assert rate.admit(110.0)  # the unit 50 s before the start left the window at 110
        assert not rate.admit(111.0)

    def test_zero_means_no_limit(self) -> None:
        """max_poison_rate 0 admits everything."""
        rate = PoisonRate(0)
        assert all(rate.admit(0.0) for _ in range(1000))


def failed(error: Exception | None = None) -> Failure:
    return Failure(error or ValueError("bad record"), 4)


class TestDecide:
    @pytest.mark.parametrize("action", [OnFailure.DLQ, OnFailure.SKIP])
    def test_dlq_and_skip_apply_within_the_rate(self, action: OnFailure) -> None:
        """dlq and skip are the verdict while the poison rate allows."""
        verdict = decide(FailurePolicy(on_failure=action), failed(), PoisonRate(5), 0.0)
        assert verdict.action is action

    @pytest.mark.parametrize("action", [OnFailure.DLQ, OnFailure.SKIP])
    def test_beyond_the_rate_is_stop(self, action: OnFailure) -> None:
        """One poison record more than max_poison_rate per minute turns into stop."""
        policy, rate = FailurePolicy(on_failure=action), PoisonRate(2)
        verdicts = [decide(policy, failed(), rate, float(t)) for t in range(3)]
        assert [v.action for v in verdicts] == [action, action, OnFailure.STOP]
        assert verdicts[-1].cause == CAUSE_POISON_RATE
        assert "systematically wrong" in verdicts[-1].detail

    def test_stop_is_stop_and_does_not_count_as_poison(self) -> None:
        """on_failure stop gives stop, and the rate is not consumed."""
        rate = PoisonRate(1)
        verdict = decide(FailurePolicy(on_failure=OnFailure.STOP), failed(), rate, 0.0)
        assert (verdict.action, verdict.cause) == (OnFailure.STOP, CAUSE_POLICY)
        assert rate.admit(0.0)

    def test_stop_processing_overrides_dlq(self) -> None:
        """A StopProcessing failure is stop whatever the policy."""
        policy = FailurePolicy(on_failure=OnFailure.DLQ)
        verdict = decide(policy, failed(StopProcessing("fenced")), PoisonRate(5), 0.0)
        assert (verdict.action, verdict.cause) == (OnFailure.STOP, CAUSE_FATAL)


class CustomError(Exception):
    pass


def raised(error: Exception) -> Exception:
    """``error`` with a traceback (raised and caught)."""
    try:
        raise error
    except Exception as exc:
        return exc


class TestDeadLetterHeaders:
    def test_carry_the_error_the_source_and_the_claim(self) -> None:
        """The record's own headers come first, then every marshal.dlq.* header."""
        record = Record("orders", 3, 17, b"k", b"v", 1_700_000_000_000, (("trace", b"abc"),))
        failure = Failure(raised(CustomError("no such customer")), 4)
        headers = dead_letter_headers(
            record, failure, group_id="g", client_id="c1", fencing_token=42
        )
        assert headers[0] == ("trace", b"abc")
        ours = {k.removeprefix(PREFIX): v for k, v in headers[1:]}
        assert ours["error.type"] == b"tests.unit.child.test_failures.CustomError"
        assert ours["error.message"] == b"no such customer"
        traceback = ours["error.traceback"]
        assert traceback is not None and b"CustomError: no such customer" in traceback
        assert ours["source.topic"] == b"orders"
        assert (ours["source.partition"], ours["source.offset"]) == (b"3", b"17")
        assert ours["source.timestamp"] == b"1700000000000"
        assert (ours["group"], ours["client_id"]) == (b"g", b"c1")
        assert (ours["fencing_token"], ours["attempts"]) == (b"42", b"4")
        assert "batch" not in ours

    def test_builtin_errors_unqualified_unknown_timestamp_null_batch_range(self) -> None:
        """A builtin error has its bare name; no timestamp is a null value; a batch its range."""
        record = Record("t", 0, 5, None, None, None, ())
        headers = dict(
            dead_letter_headers(
                record,
                Failure(ValueError("x"), 1),
                group_id="g",
                client_id="c",
                fencing_token=1,
                batch=(5, 9),
            )
        )
        assert headers[PREFIX + "error.type"] == b"ValueError"
        assert headers[PREFIX + "source.timestamp"] is None
        assert headers[PREFIX + "batch"] == b"5-9"

    def test_long_texts_are_cut(self) -> None:
        """A huge error message is truncated, so the dead letter stays producible."""
        record = Record("t", 0, 5, None, None, None, ())
        failure = Failure(ValueError("x" * 100_000), 1)
        headers = dict(
            dead_letter_headers(record, failure, group_id="g", client_id="c", fencing_token=1)
        )
        message = headers[PREFIX + "error.message"]
        assert message is not None and len(message) <= 4_000
        assert message.endswith(b"[truncated]")


class TestSettings:
    def test_defaults(self) -> None:
        """Defaults: 3 retries from 0.5 s, stop, <topic>.dlq, 60 poison records a minute."""
        values = resolve({}, None, environ={}).values
        assert values["retries"] == 3
        assert values["retry_backoff"] == 0.5
        assert values["on_failure"] == "stop"
        assert values["dlq_topic"] == "{topic}.dlq"
        assert values["max_poison_rate"] == 60

    def test_from_flags_and_environment(self) -> None:
        """Each error setting comes from a flag or a MARSHAL_* variable."""
        env = {"MARSHAL_ON_FAILURE": "dlq", "MARSHAL_RETRIES": "0"}
        flags = {"dlq_topic": "dead.{topic}", "max_poison_rate": "0", "retry_backoff": "2"}
        values = resolve(flags, None, environ=env).values
        assert (values["on_failure"], values["retries"]) == ("dlq", 0)
        assert (values["dlq_topic"], values["max_poison_rate"]) == ("dead.{topic}", 0)
        assert values["retry_backoff"] == 2.0

    @pytest.mark.parametrize(
        ("name", "value"),
        [
            ("retries", "-1"),
            ("retry_backoff", "0"),
            ("on_failure", "ignore"),
            ("dlq_topic", "bad/topic"),
            ("dlq_topic", ""),
            ("max_poison_rate", "-5"),
        ],
    )
    def test_bad_values_are_refused_naming_the_setting(self, name: str, value: str) -> None:
        """A bad error setting is a ConfigError that names it."""
        with pytest.raises(ConfigError, match=name):
            resolve({name: value}, None, environ={})

    def test_dlq_topic_template(self) -> None:
        """{topic} in the dead-letter topic stands for the source topic."""
        assert dlq_topic_for("{topic}.dlq", "orders") == "orders.dlq"
        assert dlq_topic_for("all-dead-letters", "orders") == "all-dead-letters"
