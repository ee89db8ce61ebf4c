"""The supervisor loop's wait (`supervisor.waiting.LoopWait`): what is ready, and a poll set
built again only when the objects waited on change."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator

import pytest

from marshal_workers.supervisor.waiting import LoopWait

MP = multiprocessing.get_context("spawn")  # (only its pipes are used)


@pytest.fixture
def waiter() -> Iterator[LoopWait]:
    w = LoopWait()
    yield w
    w.close()


def test_what_is_ready_is_returned_and_nothing_after_the_timeout(waiter: LoopWait) -> None:
    a, a_peer = MP.Pipe()
    b, b_peer = MP.Pipe()
    read_fd, write_fd = os.pipe()
    try:
        assert waiter.wait([a, b, read_fd], timeout=0.01) == []
        b_peer.send("hello")
        os.write(write_fd, b"x")
        assert set(waiter.wait([a, b, read_fd], timeout=1.0)) == {b, read_fd}
        assert b.recv() == "hello"
        os.read(read_fd, 1)
        assert waiter.wait([a, b, read_fd], timeout=0.01) == []
        a_peer.close()  # a closed pipe is ready: its reader sees the end
        assert waiter.wait([a, b, read_fd], timeout=1.0) == [a]
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_the_set_is_built_again_only_when_the_objects_change(waiter: LoopWait) -> None:
    a, _a_peer = MP.Pipe()
    b, b_peer = MP.Pipe()
    for _ in range(5):
        waiter.wait([a, b], timeout=0)
    assert waiter.builds == 1
    waiter.wait([a], timeout=0)
    assert waiter.builds == 2
    waiter.wait([a], timeout=0)
    assert waiter.builds == 2
    b_peer.send(1)
    assert waiter.wait([a, b], timeout=1.0) == [b]  # b is waited on again
    assert waiter.builds == 3


def test_an_fd_number_reused_by_a_new_object_is_waited_on(waiter: LoopWait) -> None:
    """A child's pipe closed and a new child's opened on the same fd number: the new object
    is what is returned (the caller passes it, so the set is built afresh)."""
    old, old_peer = MP.Pipe()
    waiter.wait([old], timeout=0)
    number = old.fileno()
    old.close()
    old_peer.close()
    new, new_peer = MP.Pipe()
    if new.fileno() != number:  # the kernel gives the lowest free number: new_peer's end
        new, new_peer = new_peer, new
    assert new.fileno() == number
    new_peer.send("x")
    assert waiter.wait([new], timeout=1.0) == [new]
