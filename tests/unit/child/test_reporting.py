"""When a child tells the supervisor where it is (`child.reporting.Reporter`, ALO)."""

from __future__ import annotations

from typing import Any

import pytest

from marshal_workers.child import reporting
from marshal_workers.child.reporting import PROGRESS_INTERVAL_S, Reporter
from marshal_workers.ipc.messages import Progress
from marshal_workers.protocol.modes import Mode


class Cell:
    value = -1


class Cells:
    def __init__(self) -> None:
        self.position = Cell()


class Pipe:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, msg: Any) -> None:
        self.sent.append(msg)


class Clock:
    now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(reporting, "time", c)
    return c


def test_full_batches_report_once_an_interval_and_the_cell_carries_every_position(
    clock: Clock,
) -> None:
    cells, pipe = Cells(), Pipe()
    reporter = Reporter(Mode.ALO, cells, pipe, 0)  # type: ignore[arg-type]
    reporter.dealt_with(100)
    reporter.after_batch(full=True)
    assert pipe.sent == [Progress(100)]
    for end in range(200, 1000, 100):  # busy: full batch after full batch
        clock.now += PROGRESS_INTERVAL_S / 10
        reporter.dealt_with(end)
        reporter.after_batch(full=True)
        assert cells.position.value == end  # what the supervisor heartbeats from
    assert pipe.sent == [Progress(100)]
    clock.now += PROGRESS_INTERVAL_S
    reporter.after_batch(full=True)
    assert pipe.sent == [Progress(100), Progress(900)]


def test_a_caught_up_batch_reports_at_once(clock: Clock) -> None:
    cells, pipe = Cells(), Pipe()
    reporter = Reporter(Mode.ALO, cells, pipe, 0)  # type: ignore[arg-type]
    reporter.dealt_with(100)
    reporter.after_batch(full=True)
    reporter.dealt_with(150)
    reporter.after_batch(full=False)
    assert pipe.sent == [Progress(100), Progress(150)]
    reporter.after_batch(full=False)  # nothing new: nothing said
    assert pipe.sent == [Progress(100), Progress(150)]
