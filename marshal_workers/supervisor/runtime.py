"""The supervisor's runtime: a thin shell that feeds the member's core and does what it says.

Theory of operation
-------------------
All decisions live in `core.member.Member` (sans I/O). This shell owns the I/O: the
coordination log's producer and consumer, the children's processes, pipes and shared leases,
a thread pool for blocking broker calls, and the observers (metrics, systemd, offsets).

Each turn (`step`) it waits briefly on the children's pipes and the signal pipe, then feeds the
core, in this order: signals, records read from the log, the log's acknowledgements of appends
(the log's time first: it shows a lease clock that stood still before a child's request is
answered on a lease), children's messages, answers of background lookups, children that exited
(their whole process group killed first), and a tick with the time and the ALO positions the
children published in shared memory. Every time is the lease clock's (`common.leaseclock`), the
one the children read their leases on. After each input it carries out the commands the core
returned. Nothing in a turn blocks on the broker: appends are submitted and acknowledged later,
lookups run on the pool. SIGUSR1 (stack dumps) is pure I/O and handled here.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, assert_never

import structlog

from marshal_workers.childlink.callstate import watchdog_tick
from marshal_workers.childlink.sharedlease import SharedLease
from marshal_workers.common import leaseclock
from marshal_workers.common.errors import ConfigError, MarshalError
from marshal_workers.common.heap import release_freed_memory
from marshal_workers.common.stacks import catches_signal, log_stacks
from marshal_workers.config.runconfig import RunConfig
from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core.childexits import CallSample, read_end, slow_call, watch_call
from marshal_workers.core.member import Member
from marshal_workers.core.settings import MemberSettings
from marshal_workers.fleet.groupcheck import (
    check_partition_count,
    ensure_group_settings,
    own_settings,
)
from marshal_workers.ipc import messages as ipc
from marshal_workers.ipc.exits import EXIT_HANDLER_TIMEOUT, EXIT_KAFKA, EXIT_SETUP
from marshal_workers.ipc.feedwire import silence_for
from marshal_workers.log.interface import CoordinationLog, LogError
from marshal_workers.protocol.metadata import placement_text
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.placement import Placement
from marshal_workers.protocol.rationalizer import RationalizerConfig
from marshal_workers.protocol.slicing import data_topic
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.supervisor.background import Background
from marshal_workers.supervisor.childprocess import ChildHandle, start_child
from marshal_workers.supervisor.childstarts import Start, Starts, Waiting
from marshal_workers.supervisor.datatopics import DataTopics
from marshal_workers.supervisor.feeds import HostFeeds
from marshal_workers.supervisor.observe import ClaimSnapshot, Observer, deliver
from marshal_workers.supervisor.placement import locate_member, refuse_placing_since
from marshal_workers.supervisor.pollthread import LogPollThread
from marshal_workers.supervisor.spare import KEEP_S as SPARE_KEEP_S
from marshal_workers.supervisor.spare import Spare
from marshal_workers.supervisor.waiting import LoopWait, Waitable

if TYPE_CHECKING:  # the fork server's module guards the server at import: not here
    from marshal_workers.childlink.forkserver import ChildContext

Clock = Callable[[], float]

# The loop's turns come as fast as its children and the log wake it (a hundred a second with
# 32 busy children). What can wait a little is done at most once each:
OBSERVE_S = 0.05  # the observers' snapshot (metrics, systemd, slow calls, offset commits):
# as often as an idle loop turns (its wait), and none of them needs it fresher
EXIT_SWEEP_S = 0.25  # every child's exit code looked at, not only those whose exit fd woke


def due(now: float, last: float, every: float) -> bool:
    """Whether a thing done at ``last`` (on the clock that reads ``now``) is due again, once
    ``every`` seconds: also when the clock went back past it."""
    return not now - every < last <= now


def member_settings(
    config: RunConfig, coordination_partitions: int, placement: Placement | None = None
) -> MemberSettings:
    """The core's settings from a supervisor's configuration, for a group coordinated by
    ``placement`` (None: spread over every partition)."""
    c = config
    child = ipc.ChildSpec(
        handler=c.handler,
        mode=c.mode,
        bootstrap_servers=c.bootstrap_servers,
        group_id=c.group,
        client_id=c.client_id,
        instance_id=c.instance_id,
        topic="",
        partition=0,
        start_offset=None,
        fencing_token=0,
        auto_offset_reset=c.auto_offset_reset,
        batch_size=c.batch_size,
        amo_window=c.amo_window,
        nice=c.child_nice,
        kafka_config=tuple(sorted(c.kafka.items())),
        log_json=c.log_json,
        retries=c.retries,
        retry_backoff_s=c.retry_backoff,
        on_failure=c.on_failure,
        dlq_topic=c.dlq_topic,
        max_poison_rate=c.max_poison_rate,
        handler_timeout_s=c.handler_timeout or None,
        feed_silence_s=silence_for(c.heartbeat_interval),
    )
    return MemberSettings(
        group=c.group,
        client_id=c.client_id,
        instance_id=c.instance_id,
        topics=tuple(c.topics),
        mode=c.mode,
        coordination_partitions=coordination_partitions,
        partitioner=c.partitioner,
        rationalizer=RationalizerConfig(
            c.heartbeat_interval_ms,
            num_partitions=coordination_partitions,
            partitioner=c.partitioner,
            admin_client_ids=c.admin_client_ids,
        ),
        child=child,
        stop_timeout=c.stop_timeout,
        max_handler_failures=c.max_handler_failures,
        shared=replace(own_settings(c), placement=placement),
        coordination_topic=c.coordination_topic,
        on_failure=c.on_failure,
        restart_backoff=c.restart_backoff,
        handler_timeout=c.handler_timeout or None,
        poison_park_after=c.poison_park_after,
        poison_park_time=c.poison_park_time,
        placement=placement,
    )


class Supervisor:
    """Runs one member: its core, its children, its I/O."""

    def __init__(
        self,
        config: RunConfig,
        log: CoordinationLog,
        topics: DataTopics,
        mp_context: ChildContext,
        observer: Observer | None = None,
        clock: Clock = leaseclock.now,
        wake_fd: int | None = None,
        wall: Clock = time.time,
    ) -> None:
        self.config = config
        self.log = log
        self.topics = topics
        self.mp = mp_context
        self.observer = observer or Observer()
        self.clock = clock
        self.wall = wall
        self.wake_fd = wake_fd
        self.reader: LogPollThread | None = None  # reads the log, wakes the loop (from start)
        # the core's settings, kept here so the runtime reads what it gave, not the core's state
        self.settings = member_settings(config, log.num_partitions)
        self._new_while_spreading = False  # `supervisor.placement.Located`
        self.member = Member(self.settings)
        self.leases: dict[ClaimKey, SharedLease] = {}
        self.children: dict[ClaimKey, ChildHandle] = {}
        self.background = Background()
        self._signalled: set[ClaimKey] = set()  # children this supervisor signalled
        self._call_seen: dict[ClaimKey, CallSample] = {}  # the handler call each child is in
        self.exit_code: int | None = None
        self._log = structlog.get_logger().bind(
            group=config.group,
            client_id=config.client_id,
            instance_id=config.instance_id,
            pid=os.getpid(),
        )
        # shared slice reads: the host's reader of each sliced partition (`supervisor.feeds`)
        shared = config.slicing.sliced and config.slice_reads == "host"
        self.feeds = HostFeeds(mp_context, self._log) if shared else None
        self.starts = Starts(self._log)  # children start off the loop (`childstarts`)
        self._spare: Spare | None = None  # a child started ahead of the first claim (`spare`)
        self._spare_taken: Spare | None = None  # the spare the first spawn took, if any
        self._starting: dict[ClaimKey, Waiting] = {}
        self._fed: dict[ClaimKey, ipc.ChildSpec] = {}  # the children of a feed, by claim
        self._wait = LoopWait()  # the loop's poll set, kept between turns
        self._swept_at = -math.inf  # when every child's exit code was last looked at
        self._observed_at = -math.inf  # when the observers were last given a snapshot

    @property
    def done(self) -> bool:
        """The member has finished (stopped, or refused to go on)."""
        return self.member.done

    # ---- start ------------------------------------------------------------------------------

    def start(self, catch_up_timeout: float = 60.0) -> None:
        """Locate the group's coordination partitions (`supervisor.placement`), catch up on
        them, check what the group must agree on, then let the core resume this client's
        claims and claim, the log read from then on by the poll thread."""
        self._start_spare()  # it sets itself up while the log is read and the claims made
        # the data topics first: a run refused at start writes nothing (no group settings)
        partitions = self.topics.partitions()
        try:
            self._locate(len(partitions) + 1, catch_up_timeout)
            folded = self._catch_up(catch_up_timeout)
            release_freed_memory()  # what the catch-up read is folded: its buffers are free
            if self.member.done:  # refused during the catch-up (a Marshal Go fleet writes here)
                code = self.member.exit_code
                raise MarshalError(self.member.exit_reason, code if code is not None else 1)
            self._preflight(catch_up_timeout)
        except LogError as exc:  # one line and exit 1, as any start-up failure
            raise MarshalError(
                f"coordination log {self.config.coordination_topic}: {exc}"
            ) from None
        # logged once started: before a start-up error nothing is printed but its line
        placement = placement_text(self.settings.placement)
        self._log.info("group_located", placement=placement, followed=sorted(self.log.followed))
        self._log.info("caught_up", records=folded, partitions=len(partitions))
        if self._spare is not None:  # its time counts from the first claims, not the catch-up
            self._spare.since = self.clock()
        self.reader = LogPollThread(self.log.poll)
        self.reader.start()
        self._run(self.member.begin(self.clock(), self.wall(), partitions))
        self.observer.ready()

    def _locate(self, claims: int, timeout_s: float) -> None:
        """Find (or, for a new group on a topic that places them, choose) where the group is
        coordinated; make the core for it; follow its partitions from their first records."""
        located = locate_member(self.log, self.config, claims, timeout_s)
        placement = located.placement
        self._new_while_spreading = located.new_while_spreading
        if placement != self.settings.placement:
            self.settings = member_settings(self.config, self.log.num_partitions, placement)
            self.member = Member(self.settings)
        self.log.settle(self.member.worlds)

    def _catch_up(self, timeout_s: float) -> int:
        """Fold the log up to its end as it is now; return how many records that was."""
        deadline = self.clock() + timeout_s
        targets = self.log.end_offsets(timeout_s)
        folded = 0
        worlds = self.member.worlds
        while not all(worlds[p].next_offset >= end for p, end in targets.items()):
            remaining = deadline - self.clock()
            if remaining <= 0:
                behind = {p: end - worlds[p].next_offset for p, end in targets.items()}
                raise LogError(
                    f"coordination log not caught up within {timeout_s:.0f}s "
                    f"(records still to read per partition: {behind})"
                )
            records = self.log.poll(min(remaining, 0.5))
            folded += len(records)
            self._feed(inp.RecordsRead(self.clock(), records))
        return folded

    def _preflight(self, timeout_s: float) -> None:
        """Before anything is claimed: the partition count recorded at init (exit 2 without a
        record, 4 for another count), and the group's shared settings (recorded by its first
        member; exit 2 when this member's differ)."""
        c, worlds = self.config, self.member.worlds
        if self.settings.placement is None:  # placed: its count checked where it was located
            check_partition_count(c.coordination_topic, worlds, self.log.num_partitions)
        if self._new_while_spreading:  # before writing the group's first settings
            refuse_placing_since(worlds, c.group)
        mine = self.settings.shared
        try:
            if mine is not None:
                ensure_group_settings(self.log, worlds, self._catch_up, mine, timeout_s)
        except ConfigError:  # placed meanwhile, say: started again it joins the placement
            if self._new_while_spreading:
                self._catch_up(timeout_s)
                refuse_placing_since(worlds, c.group)
            raise
        if self._new_while_spreading:  # and after: the log folded to its end past them
            self._catch_up(timeout_s)
            refuse_placing_since(worlds, c.group)

    # ---- the loop ---------------------------------------------------------------------------

    def step(self, signals: Sequence[signal.Signals], wait_s: float = 0.05) -> None:
        """One turn of the loop."""
        for sig in signals:
            if sig is signal.SIGUSR1:
                self.dump_stacks()
            else:
                if sig is signal.SIGHUP:  # a reload: the spare imported the handler before it
                    self._drop_spare(say=True)
                self._feed(inp.SignalReceived(self.clock(), sig))
        woke, exit_fds = self._wait_turn(wait_s)
        # the clocks, then the log: the wall clock shows a suspend the lease clock did not
        # count, the log's time a lease clock that stood still (a paused VM), and the core must
        # know either before it answers a child's request on a lease
        self._feed(inp.ClocksRead(self.clock(), self.wall()))
        self._take_log()
        for key in woke:
            self._read_child(key)
        for answer in self.background.results():
            self._feed(answer)
        for done in self.starts.results():
            self._started(done)
        self._reap_children(woke, exit_fds)
        now = self.clock()
        if self._spare is not None and now - self._spare.since > SPARE_KEEP_S:
            self._drop_spare(say=True)  # this member claimed nothing yet: none idles for it
        self._feed(inp.Tick(now, self.wall(), self._positions()))
        if due(now, self._observed_at, OBSERVE_S):
            self._observed_at = now
            self.observer.tick(self.snapshot(now), healthy=self.member.healthy(now))

    def _wait_turn(self, wait_s: float) -> tuple[dict[ClaimKey, None], set[ClaimKey]]:
        """Wait up to ``wait_s`` for a child's pipe or exit fd, a started child, a signal or
        the log's records; the children whose pipe or exit fd is ready (in that order), and
        those whose exit fd is."""
        ends: dict[Waitable, ClaimKey] = {}
        for key, handle in self.children.items():
            if not handle.pipe_ended:
                ends[handle.conn] = key
            if handle.sentinel is not None:
                ends[handle.sentinel] = key
        waitables: list[Waitable] = [*ends, self.starts.fileno()]
        if self.wake_fd is not None:
            waitables.append(self.wake_fd)
        reader = self.reader
        assert reader is not None, "start() before step()"
        waitables.append(reader.fileno())  # the log's records wake the loop
        ready = self._wait.wait(waitables, timeout=wait_s)
        woke = dict.fromkeys(ends[obj] for obj in ready if obj in ends)
        return woke, {ends[obj] for obj in ready if isinstance(obj, int) and obj in ends}

    def _take_log(self) -> None:
        """Feed the core what the log's reader read and the outcomes of this member's appends."""
        assert self.reader is not None, "start() before step()"
        records, errors = self.reader.take()
        for error in errors:
            self._log.warning("coordination_read_failed", error=str(error))
        if records:
            self._feed(inp.RecordsRead(self.clock(), records))
        for op, outcome in self.log.acks():
            now = self.clock()
            if isinstance(outcome, str):
                self._feed(inp.AppendFailed(now, op, outcome))
            else:
                self._feed(inp.AppendDone(now, op, outcome))

    def _reap_children(self, woke: Collection[ClaimKey], exit_fds: Collection[ClaimKey]) -> None:
        """Watch the running children's handler calls; feed the core each ended child's exit
        (its process group killed first).

        A child's exit code is looked at when its exit fd or pipe woke the loop (``woke``),
        when this supervisor killed it (`ChildHandle.exitcode` then also reads the kernel),
        when it has no exit fd, and for every child once each `EXIT_SWEEP_S`: a spawned
        child's exit fd is a pipe that a process it forked can hold open after it ended.
        Such a child can also close its end while it runs (a handler closing every fd): its
        exit fd then shows an end that is not there, and would wake every turn; it is no
        longer waited on, and its exit code is looked at every turn instead (``exit_fds``:
        the children whose exit fd is ready)."""
        now = self.clock()
        sweep = due(now, self._swept_at, EXIT_SWEEP_S)
        if sweep:
            self._swept_at = now
        for key, handle in list(self.children.items()):
            look = handle.sentinel is None or sweep or key in woke or handle.killed_at is not None
            code = handle.exitcode if look else None
            if code is None and key in exit_fds:
                handle.sentinel = None  # ready, and no exit to read: see above
            if code is None:
                self._watch_call(key, handle)
                continue
            self._read_child(key)
            handle.signal_group(signal.SIGKILL)  # whatever the handler started dies too
            handle.close()
            del self.children[key]
            self._call_seen.pop(key, None)
            calls = self._lease(key).calls
            now = self.clock()
            note = calls.take_end_note()
            end = read_end(code, note, killed_by_supervisor=key in self._signalled, now=now)
            self._signalled.discard(key)
            fed = self._fed.pop(key, None)
            if self.feeds is not None:  # (the readers are the start thread's: `childstarts`)
                self.starts.then(partial(self.feeds.child_ended, fed, code, note.feed_lost))
            if fed is not None and (note.feed_lost or end.code == EXIT_KAFKA):
                end = replace(end, feed_lost=True)  # its reader's loss (`childexits.decide`)
            self.observer.child_exited(key, handle.pid, end.code)
            self._log.info(
                "child_exited",
                topic=key.topic,
                partition=key.partition,
                child_pid=handle.pid,
                code=end.code,
            )
            position = calls.handled_position()
            self._feed(inp.ChildExited(now, key, code, end, position, note.stopped_at))

    def _positions(self) -> dict[ClaimKey, int]:
        """ALO: the children's handled positions, from their shared cells."""
        if self.config.mode is not Mode.ALO:
            return {}
        out = {}
        for key in self.children:
            position = self._lease(key).calls.handled_position()
            if position is not None:
                out[key] = position
        return out

    def _watch_call(self, key: ClaimKey, handle: ChildHandle) -> None:
        """The backstop of the handler deadline: a call that outlived it (its watchdog could
        not act: a call holding the GIL in C) gets its child killed, noted as the watchdog's
        kill would be, so its exit is read as a handler timeout on that record."""
        calls = self._lease(key).calls
        seen, stuck = watch_call(
            self._call_seen.get(key),
            int(calls.in_call.value),
            calls.handled_position(),
            float(calls.keep_until.value),
            self.clock(),
            self.config.handler_timeout or None,
        )
        if seen is None:
            self._call_seen.pop(key, None)
        else:
            self._call_seen[key] = seen
        if stuck:
            self._log.warning(
                "handler_call_stuck",
                topic=key.topic,
                partition=key.partition,
                offset=calls.handled_position(),
                handler_timeout_s=self.config.handler_timeout,
            )
            calls.fence.value = EXIT_HANDLER_TIMEOUT
            handle.signal_group(signal.SIGKILL)
            self._call_seen.pop(key, None)

    def _read_child(self, key: ClaimKey) -> None:
        handle = self.children.get(key)
        if handle is None:
            return
        conn = handle.conn
        while True:
            try:
                if not conn.poll():
                    return
                message: ipc.ToSupervisor = conn.recv()
            except (EOFError, OSError):
                # the child's end is closed (what it sent before is read first): it ended
                # (reaped once its exit shows), or its handler closed that fd and it runs on
                # until it next uses the pipe (it then ends: `child.pipe`). The end shows at
                # every turn: it is no longer waited on (`_wait_turn`), so a child still
                # running does not spin the loop
                handle.pipe_ended = True
                return
            try:
                self._feed(inp.ChildSaid(self.clock(), key, message))
            except OSError:  # carrying it out failed (a log line to a full stderr, say): the
                return  # pipe is still waited on, and what else the child said read next turn

    def _feed(self, event: inp.Input) -> None:
        self._run(self.member.feed(event))

    # ---- carrying out commands -------------------------------------------------------------

    def _run(self, commands: list[cmd.Command]) -> None:
        """Carry out the core's commands in order. The simulator's `SimNode._run` is the other
        interpreter of the same commands: each ends in `assert_never`, so mypy refuses a
        command either leaves out, and tests/sim/test_command_contract.py holds the two to the
        same effects."""
        for c in commands:
            match c:
                case cmd.Append():
                    self.log.submit(c.op, c.partition, c.key, c.value)
                case cmd.SetLease():
                    self._set_lease(c.key, c.deadline)
                case cmd.DropLease():
                    self._drop_lease(c.key)
                case cmd.Spawn():
                    self._spawn(c)
                case cmd.SignalChild():
                    self._signal_child(c)
                case cmd.TellChild():
                    self._tell_child(c.key, c.message)
                case cmd.LookupStart():
                    self.background.submit(self._lookup_job(c.key))
                case cmd.Discover():
                    self.background.submit(self._discover_job)
                case cmd.FindLogEnd():
                    self.background.submit(self._log_end_job)
                case cmd.Log():
                    getattr(self._log, c.level)(c.event, **c.fields)
                case cmd.Observe():
                    self._observe(c)
                case cmd.Exit():
                    self.exit_code = c.code
                case _:
                    assert_never(c)

    def _set_lease(self, key: ClaimKey, deadline: float) -> None:
        lease = self._lease(key)
        if deadline == 0.0:
            lease.revoke()
        else:
            lease.extend_to(deadline)

    def _drop_lease(self, key: ClaimKey) -> None:
        dropped = self.leases.pop(key, None)
        if dropped is not None:
            dropped.revoke()

    def _signal_child(self, c: cmd.SignalChild) -> None:
        starting = self._starting.get(c.key)
        if starting is not None:  # sent once it has started (a kill over any other signal)
            if starting.signalled is None or c.signal is signal.SIGKILL:
                starting.signalled = c
            return
        handle = self.children.get(c.key)
        if handle is not None:
            self._signalled.add(c.key)
            lease = self.leases.get(c.key)
            if c.signal is signal.SIGTERM:
                # the child alone: it stops at the next record boundary (`child.termstop`), its
                # helpers live until then
                if lease is not None:
                    lease.calls.term_asked.value = 1
                handle.signal_child(c.signal)
            else:
                handle.signal_group(c.signal)
            if c.signal is signal.SIGKILL:
                self.observer.fencing_kill(c.key, handle.pid, c.reason)

    def _tell_child(self, key: ClaimKey, message: ipc.ToChild) -> None:
        starting = self._starting.get(key)
        if starting is not None:  # told once it has started, in order
            starting.told.append(message)
            return
        handle = self.children.get(key)
        if handle is not None:
            handle.send(message)

    def _observe(self, c: cmd.Observe) -> None:
        """An observer's failure (a metrics bug, a full systemd socket) is logged, never fatal:
        the claims' heartbeats matter more than their statistics."""
        try:
            deliver(self.observer, c.what)
        except Exception as exc:
            self._log.error("observer_failed", observation=type(c.what).__name__, error=repr(exc))

    def _lease(self, key: ClaimKey) -> SharedLease:
        lease = self.leases.get(key)
        if lease is None:
            lease = self.leases[key] = SharedLease(self.mp, self.clock)
        return lease

    def _start_spare(self) -> None:
        """Start a child ahead of the first claim (`supervisor.spare`)."""
        spare = self._spare = Spare(SharedLease(self.mp, self.clock), self.clock(), self._log)
        template, mp = self.settings.child, self.mp
        self.starts.then(lambda: spare.start(template, mp))

    def _drop_spare(self, say: bool = False) -> None:
        """Kill the spare if no spawn took it (`supervisor.spare`); ``say``: log it."""
        spare, self._spare = self._spare, None
        if spare is not None:
            self.starts.then(partial(spare.kill, say))

    def _spawn(self, c: cmd.Spawn) -> None:
        """Start the child off the loop (`childstarts`), its host's reader first if it needs
        one; until it has started, what the core tells it or signals it waits here. The
        member's first spawn takes the spare child, if there is one: its lease becomes the
        claim's here, on the loop, before the core writes to the claim's lease again."""
        spare, self._spare = self._spare, None
        if spare is not None:
            self._spare_taken = spare  # (`_started` says whether it was)
            held = self.leases.get(c.key)
            if held is not None:  # what the core gave the claim so far
                spare.lease.extend_to(held.deadline)
            self.leases[c.key] = spare.lease
        lease, feeds, mp = self._lease(c.key), self.feeds, self.mp

        def job() -> tuple[ipc.ChildSpec, ChildHandle]:
            spec = c.spec
            try:
                if feeds is not None and spec.slice is not None:
                    spec = feeds.fed(spec)
                taken = spare.take(spec) if spare is not None else None
            except BaseException:
                if spare is not None:
                    spare.kill()  # (no process idles for a start that failed)
                raise
            return spec, taken if taken is not None else start_child(spec, lease, mp)

        self._starting[c.key] = Waiting(c)
        self.starts.start(c.key, job)

    def _started(self, done: Start) -> None:
        """A start ended: the child is the claim's now (and hears what waited for it), or no
        process could be made (limits, memory): this claim's failure alone."""
        key = done.key
        taken, self._spare_taken = self._spare_taken, None  # (the first start's, if any)
        starting = self._starting.pop(key, None)
        if starting is None:  # nobody waits for it (never so: the core spawns once per exit)
            if done.handle is not None:
                done.handle.signal_group(signal.SIGKILL)
            return
        if done.handle is None:
            self._log.error(
                "child_start_failed", topic=key.topic, partition=key.partition,
                error=str(done.error),
            )  # fmt: skip
            # it never ran: it began no record at or after its start (AMO: what it was handed
            # from the child before is handed on again, or reported lost)
            start = starting.spawn.spec.start_offset
            self._feed(inp.ChildExited(self.clock(), key, EXIT_SETUP, None, start, start))
            return
        c, handle = starting.spawn, done.handle
        if self.feeds is not None and done.spec is not None and done.spec.slice is not None:
            self._fed[key] = done.spec
        self.children[key] = handle
        self._signalled.discard(key)
        self.observer.child_started(key, handle.pid, c.restart)
        self._log.info(
            "child_started",
            topic=key.topic,
            partition=key.partition,
            child_pid=handle.pid,
            position=c.spec.start_offset,
            token=c.spec.fencing_token,
            restart=c.restart,
            spare=taken is not None and taken.taken == handle.pid,
        )
        for message in starting.told:
            handle.send(message)
        if starting.signalled is not None:
            self._signal_child(starting.signalled)

    def _lookup_job(self, key: ClaimKey) -> Callable[[], inp.Input]:
        earliest = self.config.auto_offset_reset == "earliest"

        def job() -> inp.Input:
            try:
                low, high = self.topics.watermarks(data_topic(key.topic), key.partition)
            except Exception as exc:  # any failure is this claim's alone
                return inp.StartFailed(self.clock(), key, str(exc))
            return inp.StartFound(self.clock(), key, low if earliest else high)

        return job

    def _log_end_job(self) -> inp.Input | None:
        """Where the coordination log ends now; a failure is logged (the core asks again)."""
        try:
            ends = self.log.end_offsets(5.0)
        except Exception as exc:  # never take the loop down
            self._log.warning("coordination_log_end_failed", error=str(exc))
            return None
        return inp.LogEndFound(self.clock(), ends)

    def _discover_job(self) -> inp.Input:
        try:
            count = self.log.current_num_partitions(10.0)
            found = self.topics.partitions()
        except (MarshalError, LogError) as exc:
            return inp.DiscoveryFailed(self.clock(), str(exc))
        except Exception as exc:  # never take the loop down
            return inp.DiscoveryFailed(self.clock(), repr(exc))
        return inp.PartitionsFound(self.clock(), found, count)

    # ---- operator requests and the end ------------------------------------------------------

    def request_stop(self, fast: bool) -> None:
        """TERM (fast=False) or INT/QUIT (fast=True), as if the signal had come."""
        self._run(self.member.request_stop(self.clock(), fast))

    def dump_stacks(self) -> None:
        """SIGUSR1: log every thread's stack, and ask every child for its own.

        A child answers `DumpStacks` between batches with a line per thread, and SIGUSR1 at once
        (even while stuck in its handler) with faulthandler's dump as one line. It is sent
        SIGUSR1 only once it has registered for it (the default action would end it)."""
        threads = log_stacks(self._log)
        for handle in self.children.values():
            handle.send(ipc.DumpStacks())
            if catches_signal(handle.pid, signal.SIGUSR1):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(handle.pid, signal.SIGUSR1)
        self._log.info("stack_dump_done", threads=threads, children_asked=len(self.children))

    def snapshot(self, now: float) -> dict[ClaimKey, ClaimSnapshot]:
        """The held claims as observers see them at ``now``."""
        out = {}
        lag = watchdog_tick(self.config.handler_timeout)  # how stale a published start may be
        for key, held in self.member.held.items():
            handle = self.children.get(key)
            age = self._lease(key).calls.call_age(now) if handle is not None else None
            out[key] = ClaimSnapshot(
                key,
                held.token,
                held.position if held.position is not None else -1,
                held.lease_remaining(now),
                handle.pid if handle is not None else None,
                held.phase.value,
                age,
                slow_call(age, self.config.handler_timeout, lag_s=lag),
            )
        return out

    def kill_all(self) -> None:
        """Revoke every lease and kill every child: nothing outlives the supervisor."""
        self._drop_spare()  # (on the start thread, before its close)
        for lease in self.leases.values():
            lease.revoke()
        for key, handle in self.children.items():
            handle.signal_group(signal.SIGKILL)
            handle.forget()  # dead now: the interpreter's exit joins none (a stopped server)
            self.observer.fencing_kill(key, handle.pid, "supervisor exiting")
        self.starts.close(self.feeds.close if self.feeds is not None else None)
        self.background.close()
        if self.reader is not None:
            self.reader.close()
