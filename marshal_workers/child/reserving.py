"""AMO, the step between fetching and handling: reserve a run in the log, await the grant.

A record is handed to the handler only after the supervisor says the coordination log accepted
a reservation covering it (`Grant`). The step keeps what is fetched and not yet asked for
(``held``), so a reservation is not tied to the fetch batch: it takes as many of the held
records as the sizer allows (`protocol.reservations.ReservationSizer`: about half a second of
the child's own handling at its measured time per record, at most half of ``amo_window`` and
about 4 MiB), fetching more without waiting while it has fewer, and leaves the rest for the
next one. Having asked for run k+1, it waits for run k's answer and hands run k on (the log's
round trip for one overlaps the handling of the other), asking ahead only while the sizer
allows (not before the first run is timed, nor while a record takes longer than half a second),
so the runs reserved and not handled stay within about a second of handling.

On `Stop` it asks for nothing more and hands on every run asked for that the supervisor grants,
and the records granted before it started (`ChildSpec.granted_until`: what the child before it,
stopped as its lease was ending, had not started) (a graceful stop loses nothing: the log
reserved those runs for this claim, and nobody else may handle them); held records never asked
for are dropped. A refusal ends the child (after a
`Stop`, cleanly: nothing of that run was reserved for it).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from marshal_workers.child.fetching import Source
from marshal_workers.child.grants import Asked, record_bytes
from marshal_workers.child.handling import Handling
from marshal_workers.child.leasecheck import LeaseCheck
from marshal_workers.child.pipe import Pipe
from marshal_workers.child.reporting import Reporter
from marshal_workers.handler import Record
from marshal_workers.handler.record import MessageRecords
from marshal_workers.ipc.exits import EXIT_KAFKA, EXIT_NOT_GRANTED, EXIT_OK, ChildExit
from marshal_workers.ipc.messages import (
    REFUSED_STOPPING,
    ChildSpec,
    Grant,
    GrantRequest,
    Stop,
    Stopped,
)
from marshal_workers.protocol.reservations import GROWTH, ReservationSizer

GRANT_POLL_S = 0.05


class Reserving:
    """AMO: runs of fetched records reserved in the log, each handed on once granted."""

    def __init__(
        self,
        spec: ChildSpec,
        log: Any,
        fetcher: Source,
        pipe: Pipe,
        lease: LeaseCheck,
        handling: Handling,
        reporter: Reporter,
    ) -> None:
        self.log = log
        self.fetcher = fetcher
        self.pipe = pipe
        self.lease = lease
        self.handling = handling
        self.reporter = reporter
        self.asked = Asked()  # the runs asked for, not yet handed on
        self.sizer = ReservationSizer(spec.batch_size, spec.amo_window, growth=GROWTH)
        self.held: list[Any] = []  # fetched, not asked for: records (a messages view: messages)
        self.ended: ChildExit | None = None  # the source ended: the runs asked for, then this
        self.views = fetcher.messages
        # what the log reserved for this claim before this child, and the child before it never
        # started (`ChildSpec.granted_until`): handled without asking, in runs that end there
        self.granted_until = spec.granted_until
        self.carry_end = spec.granted_until  # where that grant ends (`_carried_to`)
        # a batch plugin gets batches, not the whole run
        self.step = spec.batch_size if handling.plugin.handle_batch is not None else 0
        pipe.keep_grant = self.asked.keep

    @property
    def pending(self) -> bool:
        """Whether a run asked for, or granted before this child started, is still to be
        handed on (a stop hands those on first)."""
        carrying = self._carrying()
        self._carried_to()
        return bool(self.asked.batches) or carrying

    def _carrying(self) -> bool:
        """Whether records granted before this child started (`ChildSpec.granted_until`) may
        still come: none handed on reaches there yet, none read reaches there (a slice's
        child skips the others' records), and none held is below it."""
        until = self.granted_until
        if until is None:
            return False
        if self.held and self._view(self.held[:1])[0].offset < until:
            return True
        read = self.fetcher.reach.end
        if self.reporter.next_offset >= until or (read is not None and read >= until):
            self.granted_until = None
            return False
        return True

    def _carried_to(self) -> None:
        """Once every record granted before this child started is handed on, its position
        moves to where that grant ended: a slice's child read the other slices' records up to
        there, and the member's position is there (else it reported them lost at the child's
        end)."""
        end = self.carry_end
        if end is None or self.granted_until is not None:
            return
        if any(request.end <= end for request, _ in self.asked.batches):
            return  # (runs granted before it started, still to be handed on)
        self.carry_end = None
        if self.reporter.next_offset < end:
            self.reporter.granted(end)
            self.reporter.run_done()

    def read_to(self) -> int | None:
        """A slice's child with nothing of its own waiting (none fetched and not asked for,
        every run asked for handed on): how far it read, if past its position; else None.
        Its position moves only with its own reservations, so a slice with few records would
        otherwise show the partition's whole growth as its lag (`Stats.read_to`)."""
        if self.held or self.asked.batches:
            return None
        end = self.fetcher.reach.end
        if end is None or end <= self.reporter.next_offset:
            return None
        return int(end)

    def turn(self) -> None:
        """Ask for as many runs as may be asked for now, then wait for the answer on the oldest
        run asked for and hand it on. If the source of records ends (`EXIT_KAFKA`: a lost
        consumer, a host reader's feed that closed) while runs are asked for, those are
        answered and handed on first: the log may have reserved them for this claim, and
        nobody else may handle them (ending at once lost them as a crash does; a review)."""
        asked = self.asked
        while self.ended is None and asked.may_ask(self.sizer.ahead()):
            stopping = self.pipe.stop_requested
            if stopping and not self._carrying():  # (what was granted before it is handled)
                break
            try:
                run = self._next_run()
            except ChildExit as end:
                if end.code == EXIT_KAFKA and not asked.batches:
                    self.lease.term.mark_here()  # (between runs: where it stops)
                if end.code != EXIT_KAFKA or not asked.batches:
                    raise
                self.ended = end
                self.log.info("records_end_runs_asked_handed_on", runs=len(asked.batches))
                break
            if not run:
                break
            until = self.granted_until
            if until is not None and run[0].offset < until:
                asked.ask(run, granted=True)
                continue
            self.granted_until = None
            if stopping:  # (held records never asked for are dropped)
                break
            self.pipe.send(asked.ask(run))
        if asked.batches:
            request, run = asked.take()
            self._await_grant(request)
            self.lease.term.here()  # the member's TERM: stop before the run (`child.termstop`)
            self._hand_on(run)
            self._carried_to()
        if self.ended is not None and not asked.batches:
            self.lease.term.mark_here()  # (every run asked for handed on: where it stops)
            raise self.ended

    def _next_run(self) -> Sequence[Record]:
        """The next run to ask for, from the held records and what more is queued (waiting for
        a batch only if nothing is asked for or held); empty if nothing came."""
        held = self.held
        if not held and not self._fetch(wait=not self.asked.batches):
            return []
        size = self.sizer.size(record_bytes(self._view(held)))
        while len(held) < size and self._fetch(wait=False):
            pass
        run, self.held = held[:size], held[size:]
        view = self._view(run)
        until = self.granted_until
        if until is not None and view[0].offset < until < view[-1].offset + 1:
            below = next(i for i, record in enumerate(view) if record.offset >= until)
            run, self.held = run[:below], run[below:] + self.held
            view = self._view(run)
        return view

    def _fetch(self, wait: bool) -> bool:
        """Fetch a batch into ``held``; whether anything came."""
        batch = self.fetcher.fetch(wait)
        if not batch:
            return False
        self.held.extend(batch.messages if isinstance(batch, MessageRecords) else batch)
        return True

    def _view(self, items: list[Any]) -> Sequence[Record]:
        return MessageRecords(items) if self.views else items

    def _await_grant(self, request: GrantRequest) -> None:
        """Wait for the answer on ``request``; return only if granted (the granted end is then
        the position this child reports)."""
        grant = self.asked.answer(request) or self._wait_for(request)
        if not grant.granted:
            # refused because this child is stopping (a graceful stop, a rebalance): the usual
            # end of a stop, said as info (31 warnings in one operator's session); any other
            # refusal is a warning, during a stop too
            usual = grant.reason == REFUSED_STOPPING
            (self.log.info if usual else self.log.warning)(
                "grant_refused", start=request.start, end=request.end, reason=grant.reason
            )
            if self.pipe.stop_requested:  # (asked before the stop: nothing of it reserved)
                raise ChildExit(EXIT_OK, self.pipe.stop_reason, Stopped(self.reporter.next_offset))
            raise ChildExit(EXIT_NOT_GRANTED, "not_granted")
        self.reporter.granted(request.end)

    def _wait_for(self, request: GrantRequest) -> Grant:
        """The supervisor's answer to ``request``, the lease and `Stop` checked while waiting."""
        while True:
            self.lease.require_here()
            self.lease.term.here()
            msg = self.pipe.receive(min(GRANT_POLL_S, max(0.0, self.lease.remaining())))
            if isinstance(msg, Grant) and msg.request_id == request.request_id:
                return msg
            if isinstance(msg, Stop):  # the answer comes all the same: a granted run is ours
                self.log.info("stop_while_awaiting_grant", start=request.start, end=request.end)
                continue
            self.pipe.aside(msg)

    def _hand_on(self, run: Sequence[Record]) -> None:
        """Hand a granted run to the handling step (a batch plugin: batch by batch) and time
        it for the sizer."""
        started = time.monotonic()
        step = self.step
        if step and len(run) > step:
            for i in range(0, len(run), step):
                self.handling.run(run[i : i + step])
        else:
            self.handling.run(run)
        self.sizer.handled(len(run), time.monotonic() - started)
        self.reporter.run_done()
