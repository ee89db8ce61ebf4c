"""Handlers for `bench/runtime.py` (import with the repository root on ``PYTHONPATH``).

``count``: the trivial handler, the same function in the plain confluent-kafka loop and under
``marshal-run``. It touches ``record.value`` and counts; on its first record and on its
``$BENCH_TARGET``-th it writes a small JSON file to ``$BENCH_OUT`` (the process's pid in the
name), so the benchmark can compute records/s between the two and the time to the first record.
Between those two records it does nothing else.

Times are ``time.monotonic()`` (CLOCK_MONOTONIC: one clock for every process on a Linux host),
``time.time()`` (to compare with log lines) and ``time.process_time()`` (the CPU time of the
whole process, librdkafka's threads included: less sensitive to a busy machine than rates).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

OUT_ENV = "BENCH_OUT"
TARGET_ENV = "BENCH_TARGET"

_count = 0
_target = int(os.environ.get(TARGET_ENV, "0") or 0)


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
    }
    path = Path(directory) / f"{kind}-{os.getpid()}-{row['partition']}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(row))
    tmp.replace(path)


def count(record: Any, ctx: Any) -> None:
    """Touch the value and count; note the first and the ``$BENCH_TARGET``-th record."""
    global _count  # noqa: PLW0603 (a benchmark's per-process counter)
    record.value  # noqa: B018 (touch it, as any handler would)
    _count += 1
    if _count == 1:
        _write("first", record)
    elif _count == _target:
        _write("last", record)
