"""The host's readers of sliced partitions (``slice_reads = "host"``): one per data partition
this supervisor holds slices of, started before the first slice child needs it; it ends by
itself when no child has needed it for a while, and is killed when one of its children lost
its feed or the supervisor ends (`child.reader`, `child.feedsource`).

Runtime only: the core does not know readers. A child that lost its feed ends with the Kafka
exit code, which the core already restarts the claim's child for; the reader is killed then
too, so the new child attaches to a fresh reader (a frozen or wedged reader is one its
children heard nothing from: they end, and it goes with them).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
from dataclasses import replace
from multiprocessing.process import BaseProcess
from typing import Any

from marshal_workers.child.feedentry import reader_entry
from marshal_workers.ipc.exits import EXIT_KAFKA
from marshal_workers.ipc.messages import ChildSpec
from marshal_workers.supervisor.childprocess import forget_unreported, main_not_rerun

Partition = tuple[str, int]
READER_JOIN_S = 5.0  # a killed reader's end, as its parent (the fork server) reports it


def socket_name() -> str:
    """A new reader's abstract socket name: random, 128 bits, and nothing else in it. Each
    reader has its own, so a child of a reader already replaced cannot be taken for a child of
    its successor (`HostFeeds.child_ended`), and a local user who sees one name (abstract
    names are listed in /proc/net/unix) cannot take another's first: the reader that finds
    its name taken ends, and the next child gets a reader under a new one."""
    return f"\0marshal-feed/{secrets.token_hex(16)}"


class HostFeeds:
    """This supervisor's readers, by data partition."""

    def __init__(self, mp_context: Any, log: Any) -> None:
        self.mp = mp_context
        self.log = log
        self.readers: dict[Partition, BaseProcess] = {}
        self.names: dict[Partition, str] = {}  # each reader's socket

    def fed(self, spec: ChildSpec) -> ChildSpec:
        """``spec`` with the feed of its partition's reader, started now if none runs."""
        where = (spec.topic, spec.partition)
        reader = self.readers.get(where)
        if reader is not None and reader.exitcode is None:
            return replace(spec, feed=self.names[where])
        if reader is not None:
            self.log.info(
                "feed_reader_ended", topic=where[0], partition=where[1], code=reader.exitcode
            )
            reader.close()
        spec = replace(spec, feed=socket_name())
        process = self.mp.Process(
            target=reader_entry,
            args=(spec, os.getpid()),
            name=f"marshal-reader:{spec.topic}/{spec.partition}",
            daemon=False,
        )
        with main_not_rerun():
            process.start()
        self.readers[where] = process
        assert spec.feed is not None
        self.names[where] = spec.feed
        self.log.info(
            "feed_reader_started",
            topic=spec.topic,
            partition=spec.partition,
            reader_pid=process.pid,
        )
        return spec

    def child_ended(self, spec: ChildSpec | None, code: int, feed_lost: bool = False) -> None:
        """A child of a feed ended with ``code``: a lost feed (the Kafka code, or ``feed_lost``,
        its cells' word for a child that then ended otherwise: an AMO child hands on the runs it
        had asked for first, and may be refused one) takes its reader with it, if that reader
        is still the partition's (a child of one already replaced, ending late as it handled
        what it had, must not take the new one)."""
        if spec is None or spec.feed is None or (code != EXIT_KAFKA and not feed_lost):
            return
        where = (spec.topic, spec.partition)
        if self.names.get(where) == spec.feed:
            self._kill(where, "a child lost its feed")

    def _kill(self, where: Partition, why: str) -> None:
        reader = self.readers.pop(where, None)
        self.names.pop(where, None)
        if reader is None:
            return
        if reader.exitcode is None and reader.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(reader.pid, signal.SIGKILL)
            reader.join(READER_JOIN_S)
            self.log.info("feed_reader_stopped", topic=where[0], partition=where[1], reason=why)
        if reader.exitcode is not None:
            reader.close()
        else:  # killed, but its end not reported (a stopped fork server): not joined at exit
            forget_unreported(reader)

    def close(self) -> None:
        """Kill every reader (the supervisor is ending)."""
        for where in list(self.readers):
            self._kill(where, "supervisor exiting")
