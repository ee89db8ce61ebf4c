"""A child's main thread: set up the handler and the chain of steps, run it until told to stop
or fenced, and shut down on one path.

The chain, each step a small object that owns its state (in the manner of Arroyo's processing
strategies):

- ALO: `Fetcher` (a batch, waiting up to ``batch_timeout``) -> `Handling` (the handler on each
  record, failures through `FailureHandling`) -> `Reporter` (`Progress` after a short batch at
  once, after full ones at most every 50 ms);
- AMO: `Fetcher` -> `Reserving` (a run reserved in the log and granted, one asked ahead while
  records are quick) -> `Handling` -> `Reporter` (the granted end is the position).

Around it: `Pipe` (the supervisor's messages; `Stop` is remembered), `LeaseCheck` (the lease on
the lease clock, checked before every turn, every wait and every handler call), `Reporter` also
sends `Stats` about once a second. `ChildLoop` builds the chain once the handler is set up and
the consumer open, turns it, and unwinds every ending to one shutdown path that tears the
plugin down and tells the supervisor where it stopped. Exit codes (the protocol between child
and supervisor) are listed in `child.main`'s docstring and defined in `ipc.exits`.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
from multiprocessing.connection import Connection
from typing import Any

from confluent_kafka import KafkaException

from marshal_workers.child.callclock import CallClock
from marshal_workers.child.consumer import ConsumerSetupError, Prepared
from marshal_workers.child.failurehandling import FailureHandling
from marshal_workers.child.feedsource import FeedFetcher
from marshal_workers.child.fencing import REASON_PARENT_GONE
from marshal_workers.child.fetching import Fetcher, Source
from marshal_workers.child.handling import Handling, keepalive
from marshal_workers.child.leasecheck import Clock, LeaseCheck
from marshal_workers.child.pipe import Pipe
from marshal_workers.child.plugin import Plugin
from marshal_workers.child.policy import FailurePolicy, OnFailure, PoisonRate
from marshal_workers.child.priority import Lowering
from marshal_workers.child.reporting import Reporter
from marshal_workers.child.reserving import Reserving
from marshal_workers.childlink.forkserver import FORK_SERVER_PID
from marshal_workers.childlink.schedgroup import GroupNice, settle_soon
from marshal_workers.childlink.sharedlease import SharedLease
from marshal_workers.common import leaseclock
from marshal_workers.common.errors import EXIT_OK, EXIT_RUNTIME
from marshal_workers.common.workdir import working_directory_on_path
from marshal_workers.handler import Context
from marshal_workers.handler.loading import LoadError, load_handler
from marshal_workers.ipc.exits import EXIT_KAFKA, EXIT_SETUP, ChildExit
from marshal_workers.ipc.messages import ChildSpec, Started, Stopped
from marshal_workers.protocol.modes import Mode

# The cyclic collector's thresholds in a child. Every fetched message and record is a tracked
# object, and an AMO child holds a reservation's worth (thousands) until it handles them, so at
# CPython's default (a collection every 700 allocations) a large part of them is traversed over
# and over. Measured on the trivial benchmarks (8 children, 2 cores, docs/design.md decision
# 20): on top of the freeze after setup, these thresholds cut a run's CPU (children, supervisor
# and broker) by 8-24% in AMO and 2-15% in ALO. Cyclic garbage waits longer (about 50,000
# allocations) before it is freed; a plugin may set its own thresholds in its setup, or its
# module at its import: the child sets these before (`child.main.BeforeImport`).
GC_THRESHOLDS = (50_000, 20, 20)


class ChildLoop:
    """The child's main thread: setup, turning the chain of steps, shutdown."""

    def __init__(
        self,
        spec: ChildSpec,
        lease: SharedLease,
        conn: Connection,
        log: Any,
        clock: Clock = leaseclock.now,
        prepared: Prepared | None = None,
    ) -> None:
        self.spec = spec
        self.log = log
        self.prepared = prepared  # a spare's consumer, made before its claim (`child.consumer`)
        self.lease = LeaseCheck(lease, log, clock)
        self.pipe = Pipe(conn, log)
        self.cells = lease.calls  # the shared cells: handled position, call in progress
        self.call_clock = CallClock(spec.handler_timeout_s)  # read by the watchdog
        self.ctx = Context(
            client_id=spec.client_id,
            instance_id=spec.instance_id,
            group_id=spec.group_id,
            topic=spec.topic,
            partition=spec.partition,
            fencing_token=spec.fencing_token,
            mode=spec.mode,
            log=log,
            pid=os.getpid(),
            lease_remaining=self.lease.remaining,
            keepalive=keepalive(self.call_clock, self.lease, self.cells),
            slice=None if spec.slice is None else spec.slice.name,
        )
        self.plugin: Plugin | None = None  # set once setup() succeeded
        self.fetcher: Source | None = None  # set once the plugin is set up
        # the rest of the chain, built once the consumer is open
        self.reporter: Reporter | None = None
        self.failures: FailureHandling | None = None
        self.handling: Handling | None = None
        self.reserving: Reserving | None = None  # AMO

    def run(self) -> int:
        """Run until something ends the child; its exit code."""
        try:
            try:
                self._setup()
            except BaseException:
                self._began_nothing()
                raise
            self._loop()
        except ChildExit as end:
            return self._shutdown(end)
        except BaseException:  # (nothing may end the child but its protocol)
            self.log.exception("child_crashed")
            return self._shutdown(ChildExit(EXIT_RUNTIME, "crash"))
        raise AssertionError("the loop only ends by ChildExit")  # pragma: no cover

    def _began_nothing(self) -> None:
        """Its setup ended the child (its handler not loaded or set up, its consumer not
        open): it started no record, and says so as a stop at its start, so that its member
        hands what it was handed to the next child (`core.children.carried`) rather than
        reporting it lost as a crash's (a review)."""
        start = self.spec.start_offset
        if start is not None:
            self.cells.position.value = start
            self.cells.stopped_at.value = start

    def _setup(self) -> None:
        spec = self.spec
        try:
            policy = FailurePolicy(
                retries=spec.retries,
                retry_backoff_s=spec.retry_backoff_s,
                on_failure=OnFailure(spec.on_failure),
            )
        except ValueError as exc:
            self.log.error("bad_error_policy", error=str(exc))
            raise ChildExit(EXIT_SETUP, "setup_failed") from None
        try:
            working_directory_on_path()  # the supervisor's (inherited); a spawned child's too
            plugin = Plugin(load_handler(spec.handler))
            plugin.setup(self.ctx)
        except LoadError as exc:
            self.log.error("handler_load_failed", handler=spec.handler, error=str(exc))
            raise ChildExit(EXIT_SETUP, "setup_failed") from None
        except Exception as exc:
            self.log.exception("handler_setup_failed", handler=spec.handler, error=repr(exc))
            raise ChildExit(EXIT_SETUP, "setup_failed") from None
        self.plugin = plugin
        fetcher: Source
        prepared, self.prepared = self.prepared, None
        if spec.feed is not None:  # a slice's child fed by the host's reader (`child.reader`)
            if prepared is not None:
                prepared.consumer.close()
            fetcher = FeedFetcher(spec, self.log, plugin.messages, self.cells.note_feed_lost)
            consumer = "feed"
        else:
            fetcher = Fetcher(spec, self.log, plugin.messages, prepared)
            consumer = "opened"
        self.fetcher = fetcher
        try:
            position = fetcher.open()
        except ConsumerSetupError as exc:
            self.log.error("consumer_setup_failed", error=str(exc))
            raise ChildExit(EXIT_SETUP, "setup_failed") from None
        except KafkaException as exc:
            self.log.error("kafka_failed", error=str(exc))
            raise ChildExit(EXIT_KAFKA, "kafka_failed") from None
        self._build_chain(plugin, fetcher, policy, position)
        self.lease.term.armed = True  # from now on a TERM stops at a record boundary
        # What setup made (the plugin, the consumer; a spawned child's modules) lives as long as
        # the child: frozen, it is not traversed again by every full collection (see
        # GC_THRESHOLDS). Setup's own cyclic garbage is collected first (frozen, a cycle is never
        # collected); a forked child's inherited modules are frozen already (`childlink.preloaded`).
        gc.collect()
        gc.freeze()
        self._lower_priority()
        self.pipe.send(Started(os.getpid(), position))
        if prepared is not None and fetcher.consumer is prepared.consumer:
            consumer = "prepared"  # the spare's, connected while the claim was decided
        self.log.info("child_ready", mode=str(spec.mode), position=position, consumer=consumer)

    def _lower_priority(self) -> None:
        """Run the handler below the supervisor's CPU priority (`ChildSpec.nice`) once its first
        record is dealt with, or `ChildSpec.nice_after_s` from now if sooner (`child.priority`):
        busy handlers must not starve the supervisor (its heartbeats, the leases), the host's
        readers, nor a child still starting (its setup ran at full priority), and a child just
        set up must not wait for its first record behind its siblings still starting. Only this
        thread and those it starts once lowered (a plugin's, the dead-letter producer's): the
        watchdog and the consumer's threads, started before, keep theirs.

        A nice orders threads only inside one scheduling group. Where Linux makes each session
        one (autogroup), the fork server's session, which all the member's children share, is
        given the handler's nice at once (`childlink.schedgroup`): against other sessions every
        thread of the children weighs that little, inside it each keeps its own. Tried here,
        and from a thread of its own while the kernel says too soon (`settle_soon`)."""
        if self.spec.nice <= 0:
            return
        lowering = Lowering(self.spec.nice, self.spec.nice_after_s, self._priority_refused)
        assert self.handling is not None
        self.handling.first_dealt_with = lowering.now
        settle_soon(GroupNice(lowering.target, FORK_SERVER_PID), self._group_settled)

    def _priority_refused(self, exc: OSError) -> None:
        self.log.warning("child_priority_unchanged", nice=self.spec.nice, error=str(exc))

    def _group_settled(self, group: GroupNice) -> None:
        if group.error is not None:
            self.log.warning("child_group_priority_unchanged", nice=group.nice, error=group.error)

    def _build_chain(
        self, plugin: Plugin, fetcher: Source, policy: FailurePolicy, position: int
    ) -> None:
        spec, log, lease, pipe = self.spec, self.log, self.lease, self.pipe
        self.reporter = reporter = Reporter(
            spec.mode, self.cells, pipe, position, fetcher.high_watermark
        )
        # the poison rate counts the partition's last minute, not this child's alone (`Poisoned`)
        poison = PoisonRate(spec.max_poison_rate, ages=spec.poison_ages, now=time.monotonic())
        self.failures = failures = FailureHandling(spec, log, lease, pipe, reporter, poison, policy)
        if policy.on_failure is OnFailure.DLQ:
            failures.open_dead_letters(fetcher.consumer)
        self.handling = handling = Handling(
            plugin, self.ctx, lease, self.cells, self.call_clock, failures, reporter, spec.settle
        )
        if spec.mode is Mode.AMO:
            self.reserving = Reserving(spec, log, fetcher, pipe, lease, handling, reporter)
            reporter.read_to = self.reserving.read_to

    def _loop(self) -> None:
        fetcher, handling, reporter = self.fetcher, self.handling, self.reporter
        assert fetcher is not None and handling is not None and reporter is not None
        pipe, lease, reserving = self.pipe, self.lease, self.reserving
        batch_size = self.spec.batch_size
        while True:
            pipe.drain()
            if pipe.stop_requested and not (reserving is not None and reserving.pending):
                # (the batch in hand is done; AMO: every run asked for is handed on if granted)
                raise ChildExit(EXIT_OK, pipe.stop_reason, Stopped(reporter.next_offset))
            reporter.send_stats()
            lease.require_here()
            lease.term.here()  # the member's TERM, between runs (`child.termstop`)
            if reserving is not None:
                reserving.turn()
                continue
            records = fetcher.fetch()
            if records:
                handling.run(records)
            reporter.past(fetcher.reach.end)
            # a short batch reports at once if it means caught up (a fed slice's batches are
            # short whenever its slice has few of the records read: not a reason to report)
            reporter.after_batch(full=len(records) >= batch_size or not fetcher.idle)

    def _shutdown(self, end: ChildExit) -> int:
        """Report what was done, tear the plugin down, send the final message, close."""
        reporter = self.reporter
        if reporter is not None and end.reason != REASON_PARENT_GONE:
            with contextlib.suppress(ChildExit):
                reporter.report()
            with contextlib.suppress(ChildExit):
                reporter.send_stats(final=True)
        if self.plugin is not None:
            try:
                self.plugin.teardown(self.ctx, end.reason)
            except Exception:
                self.log.exception("handler_teardown_failed", reason=end.reason)
        if end.final is not None:
            with contextlib.suppress(ChildExit):
                self.pipe.send(end.final)
        if self.fetcher is not None:
            self.fetcher.close()
        if self.prepared is not None:  # (setup failed before the consumer was opened)
            self.prepared.consumer.close()
        failures = self.failures
        if failures is not None:
            failures.close()
        self.log.info(
            "child_exit",
            reason=end.reason,
            exit_code=end.code,
            handled=0 if self.handling is None else self.handling.handled,
            dead_lettered=0 if failures is None else failures.dead_lettered,
            skipped=0 if failures is None else failures.skipped,
        )
        return end.code
