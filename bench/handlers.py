"""Handlers for the benchmarks (import with the repository root on ``PYTHONPATH``).

``count``: the trivial handler, the same function in the plain confluent-kafka loop and under
``marshal-run``. It reads the record's value and counts; on its first record and on its
``$BENCH_TARGET``-th it writes a small JSON file to ``$BENCH_OUT`` (the process's pid in the
name), so the benchmark can compute records/s between the two and the time to the first record.
Between those two records it does nothing else. (The plain loop hands it confluent-kafka's
``Message``, whose ``value`` is a method, and a child a `Record`, whose ``value`` is a property
that calls it: the handler calls the method when it is one, so that both read the value. Until
2026-11-30 it only looked the attribute up, and the plain loop read no value at all.)

``work``: the same, plus about ``$BENCH_WORK_ITERS`` turns of a pure-Python loop per record
(`bench/peers.py` calibrates the count for ``--work-us`` microseconds and gives every system the
same count, so each does the same CPU work).

``count_batch`` (``CountBatch`` as a plugin class): `count` for a whole batch in one call, the
batch plugins' trivial handler (the plain loop calls it with each ``consume()`` batch;
``CountBatch`` sets ``batch_view = "messages"``, so it gets the same ``Message`` objects).

``arroyo_task``: the adapter that Arroyo's ``RunTaskWithMultiprocessing`` runs in its pool (a
module-level function, as its spawned workers need): it hands ``$BENCH_HANDLER`` (``count`` or
``work``) a view with the record's ``partition``, ``offset`` and ``value``. Arroyo spreads every
partition's batches over its workers, so a worker cannot know its share in advance: with
``$BENCH_LAST_OFFSET`` set (`bench/peers.py`: every partition of a fresh topic holds offsets 0
to that one), the adapter marks each partition's offset 0 (``pfirst-P-PID.json``) and last
offset (``pend-P-PID.json``) after the handler returned. (The check is in the adapter, not in
``count``, so that the trivial handler costs the plain loop and a child no more than before.)

Times are ``time.monotonic()`` (CLOCK_MONOTONIC: one clock for every process on a Linux host),
``time.time()`` (to compare with log lines) and ``time.process_time()`` (the CPU time of the
whole process, librdkafka's threads included: less sensitive to a busy machine than rates).
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

OUT_ENV = "BENCH_OUT"
TARGET_ENV = "BENCH_TARGET"
LAST_OFFSET_ENV = "BENCH_LAST_OFFSET"
WORK_ITERS_ENV = "BENCH_WORK_ITERS"
HANDLER_ENV = "BENCH_HANDLER"

_count = 0
_target = int(os.environ.get(TARGET_ENV, "0") or 0)
_last_offset = int(os.environ.get(LAST_OFFSET_ENV, "-1") or -1)
_work_iters = int(os.environ.get(WORK_ITERS_ENV, "0") or 0)


def _partition(record: Any) -> int | None:
    """The record's partition (a `Record` attribute, or a confluent-kafka `Message` method)."""
    partition = record.partition
    return int(partition() if callable(partition) else partition)


def _write(kind: str, record: Any) -> None:
    directory = os.environ.get(OUT_ENV)
    if not directory:
        return
    Path(directory).mkdir(parents=True, exist_ok=True)
    row = {
        "pid": os.getpid(),
        "count": _count,
        "partition": _partition(record),
        "monotonic": time.monotonic(),
        "wall": time.time(),
        "cpu": time.process_time(),  # every thread of the process (librdkafka's too)
        "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,  # peak RSS (Linux: KiB)
    }
    if kind.startswith("p"):  # a partition's mark: the partition first in the name
        path = Path(directory) / f"{kind}-{row['partition']}-{os.getpid()}.json"
    else:
        path = Path(directory) / f"{kind}-{os.getpid()}-{row['partition']}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(row))
    tmp.replace(path)


def count(record: Any, ctx: Any) -> None:
    """Read the value and count; note the first and the ``$BENCH_TARGET``-th record."""
    global _count  # noqa: PLW0603 (a benchmark's per-process counter)
    value = record.value  # (read it, as any handler would: a `Record`'s property reads it)
    if callable(value):  # a confluent-kafka Message's is a method: without a call, not read
        value()
    _count += 1
    if _count == 1:
        _write("first", record)
    elif _count == _target:
        _write("last", record)


def burn(iterations: int) -> float:
    """About ``iterations`` turns of pure-Python arithmetic (the CPU-bound handler's work)."""
    x = 0.0
    for i in range(iterations):
        x = x * 0.5 + i
    return x


def calibrate(work_us: float, probes: int = 7) -> int:
    """The ``burn`` iterations that take about ``work_us`` microseconds on this machine (the
    fastest of ``probes`` timings, the least disturbed by other load)."""
    n = 20_000
    best = min(_timed(n) for _ in range(probes))
    return max(1, round(work_us * 1e-6 * n / best))


def _timed(n: int) -> float:
    t0 = time.perf_counter()
    burn(n)
    return time.perf_counter() - t0


def work(record: Any, ctx: Any) -> None:
    """`count`, then ``$BENCH_WORK_ITERS`` turns of `burn`: a CPU-bound handler."""
    count(record, ctx)
    burn(_work_iters)


class _View:
    """What an Arroyo message gives the handler: partition, offset and value, as attributes."""

    __slots__ = ("offset", "partition", "value")

    def __init__(self, partition: int, offset: int, value: bytes) -> None:
        self.partition, self.offset, self.value = partition, offset, value


def count_batch(records: Sequence[Any], ctx: Any) -> None:
    """`count` for a whole batch in one call (a batch plugin's ``handle_batch``): read each
    record's value; note the process's first record and its ``$BENCH_TARGET``-th."""
    global _count  # noqa: PLW0603 (a benchmark's per-process counter)
    for record in records:  # (read each value, as `count` does)
        value = record.value
        if callable(value):
            value()
    before = _count
    _count += len(records)
    if before == 0:
        _write("first", records[0])
    if before < _target <= _count:
        _write("last", records[_target - before - 1])


class CountBatch:
    """`count_batch` as the batch plugin ``marshal-run`` loads (``bench.handlers:CountBatch``),
    taking the consumer's messages as the plain loop's batch handler does (``batch_view``)."""

    batch_view = "messages"

    def handle_batch(self, records: Sequence[Any], ctx: Any) -> None:
        count_batch(records, ctx)


HANDLERS = {"count": count, "work": work}
BATCH_HANDLERS = {"count_batch": count_batch}
_arroyo_handler = HANDLERS.get(os.environ.get(HANDLER_ENV) or "count", count)


def arroyo_task(message: Any) -> None:
    """Arroyo's task (``RunTaskWithMultiprocessing``): ``$BENCH_HANDLER`` on one message."""
    broker_value = message.value
    offset = broker_value.offset
    view = _View(broker_value.partition.index, offset, message.payload.value)
    _arroyo_handler(view, None)
    if offset == 0:
        _write("pfirst", view)
    elif offset == _last_offset:
        _write("pend", view)
