"""What a child and its supervisor say to each other over their pipe, and what a child starts with.

Child to supervisor: `Started`, `Progress` (ALO: handled up to an offset), `GrantRequest`
(AMO: may I handle this batch?), `HandlerFailed`, `Stopped`, `Stats` (about once a second, for
the metrics). Supervisor to child: `Grant` (the answer), `Stop` (finish the batch in hand, then
report and exit), `DumpStacks` (SIGUSR1). Everything is a small frozen dataclass, pickled over a
`multiprocessing` connection.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.slicing import Slice

# why a child stops (`HandlerFailed.cause`)
CAUSE_POLICY = "on_failure_stop"  # the policy is stop
CAUSE_FATAL = "stop_processing"  # the handler raised StopProcessing
CAUSE_POISON_RATE = "poison_rate"  # dlq/skip, but too many poison records within a minute
CAUSE_DLQ_FAILED = "dlq_failed"  # dlq, but the dead-letter write did not succeed
POISON_WINDOW_S = 60.0  # max_poison_rate counts the units of this window (`Poisoned`)


@dataclass(frozen=True, slots=True)
class ChildSpec:
    """Everything a child needs to process one claimed partition."""

    handler: str
    mode: Mode
    bootstrap_servers: str
    group_id: str
    client_id: str
    instance_id: str
    topic: str  # the data topic (a slice's claim names it in its own topic field)
    partition: int
    start_offset: int | None
    fencing_token: int
    auto_offset_reset: str = "earliest"
    batch_size: int = 500
    amo_window: int = 32000  # AMO: records reserved and not handled, at most (`child.grants`)
    batch_timeout_s: float = 0.2
    nice: int = 0  # added to the handler thread's nice once its first record is dealt with
    nice_after_s: float = 0.1  # or this long after setup, if its first record takes longer
    kafka_config: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    log_json: bool = True
    # error policies (see marshal_workers.child.policy)
    retries: int = 3
    retry_backoff_s: float = 0.5
    on_failure: str = "stop"  # dlq, skip or stop
    dlq_topic: str = "{topic}.dlq"  # {topic} is replaced by the partition's topic
    max_poison_rate: int = 60  # dead-lettered or skipped per minute before stop; 0: no limit
    # the partition's poison units of the last minute before this child, as ages (seconds
    # before the spawn): the rate is the partition's, not the child's (`Poisoned`)
    poison_ages: tuple[float, ...] = ()
    handler_timeout_s: float | None = 300.0  # per handler call (batch); None: no deadline
    # a record the previous child of the claim failed on by ending (timeout, os._exit, signal):
    # settle it by the policy (dlq or skip) without calling the handler again
    settle: Settle | None = None
    # ordering key or unordered: the part of the partition this child takes (`slicing`)
    slice: Slice | None = None
    # shared slice reads: the socket of the host's reader of the partition (`child.reader`),
    # which the child takes its slice's records from instead of a consumer of its own
    feed: str | None = None
    feed_silence_s: float = 10.0  # a reader heard from less often is taken for dead
    # AMO: the log reserved [start_offset, granted_until) for this claim's tenure and the child
    # before this one, stopped at a record boundary as its lease was ending, started none of
    # it: this child handles those records without asking (`core.children`, the carry)
    granted_until: int | None = None
    # (`feedwire.silence_for` the group's heartbeat interval, as `member_settings` sets it)


@dataclass(frozen=True, slots=True)
class Settle:
    """Offsets ``offset`` to ``end`` (exclusive) were in a handler call when the child ended
    (``error`` says how): the next child dead-letters or skips them by the policy."""

    offset: int
    end: int
    error: str


@dataclass(frozen=True, slots=True)
class Started:
    """The child consumes from ``position`` (the offset of the first record it will fetch)."""

    pid: int
    position: int


@dataclass(frozen=True, slots=True)
class Progress:
    """ALO: every record below ``next_offset`` was handled."""

    next_offset: int


@dataclass(frozen=True, slots=True)
class GrantRequest:
    """AMO: the child fetched offsets ``start`` to ``end`` (exclusive) and asks to handle them."""

    request_id: int
    start: int
    end: int


REFUSED_STOPPING = "the child is stopping"  # a Grant's reason: the usual end of a stop


@dataclass(frozen=True, slots=True)
class Grant:
    """The supervisor's answer to a GrantRequest: reserved and committed in the log, or not."""

    request_id: int
    granted: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Poisoned:
    """A unit is about to be dead-lettered or skipped: one more against ``max_poison_rate``.
    The supervisor keeps the partition's last minute of them and gives it to the next child
    (`ChildSpec.poison_ages`), so a restart does not count from zero. Sent only with a limit."""


@dataclass(frozen=True, slots=True)
class HandlerFailed:
    """The handler raised on ``offset``; the child exits without committing that record.

    ``attempts``: calls made on it; ``handled``: records the handler completed in this child
    before it; ``cause``: why the child stops (a ``CAUSE_*`` code of `failures`)."""

    offset: int
    error: str
    traceback: str
    attempts: int = 1
    handled: int = 0
    cause: str = CAUSE_POLICY


@dataclass(frozen=True, slots=True)
class Stop:
    """Finish the batch in hand, report `Stopped`, exit; ``reason`` is what the plugin's
    ``teardown`` gets: ``stop`` (the member stops or reloads) or ``revoke`` (the claim is
    taken away while the member goes on: a release over its fair share, a group pause)."""

    reason: str = "stop"


@dataclass(frozen=True, slots=True)
class Stopped:
    """The child stopped; every record below ``next_offset`` was handled (ALO) or granted (AMO)."""

    next_offset: int | None


# The bounds (seconds) of the handler call latency buckets a `Stats` counts in, then +Inf: the
# child counts per bucket, the supervisor's histogram adds the counts up.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


@dataclass(frozen=True, slots=True)
class Stats:
    """Since the last `Stats`: records handled, handler call latencies (counts per bucket of
    `LATENCY_BUCKETS`, then +Inf, and their sum), handler errors by the policy that dealt
    with them, and the partition's high watermark as the consumer last saw it (None: unknown)."""

    handled: int
    latency_counts: tuple[int, ...]
    latency_sum: float
    errors: tuple[tuple[str, int], ...] = ()
    high_watermark: int | None = None
    # AMO, a slice's child with nothing of its own waiting: it read every record below this
    # (its position moves only with its own reservations: the lag counts from here)
    read_to: int | None = None


@dataclass(frozen=True, slots=True)
class DumpStacks:
    """Log a stack dump of every thread (read between batches; SIGUSR1 works even mid-handler)."""


ToSupervisor = Started | Progress | GrantRequest | Poisoned | HandlerFailed | Stopped | Stats
ToChild = Grant | Stop | DumpStacks
