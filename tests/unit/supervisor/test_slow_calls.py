"""A handler call past half its timeout is logged once (`supervisor.slowcalls`): a review
SIGSTOPped a child mid-call, and nothing was logged for the 300 s until the watchdog ended it."""

from __future__ import annotations

from typing import Any

from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.supervisor.observe import ClaimSnapshot
from marshal_workers.supervisor.slowcalls import SlowCallLog

KEY = ClaimKey("g", "orders", 3)


class Lines:
    def __init__(self) -> None:
        self.said: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.said.append((event, fields))


def snap(call_s: float | None, slow: bool, pid: int = 42) -> dict[ClaimKey, ClaimSnapshot]:
    return {KEY: ClaimSnapshot(KEY, 7, 100, 3.0, pid, "running", call_s, slow)}


def test_a_slow_call_is_said_once_and_the_next_slow_one_again() -> None:
    lines = Lines()
    watch = SlowCallLog(lines, 300.0)
    watch.tick(snap(10.0, False), True)
    assert lines.said == []
    watch.tick(snap(151.0, True), True)
    watch.tick(snap(200.0, True), True)
    assert [(e, f["partition"], f["call_s"], f["child_pid"]) for e, f in lines.said] == [
        ("handler_call_slow", 3, 151.0, 42)
    ]
    watch.tick(snap(None, False), True)  # the call ended
    watch.tick(snap(160.0, True, pid=43), True)  # another slow call, a new child
    assert len(lines.said) == 2 and lines.said[1][1]["child_pid"] == 43


def test_a_claim_that_goes_forgets_its_call() -> None:
    lines = Lines()
    watch = SlowCallLog(lines, 300.0)
    watch.tick(snap(151.0, True), True)
    watch.tick({}, True)
    watch.tick(snap(152.0, True), True)
    assert len(lines.said) == 2
