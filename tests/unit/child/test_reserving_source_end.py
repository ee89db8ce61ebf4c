"""AMO, the reserving step without a broker: when the source of records ends (a lost feed or
consumer, `EXIT_KAFKA` from a fetch) while runs are asked for, each is answered and the
granted ones handed on before the child ends (it ended at once, and a run the log then
granted was never handled: a review, 154 of 3,000 records on a real broker)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from marshal_workers.child.reserving import Reserving
from marshal_workers.ipc.exits import EXIT_KAFKA, EXIT_LEASE_EXPIRED, ChildExit
from marshal_workers.ipc.messages import ChildSpec, Grant, GrantRequest, ToChild, ToSupervisor
from marshal_workers.protocol.modes import Mode


@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None = None
    value: bytes | None = b"v"


class Source:
    """Batches, then the end given (a ChildExit) at every fetch after them."""

    messages = False

    def __init__(self, batches: list[list[int]], end: ChildExit) -> None:
        self.batches = deque(batches)
        self.end = end

    def fetch(self, wait: bool = True) -> Sequence[Rec]:
        if not self.batches:
            raise self.end
        return [Rec(o) for o in self.batches.popleft()]


class Supervisor:
    """The pipe as the child sees it: every request granted (or refused) at once."""

    def __init__(self, refuse: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.asked: list[GrantRequest] = []
        self.answers: deque[ToChild] = deque()
        self.refuse = refuse
        self.stop_requested = False
        self.stop_reason = "stop"
        self.keep_grant: Any = lambda grant: False

    def send(self, msg: ToSupervisor) -> None:
        assert isinstance(msg, GrantRequest)
        self.asked.append(msg)
        refused = msg.request_id in self.refuse
        self.answers.append(Grant(msg.request_id, granted=not refused, reason="no"))

    def receive(self, timeout: float) -> ToChild | None:
        return self.answers.popleft() if self.answers else None

    def aside(self, msg: ToChild | None) -> None:
        assert msg is None, msg


class Term:
    def here(self) -> None:  # (no TERM comes here)
        pass

    def mark_here(self) -> None:
        pass


class Lease:
    term = Term()

    def require(self) -> None:
        pass

    def require_here(self) -> None:
        pass

    def remaining(self) -> float:
        return 1.0


class Handling:
    def __init__(self) -> None:
        self.handled: list[int] = []

    def run(self, records: Sequence[Rec]) -> None:
        self.handled.extend(r.offset for r in records)


class Reporter:
    def __init__(self) -> None:
        self.next_offset = 0

    def granted(self, end: int) -> None:
        self.next_offset = end

    def run_done(self) -> None:
        pass


class Log:
    def info(self, *args: object, **kwargs: object) -> None:
        pass

    warning = info


def reserving(source: Source, pipe: Supervisor) -> tuple[Reserving, Handling]:
    spec = ChildSpec(
        "h:handle", Mode.AMO, "b:1", "g", "c", "c-1", "t", 0, 0, 1, batch_size=4, amo_window=8
    )
    handling = Handling()
    plugin = type("Plugin", (), {"handle_batch": None})()
    handling.plugin = plugin  # type: ignore[attr-defined]
    step = Reserving(spec, Log(), source, pipe, Lease(), handling, Reporter())  # type: ignore[arg-type]
    return step, handling


def run_to_the_end(step: Reserving) -> ChildExit:
    for _ in range(1000):
        try:
            step.turn()
        except ChildExit as end:
            return end
    raise AssertionError("the child never ended")


def test_every_run_asked_for_is_handed_on_before_the_child_ends() -> None:
    pipe = Supervisor()
    step, handling = reserving(
        Source([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]], ChildExit(EXIT_KAFKA, "feed_lost")), pipe
    )
    end = run_to_the_end(step)
    assert end.code == EXIT_KAFKA
    asked_end = max(r.end for r in pipe.asked)
    assert asked_end >= 8  # (what was held and never asked for is not reserved: dropped)
    assert handling.handled == list(range(asked_end))  # every record asked for: granted


def test_a_refused_run_after_the_end_ends_the_child_as_a_refusal_does() -> None:
    """The answers keep their meaning: a refusal read while handing on ends the child there."""
    pipe = Supervisor(refuse={3})
    step, handling = reserving(
        Source([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]], ChildExit(EXIT_KAFKA, "feed_lost")), pipe
    )
    end = run_to_the_end(step)
    assert end.code != EXIT_KAFKA
    refused = next(r for r in pipe.asked if r.request_id == 3)
    assert handling.handled == list(range(refused.start))


@pytest.mark.parametrize("code", [EXIT_LEASE_EXPIRED])
def test_any_other_end_of_a_fetch_ends_the_child_at_once(code: int) -> None:
    pipe = Supervisor()
    step, _ = reserving(Source([[0, 1, 2, 3], [4, 5, 6, 7]], ChildExit(code, "other")), pipe)
    end = run_to_the_end(step)
    assert end.code == code
