"""The child tests' harness itself (no broker): `grant_all` grants a request whoever read it
from the pipe, and `expect` finds a message that `of` read before it."""

from __future__ import annotations

import multiprocessing
from multiprocessing.connection import Connection
from typing import Any, cast

from marshal_workers.ipc.messages import Grant, GrantRequest, Started, ToChild
from tests.integration.childrun import LeaseKeeper, Supervised, grant_all


class PipeHandle:
    """The part of a `ChildHandle` the harness uses, on a plain pipe (the test is the child)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.exitcode: int | None = None

    def send(self, msg: ToChild) -> bool:
        self.conn.send(msg)
        return True


def supervised() -> tuple[Supervised, Connection]:
    ours, theirs = multiprocessing.Pipe()
    return Supervised(cast(Any, PipeHandle(ours)), cast(LeaseKeeper, None)), theirs


def test_grant_all_grants_the_requests_its_condition_read_off_the_pipe() -> None:
    """Both requests are in the pipe when the condition first runs, and it reads them
    (`Supervised.of` drains): each is granted all the same, once."""
    child, peer = supervised()
    peer.send(GrantRequest(1, 0, 1))
    peer.send(GrantRequest(2, 1, 8))
    grants: list[Grant] = []

    def until() -> bool:
        child.of(Started)  # reads everything waiting, as the tests' conditions do
        while peer.poll(0):
            grants.append(peer.recv())
        return len(grants) >= 2

    grant_all(child, until, timeout=5.0)
    assert [(g.request_id, g.granted) for g in grants] == [(1, True), (2, True)]
    grant_all(child, lambda: True)  # a second call grants nothing again
    assert not peer.poll(0.2)


def test_expect_finds_a_message_that_of_read_first() -> None:
    """`of` read the request off the pipe before `expect` asked for it: found, not waited for;
    what `expect` passed over is not found again (the next one of its kind is)."""
    child, peer = supervised()
    peer.send(Started(pid=1, position=0))
    peer.send(GrantRequest(1, 0, 1))
    assert child.of(Started) == [Started(pid=1, position=0)]
    assert child.expect(GrantRequest, timeout=1.0) == GrantRequest(1, 0, 1)
    peer.send(Started(pid=2, position=5))
    assert child.expect(Started, timeout=1.0) == Started(pid=2, position=5)
