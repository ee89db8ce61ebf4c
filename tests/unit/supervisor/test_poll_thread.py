"""The coordination log's reader thread: it wakes the loop's wait, and hands over what it read
in order, a read error in its place."""

from __future__ import annotations

import queue
import time
from multiprocessing import connection

import pytest

from marshal_workers.log.interface import LogError
from marshal_workers.protocol.wire import CoordRecord
from marshal_workers.supervisor.pollthread import LogPollThread


def rec(offset: int) -> CoordRecord:
    return CoordRecord(0, offset, 0, b"k", b"v")


class FakeLog:
    """A poll that blocks like the real one, handing out what the test puts in."""

    def __init__(self) -> None:
        self.items: queue.Queue[list[CoordRecord] | LogError] = queue.Queue()
        self.polls = 0

    def poll(self, timeout_s: float) -> list[CoordRecord]:
        self.polls += 1
        try:
            item = self.items.get(timeout=timeout_s)
        except queue.Empty:
            return []
        if isinstance(item, LogError):
            raise item
        return item


@pytest.fixture
def log_and_reader() -> tuple[FakeLog, LogPollThread]:
    log = FakeLog()
    reader = LogPollThread(log.poll)
    reader.start()
    yield log, reader
    reader.close()


def wait_woken(reader: LogPollThread) -> None:
    assert connection.wait([reader.fileno()], timeout=5.0), "the loop was not woken"


def test_records_wake_the_loop_and_come_in_order(
    log_and_reader: tuple[FakeLog, LogPollThread],
) -> None:
    log, reader = log_and_reader
    assert not connection.wait([reader.fileno()], timeout=0.15)  # nothing read: no wake-up
    log.items.put([rec(0), rec(1)])
    log.items.put([rec(2)])
    wait_woken(reader)
    deadline = time.monotonic() + 5
    got: list[CoordRecord] = []
    while len(got) < 3 and time.monotonic() < deadline:
        got += reader.take()[0]
    assert [r.offset for r in got] == [0, 1, 2]
    assert not connection.wait([reader.fileno()], timeout=0)  # taking drained the pipe


def test_a_read_error_is_handed_over_and_reading_goes_on(
    log_and_reader: tuple[FakeLog, LogPollThread],
) -> None:
    log, reader = log_and_reader
    log.items.put([rec(0)])
    log.items.put(LogError("broker gone"))
    log.items.put([rec(1)])
    deadline = time.monotonic() + 5
    records: list[CoordRecord] = []
    errors: list[LogError] = []
    while (len(records) < 2 or not errors) and time.monotonic() < deadline:
        wait_woken(reader)
        got, failed = reader.take()
        records += got
        errors += failed
    assert [r.offset for r in records] == [0, 1]
    assert [str(e) for e in errors] == ["broker gone"]


def test_close_stops_the_thread_within_a_poll(
    log_and_reader: tuple[FakeLog, LogPollThread],
) -> None:
    log, reader = log_and_reader
    reader.close()
    polls = log.polls
    time.sleep(0.3)
    assert log.polls == polls
