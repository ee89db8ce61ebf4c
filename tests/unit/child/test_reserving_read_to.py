"""How far an AMO slice's child says it read (`Reserving.read_to`, `Stats.read_to`): its
position moves only with its own reservations, so its lag is counted from its read."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from marshal_workers.child.consumer import Reach
from marshal_workers.child.grants import Asked
from marshal_workers.child.reserving import Reserving
from marshal_workers.ipc.messages import GrantRequest


def reserving(read: int | None, position: int) -> Any:
    """A reserving step whose source read to ``read`` and whose granted runs end at
    ``position`` (only what `read_to` looks at)."""
    step: Any = Reserving.__new__(Reserving)
    reach = Reach()
    reach.end = read
    step.fetcher = SimpleNamespace(reach=reach)
    step.reporter = SimpleNamespace(next_offset=position)
    step.held, step.asked = [], Asked()
    return step


def test_nothing_of_its_own_waiting_it_says_how_far_it_read() -> None:
    assert reserving(4455, 12).read_to() == 4455


def test_its_own_records_waiting_it_says_nothing() -> None:
    """Fetched and not yet asked for, or asked for and not handed on: not read past."""
    step = reserving(4455, 12)
    step.held = [object()]
    assert step.read_to() is None
    step = reserving(4455, 12)
    step.asked.batches.append((GrantRequest(1, 12, 20), []))
    assert step.read_to() is None


def test_a_read_not_past_its_position_says_nothing() -> None:
    assert reserving(12, 12).read_to() is None
    assert reserving(None, 12).read_to() is None
