"""The child process: one claimed partition, its own consumer, the user's handler, self-fencing.

Theory of operation. The supervisor calls `start_child` (`supervisor.childprocess`) for a
partition it holds, with a `ChildSpec` (where to start, which handler, which fencing token) and
the claim's `SharedLease`, already extended to a deadline in the future. The child is forked by
the fork server (`forkserver`: a process that imported the child's modules and runs no thread;
the supervisor itself is never forked, as librdkafka's threads do not survive a fork) and, in
`child_main`:

1. leads its own process group, forks the group guardian (which SIGKILLs the group once the
   child has ended, however it ended), asks Linux to SIGKILL it when its parent (the fork server,
   which exits with the supervisor) dies, and exits at once if the supervisor or the fork server
   is already gone (the race after ``prctl``) (see `marshal_workers.child.fencing`);
2. configures logging, bound to its claim; SIGTERM is logged and then ends it (default action),
   once the chain runs at the next record boundary (`child.termstop`);
   SIGINT is ignored (the supervisor owns shutdown and says `Stop`);
3. starts the watchdog thread, which ends the child at the lease deadline, when the supervisor
   is gone, or when a handler call outlives ``handler_timeout`` (exit 10), even while the main
   thread is stuck in the handler (it also notes the code in the shared cells, `callstate`);
   the guardian then kills the rest of the group;
4. loads the handler (a function, or a class or instance with ``setup``, ``handle`` or
   ``handle_batch``, ``teardown``), calls ``setup(ctx)``, opens its consumer ``assign()``ed to
   the partition and sends `Started`;
5. turns its chain of steps (`child.loop`): read `Stop` from the pipe, check the lease, fetch
   a batch, then
   - ALO: handle each record (the lease checked before every handler call) and send `Progress`
     (after a short batch at once; while full batches keep coming, at most every 50 ms);
   - AMO: send `GrantRequest` for a run of what is fetched (about half a second of handling:
     `protocol.reservations`), wait for the matching `Grant` (checking the lease and the pipe),
     and only if granted handle it; the granted end is the new position.
   On `Stop` the batch in hand is finished, ``teardown(ctx, reason)`` runs with the `Stop`'s
   reason (``stop``, or ``revoke`` when the claim is taken away), `Stopped` is sent.

A child may also be started ahead of its claim, the supervisor's spare (`spare_main`,
`supervisor.spare`): it takes step 1, configures its logs, imports the handler's module and
makes its consumer (connecting, assigned nothing: `child.consumer.Prepared`), then waits for
its spec on the pipe, holding no lease and reading nothing, and goes on from step 2 with the
spec it is handed and the lease it was started with, which is the claim's by then. The
supervisor gone meanwhile (the pipe closed), it exits.

A failing handler call goes through the error policy (`marshal_workers.child.policy`): retries
in the child with backoff, the lease checked before every attempt and throughout every wait;
then ``dlq`` (`marshal_workers.child.deadletters`), ``skip`` or ``stop``. The unit is a record,
or the whole batch for a ``handle_batch`` plugin (retried as a whole; on dlq every record of it
is dead-lettered).

- ALO: a dead-lettered record counts as handled (`Progress` passes it) only once the broker has
  acknowledged the dead letter; a skipped one once the skip is logged. ``stop`` reports
  `HandlerFailed` and `Progress` stops before the record, so the next child retries it. A `Stop`
  during a retry wait ends the child at once, before the record (nothing is lost).
- AMO: the batch was granted (committed) before it was handled. ``dlq`` and ``skip`` go on with
  the batch; ``stop`` loses the failing record and the rest of the batch (at most once). A
  `Stop` during a retry wait cuts the retries short: the policy applies at once and the batch
  is finished without further retries, so a dead-letter policy still catches the record.

Every other ending also calls ``teardown(ctx, reason)`` (when ``setup`` succeeded) with the
reason named below, except the watchdog's and the signals', which end the process at once.

A handler that leaves the call in any way (an exception of any class, ``SystemExit`` and
``KeyboardInterrupt`` included) is a failure under the policy. One that ends the process itself
(``os._exit``, a signal) leaves its record in the shared cells: the supervisor applies the
policy to it (`childexits.read_end`).

Exit codes (the protocol with the supervisor; negative `ChildHandle.exitcode`: a signal):

====  =====================  ===============================================================
0     EXIT_OK                clean stop after `Stop`; `Stopped` was sent (its reason)
1     EXIT_RUNTIME           a bug in the child itself, logged with its traceback
4     EXIT_HANDLER_FAILED    the handler failed and the policy says stop (``on_failure`` stop, the
                             poison rate exceeded, a dead letter failed, `StopProcessing`):
                             `HandlerFailed` was sent; ALO: the record was not committed
                             (`Progress` stops before it); AMO: it and the rest of its batch are
                             lost
5     EXIT_LEASE_EXPIRED     the lease ended (expired, or revoked: deadline 0) before the work
6     EXIT_PARENT_GONE       the supervisor died (reparented) or closed the pipe
7     EXIT_NOT_GRANTED       AMO: the supervisor refused a batch; nothing of it was handled
8     EXIT_SETUP             the handler could not be loaded or set up, or the spec is unusable
9     EXIT_KAFKA             the consumer could not be created or assigned, or a fatal error
10    EXIT_HANDLER_TIMEOUT   a handler call outlived ``handler_timeout``: the watchdog ended the
                             child (and the guardian its group); the record in progress is in
                             the shared cells, where the supervisor reads it
                             (`childexits.read_end`)
====  =====================  ===============================================================

However the child ends, its guardian then SIGKILLs its process group, and the supervisor does
too once it has reaped the child.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import signal
import sys
from multiprocessing.connection import Connection
from types import FrameType
from typing import Any, NoReturn

import structlog

from marshal_workers.child.consumer import Prepared
from marshal_workers.child.fencing import (
    REASON_HANDLER_TIMEOUT,
    REASON_LEASE_EXPIRED,
    REASON_PARENT_GONE,
    FirstFence,
    Watchdog,
    become_group_leader,
    fence_on_resume,
    parent_to_watch,
    set_parent_death_signal,
    start_group_guardian,
    write_with_timeout,
)
from marshal_workers.child.loop import GC_THRESHOLDS, ChildLoop
from marshal_workers.child.termstop import TermStop
from marshal_workers.childlink.sharedlease import SharedLease
from marshal_workers.common import leaseclock
from marshal_workers.common.logs import configure_logging, raw_line
from marshal_workers.common.stacks import collect_fault_dumps
from marshal_workers.common.threadsignals import start_leaving_to_the_main_thread
from marshal_workers.common.workdir import working_directory_on_path
from marshal_workers.handler.loading import load_handler
from marshal_workers.ipc.exits import (
    EXIT_HANDLER_FAILED,
    EXIT_HANDLER_TIMEOUT,
    EXIT_KAFKA,
    EXIT_LEASE_EXPIRED,
    EXIT_NOT_GRANTED,
    EXIT_PARENT_GONE,
    EXIT_SETUP,
)
from marshal_workers.ipc.messages import ChildSpec

__all__ = [
    "EXIT_HANDLER_FAILED",
    "EXIT_KAFKA",
    "EXIT_LEASE_EXPIRED",
    "EXIT_NOT_GRANTED",
    "EXIT_PARENT_GONE",
    "EXIT_SETUP",
    "child_main",
    "spare_main",
]

FENCE_EXIT_CODES = {
    REASON_LEASE_EXPIRED: EXIT_LEASE_EXPIRED,
    REASON_PARENT_GONE: EXIT_PARENT_GONE,
    REASON_HANDLER_TIMEOUT: EXIT_HANDLER_TIMEOUT,
}
LAST_WORDS_TIMEOUT_S = 0.05


def child_main(
    spec: ChildSpec, lease: SharedLease, conn: Connection, supervisor_pid: int
) -> NoReturn:
    """The child process's entry point (see the module docstring); never returns."""
    parent = become_child(supervisor_pid, spec.log_json)
    before = BeforeImport(spec.log_json)
    before.claim(spec)
    run_child(spec, lease, conn, parent, before)


def spare_main(
    template: ChildSpec, lease: SharedLease, conn: Connection, supervisor_pid: int
) -> NoReturn:
    """A child started ahead of its claim (`supervisor.spare`): step 1 of the module doc, its
    logs and signals set as any child sets them before its handler's import (`BeforeImport`),
    the handler's module imported and its consumer made (`child.consumer.Prepared`: it connects
    meanwhile, assigned nothing), then it waits for its claim's spec on the pipe and goes on
    as any child with it and ``lease``, which the supervisor made the claim's. Until then it
    holds no lease, reads nothing and handles nothing, and its watchdog has not started (a
    handler module that looks at the threads at its import sees one fewer). The supervisor
    gone (the pipe closed), it exits."""
    parent = become_child(supervisor_pid, template.log_json)
    before = BeforeImport(template.log_json)
    with contextlib.suppress(Exception):  # (not importable: the spec's setup says so, as usual)
        working_directory_on_path()
        load_handler(template.handler)  # (imports and looks up; its setup waits for the spec)
    prepared: Prepared | None = None
    with contextlib.suppress(Exception):  # (none: the claim's child opens its own, as usual)
        prepared = Prepared(template)  # connects meanwhile; assigned nothing (`child.consumer`)
    try:
        spec = conn.recv()
    except (EOFError, OSError):
        os._exit(EXIT_PARENT_GONE)
    if not isinstance(spec, ChildSpec):
        os._exit(EXIT_SETUP)
    if spec.log_json != template.log_json:
        configure_logging(spec.log_json)
        before.log_json = spec.log_json
    before.claim(spec)
    run_child(spec, lease, conn, parent, before, prepared)


def become_child(supervisor_pid: int, log_json: bool) -> int:
    """Step 1 of the module doc and the logs' configuration; the pid to watch as the parent
    (the process exits at once if the supervisor or the fork server is already gone)."""
    become_group_leader()
    start_group_guardian()  # before any thread exists: a fork copies only the calling thread
    faulthandler.enable(all_threads=True)  # a crash in C code still shows the Python stacks
    with contextlib.suppress(OSError):  # if it fails, the watchdog's parent-pid check remains
        set_parent_death_signal(signal.SIGKILL)
    parent = parent_to_watch(supervisor_pid)
    if parent is None:
        os._exit(EXIT_PARENT_GONE)
    configure_logging(log_json)
    return parent


class BeforeImport:
    """What a child sets before it imports its handler's module, so that what the module sets
    at its import stands (a spare sets it before its claim is known, `spare_main`): SIGTERM's
    last words, SIGINT ignored, SIGUSR1's stack dumps, the garbage collector's thresholds
    (`GC_THRESHOLDS`: before the plugin's setup, which may set its own). Its lines carry the
    claim's fields once the claim is known (`claim`)."""

    def __init__(self, log_json: bool) -> None:
        self.log_json = log_json
        self.bound: dict[str, Any] = {"pid": os.getpid()}
        self.log: Any = structlog.get_logger("marshal_workers.child.main").bind(**self.bound)
        collect_fault_dumps(self, "stack_dump")  # SIGUSR1: every stack at once, even mid-handler
        self.term: TermStop | None = None  # set once the claim's loop exists (`run_child`)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor owns shutdown
        gc.set_threshold(*GC_THRESHOLDS)

    def claim(self, spec: ChildSpec) -> None:
        """The claim's fields on every line from now on (as the supervisor's lines say them)."""
        self.bound = {
            "group": spec.group_id,
            "topic": spec.topic,
            "partition": spec.partition,
            "client_id": spec.client_id,
            "instance_id": spec.instance_id,
            "pid": os.getpid(),
            "fencing_token": spec.fencing_token,
        }
        if spec.slice is not None:  # which slice of the partition
            self.bound["slice"] = spec.slice.name
        self.log = structlog.get_logger("marshal_workers.child.main").bind(**self.bound)

    def info(self, event: str, **fields: Any) -> None:
        """A line (the stack dumps' thread logs through this)."""
        self.log.info(event, **fields)

    def last_words(self, event: str, **fields: Any) -> None:
        """A warning line written at once: no structlog here, as its writer lock may be held by
        the thread this interrupts."""
        line = raw_line(self.log_json, event, "warning", {**self.bound, **fields})
        write_with_timeout(2, line, LAST_WORDS_TIMEOUT_S)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if self.term is not None and self.term.request():
            return  # the chain runs: it stops at the next record boundary (`child.termstop`)
        self.last_words("child_terminated", signal="SIGTERM")
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def run_child(
    spec: ChildSpec,
    lease: SharedLease,
    conn: Connection,
    parent: int,
    before: BeforeImport,
    prepared: Prepared | None = None,
) -> NoReturn:
    """Steps 2-5 of the module doc for ``spec`` (what comes before the handler's import set by
    ``before``; a spare's consumer made before its claim, ``prepared``); never returns."""
    calls, last_words = lease.calls, before.last_words

    def words(reason: str, by: str, code: int) -> None:
        calls.fence.value = code  # the fencer's reason, whatever the status turns out to be
        if reason == REASON_HANDLER_TIMEOUT:
            started = calls.started.value
            last_words(
                "handler_timeout",
                offset=calls.handled_position(),
                spent_s=round(leaseclock.now() - started, 3) if started else None,
                handler_timeout_s=spec.handler_timeout_s,
                exit_code=code,
                by=by,
            )
        else:
            last_words("child_fenced", reason=reason, exit_code=code, by=by)

    # it ends with os._exit: the guardian then kills the rest of the group (the handler's helpers)
    fence = FirstFence(words, FENCE_EXIT_CODES.__getitem__)
    loop = ChildLoop(spec, lease, conn, before.log, prepared=prepared)
    loop.lease.term.last_words = last_words
    before.term = loop.lease.term
    start_leaving_to_the_main_thread(
        Watchdog(
            lease, parent, lambda reason: fence(reason, "watchdog"), call_clock=loop.call_clock
        )
    )
    fence_on_resume(lease, lambda reason: fence(reason, "resume"))
    code = loop.run()
    sys.stdout.flush()
    sys.stderr.flush()
    # not sys.exit: a non-daemon thread the handler left behind must not keep us alive
    os._exit(code)
