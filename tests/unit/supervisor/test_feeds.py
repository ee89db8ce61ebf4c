"""The supervisor's readers of sliced partitions (`supervisor.feeds.HostFeeds`), with real reader
processes (spawned; none reaches a broker: a reader connects only once a child attaches)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from dataclasses import replace

import psutil
import pytest
import structlog

from marshal_workers.childlink.callstate import CallCells
from marshal_workers.ipc.exits import EXIT_KAFKA, EXIT_NOT_GRANTED, EXIT_OK
from marshal_workers.ipc.messages import ChildSpec
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.slicing import Ordering, Slice
from marshal_workers.supervisor.feeds import HostFeeds

MP = multiprocessing.get_context("spawn")


def spec(index: int, partition: int = 1) -> ChildSpec:
    return ChildSpec(
        handler="h:h",
        mode=Mode.ALO,
        bootstrap_servers="127.0.0.1:1",
        group_id="g",
        client_id="c",
        instance_id="i",
        topic="t",
        partition=partition,
        start_offset=0,
        fencing_token=1,
        slice=Slice(Ordering.UNORDERED, 4, index),
    )


@pytest.fixture
def feeds() -> Iterator[HostFeeds]:
    made = HostFeeds(MP, structlog.get_logger("test"))
    yield made
    made.close()


def alive(pid: int | None) -> bool:
    try:
        return pid is not None and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_child_of_a_replaced_reader_does_not_kill_its_successor(feeds: HostFeeds) -> None:
    """Two children of reader R1; R1 dies, one child ends and its restart gets R2; the other,
    still draining what R1 sent, ends later: R2 lives on. (It was killed: every reader of the
    partition had one name, so the straggler's end took the new reader, whose children then
    took the next one, for ever.)"""
    a = feeds.fed(spec(0))
    b = feeds.fed(spec(1))
    assert a.feed == b.feed
    first = feeds.readers[("t", 1)].pid
    feeds.child_ended(a, EXIT_KAFKA)
    assert not alive(first)
    again = feeds.fed(spec(0))
    second = feeds.readers[("t", 1)].pid
    assert again.feed != a.feed and second != first
    feeds.child_ended(b, EXIT_KAFKA)  # B was R1's
    assert alive(second) and feeds.readers[("t", 1)].pid == second
    feeds.child_ended(again, EXIT_KAFKA)  # a child of R2 losing its feed takes R2
    assert not alive(second) and ("t", 1) not in feeds.readers


def test_a_child_that_lost_its_feed_takes_its_reader_however_it_ended(feeds: HostFeeds) -> None:
    """An AMO child that lost its feed hands on the runs it had asked for first, and may then
    end refused or stopped, not with the Kafka code: its cells say the feed was lost, and the
    reader goes all the same (it stayed: a frozen reader then waited for the next child to
    time out on it, a child's lifetime late; a review). A child ending so with its feed
    intact leaves the reader to its other children."""
    a = feeds.fed(spec(0))
    first = feeds.readers[("t", 1)].pid
    feeds.child_ended(a, EXIT_NOT_GRANTED)
    feeds.child_ended(a, EXIT_OK)
    assert alive(first) and feeds.readers[("t", 1)].pid == first
    feeds.child_ended(a, EXIT_NOT_GRANTED, feed_lost=True)
    assert not alive(first) and ("t", 1) not in feeds.readers


def test_each_reader_has_a_name_nobody_can_guess_from_another(feeds: HostFeeds) -> None:
    """Readers of two partitions, and two readers of one partition in turn, share nothing in
    their names (a local user who reads one name in /proc/net/unix cannot take the others'
    first and keep the partition from its children)."""
    one = feeds.fed(spec(0, partition=1)).feed
    two = feeds.fed(spec(0, partition=2)).feed
    assert one is not None and two is not None
    feeds.child_ended(replace(spec(0, partition=1), feed=one), EXIT_KAFKA)
    three = feeds.fed(spec(0, partition=1)).feed
    assert three is not None
    names = [one.split("/")[-1], two.split("/")[-1], three.split("/")[-1]]
    assert len(set(names)) == 3 and all(len(n) >= 32 for n in names)


def test_a_lost_feed_is_in_the_ended_childs_note_once() -> None:
    """The cells carry the loss from the child to the supervisor's end note, then are reset
    for the claim's next child (whose feed is a new reader's)."""
    cells = CallCells(MP)
    assert not cells.take_end_note().feed_lost
    cells.note_feed_lost()
    assert cells.take_end_note().feed_lost
    assert not cells.take_end_note().feed_lost
