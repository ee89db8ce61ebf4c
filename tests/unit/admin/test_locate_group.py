"""How the admin locates a group (`admin.connection.locate_group`) when its home cannot be
read, on a memory log."""

from __future__ import annotations

import itertools

import pytest

from marshal_workers.admin.connection import Connection, locate_group
from marshal_workers.common.errors import MarshalError
from marshal_workers.log.memlog import MemoryLog, MemoryTopic
from marshal_workers.protocol.wire import CoordRecord

N = 4


class UnreadableLog(MemoryLog):
    """Every partition ends past records it never delivers (its leader is down)."""

    def end_offsets(self, timeout_s: float) -> dict[int, int]:
        return {p: 1_000 for p in self.followed}

    def poll(self, timeout_s: float) -> list[CoordRecord]:
        return []


def unreadable() -> UnreadableLog:
    ticks = itertools.count(1_700_000_000_000, 5)
    return UnreadableLog(MemoryTopic(N, lambda: next(ticks)))


def test_status_reads_every_partition_when_home_cannot_be_read() -> None:
    """For `status` (read only) an unreadable home is spread: every partition is read and
    the unreadable ones are listed as unavailable, as before placement (it once failed)."""
    conn = Connection("127.0.0.1:1")
    placement = locate_group(unreadable(), conn, "g", 0.2, home_unreadable_spread=True)  # type: ignore[arg-type]
    assert placement is None


def test_a_command_that_acts_on_the_group_refuses_an_unreadable_home() -> None:
    """A command that writes must know where the group is: one line, exit 1."""
    conn = Connection("127.0.0.1:1")
    with pytest.raises(MarshalError) as caught:
        locate_group(unreadable(), conn, "g", 0.2)  # type: ignore[arg-type]
    assert caught.value.exit_code == 1 and "home partition" in str(caught.value)
