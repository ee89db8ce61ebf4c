"""The supervisor loop's wait: its children's pipes and exit fds, the start thread's, the log
reader's and the signal wake-up fd, in one poll set kept from one turn to the next.

`multiprocessing.connection.wait` builds a new poll set for every call and registers every
object in it again: with 32 children a turn that cost more than the turn's own work (a
profile of the hot-partition benchmark: 70,000 registrations in 1,550 turns). The set here is
built again only when the objects waited on change (a child started or gone), which the
caller shows by passing a different sequence.

A poll set holds no kernel state, only fd numbers, so a set built for an fd that was closed
and then reused for another object waits on the new one: still, the caller's sequence changes
whenever its objects do, and the set is then built afresh.
"""

from __future__ import annotations

import selectors
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import cast

Waitable = Connection | int  # a pipe end, or an fd


def _poll_selector() -> selectors.BaseSelector:
    """The selector `multiprocessing.connection.wait` uses: poll where there is one."""
    if hasattr(selectors, "PollSelector"):
        return selectors.PollSelector()
    return selectors.SelectSelector()  # pragma: no cover (every POSIX system here has poll)


class LoopWait:
    """Waits for any of a sequence of pipes and fds to be readable (or closed)."""

    def __init__(self) -> None:
        self._selector: selectors.BaseSelector | None = None
        self._objects: tuple[Waitable, ...] = ()
        self.builds = 0  # how many times the set was built (the tests' view)

    def wait(self, objects: Sequence[Waitable], timeout: float) -> list[Waitable]:
        """The objects of ``objects`` that are ready, waiting up to ``timeout`` seconds for one
        (as `multiprocessing.connection.wait`)."""
        wanted = tuple(objects)
        if self._selector is None or wanted != self._objects:
            self._build(wanted)
        assert self._selector is not None
        # (a signal does not end the wait early: poll is retried with what is left, PEP 475)
        return [cast(Waitable, key.fileobj) for key, _events in self._selector.select(timeout)]

    def close(self) -> None:
        """Forget the set (it holds no fd of its own)."""
        if self._selector is not None:
            self._selector.close()
        self._selector, self._objects = None, ()

    def _build(self, objects: tuple[Waitable, ...]) -> None:
        self.close()
        selector = _poll_selector()
        for obj in objects:
            selector.register(obj, selectors.EVENT_READ)
        self._selector, self._objects = selector, objects
        self.builds += 1
