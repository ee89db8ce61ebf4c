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
import hashlib
import os
import secrets
import signal
from dataclasses import replace
from multiprocessing.process import BaseProcess
from typing import Any

from marshal_workers.child.feedentry import reader_entry
from marshal_workers.ipc.exits import EXIT_KAFKA
from marshal_workers.ipc.messages import ChildSpec
from marshal_workers.supervisor.childprocess import main_not_rerun

Partition = tuple[str, int]


def socket_name(token: str, topic: str, partition: int) -> str:
    """The abstract socket name of this supervisor's reader of ``topic``/``partition`` (the
    random ``token`` keeps two supervisors on one host apart; the topic is hashed into it: an
    abstract name has at most 107 bytes)."""
    digest = hashlib.md5(topic.encode(), usedforsecurity=False).hexdigest()[:16]
    return f"\0marshal-feed/{token}/{digest}/{partition}"


class HostFeeds:
    """This supervisor's readers, by data partition."""

    def __init__(self, mp_context: Any, log: Any) -> None:
        self.mp = mp_context
        self.log = log
        self.token = secrets.token_hex(8)
        self.readers: dict[Partition, BaseProcess] = {}

    def fed(self, spec: ChildSpec) -> ChildSpec:
        """``spec`` with the feed of its partition's reader, started now if none runs."""
        where = (spec.topic, spec.partition)
        name = socket_name(self.token, spec.topic, spec.partition)
        spec = replace(spec, feed=name)
        reader = self.readers.get(where)
        if reader is not None and reader.exitcode is None:
            return spec
        if reader is not None:
            self.log.info(
                "feed_reader_ended", topic=where[0], partition=where[1], code=reader.exitcode
            )
            reader.close()
        process = self.mp.Process(
            target=reader_entry,
            args=(spec, os.getpid()),
            name=f"marshal-reader:{spec.topic}/{spec.partition}",
            daemon=False,
        )
        with main_not_rerun():
            process.start()
        self.readers[where] = process
        self.log.info(
            "feed_reader_started",
            topic=spec.topic,
            partition=spec.partition,
            reader_pid=process.pid,
        )
        return spec

    def child_ended(self, spec: ChildSpec | None, code: int) -> None:
        """A child of a feed ended with ``code``: a lost feed takes its reader with it."""
        if spec is None or spec.feed is None or code != EXIT_KAFKA:
            return
        self._kill((spec.topic, spec.partition), "a child lost its feed")

    def _kill(self, where: Partition, why: str) -> None:
        reader = self.readers.pop(where, None)
        if reader is None:
            return
        if reader.exitcode is None and reader.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(reader.pid, signal.SIGKILL)
            reader.join(5.0)
            self.log.info("feed_reader_stopped", topic=where[0], partition=where[1], reason=why)
        if reader.exitcode is not None:
            reader.close()

    def close(self) -> None:
        """Kill every reader (the supervisor is ending)."""
        for where in list(self.readers):
            self._kill(where, "supervisor exiting")
