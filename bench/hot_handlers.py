"""The handlers of `bench/hot.py` and the ledger they write (import with the repository root on
``PYTHONPATH``).

Two kinds of work per record, the same in every system:

- ``io``: wait ``$HOT_IO_MS`` (5) milliseconds (``time.sleep``): a handler that waits on a
  database or a service, where more workers on one partition should help linearly;
- ``cpu``: ``$HOT_CPU_ITERS`` turns of `bench.handlers.burn` (calibrated by `bench/hot.py` for
  about 200 µs): a handler bound by the CPU, where two cores bound any gain.

Every handled record appends one JSON line to ``$HOT_LEDGER/ledger-<pid>.jsonl`` (O_APPEND, one
``write`` per line, written after the work: a record whose handling was cut short leaves none):

    {"pid", "offset", "ts", "start", "end", "cpu", ...}

``ts`` is the record's timestamp (CreateTime, ms since the epoch: when it was appended, as the
producer stamps it), ``start``/``end`` ``time.time()`` around the work, ``cpu`` the seconds of
CPU its thread spent on the work (``time.thread_time()``: what the work cost, whatever else ran
on the core meanwhile). A marshal-run worker adds
``token`` (its claim's fencing token) and ``lease_end`` (``time.time()`` + ``lease_remaining()``
when the work is done: the lease as it stands then, extended by every heartbeat meanwhile, so a
line whose ``end`` is past its ``lease_end`` was handled after the lease ran out, e.g. by a
process stopped with SIGSTOP and continued); a share consumer adds
``acquired`` (when the poll that returned the record came back) and ``lock_s`` (the group's
record lock duration: past ``acquired + lock_s`` the broker may give the record to another
consumer).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.handlers import burn

LEDGER_ENV = "HOT_LEDGER"
IO_MS_ENV = "HOT_IO_MS"
CPU_ITERS_ENV = "HOT_CPU_ITERS"

_io_s = float(os.environ.get(IO_MS_ENV, "5") or 5) / 1000
_cpu_iters = int(os.environ.get(CPU_ITERS_ENV, "0") or 0)
_fd: int | None = None
_pid = 0


def _ledger_fd() -> int:
    global _fd, _pid  # noqa: PLW0603 (one ledger file per process)
    if _fd is None or _pid != os.getpid():
        directory = Path(os.environ[LEDGER_ENV])
        directory.mkdir(parents=True, exist_ok=True)
        _pid = os.getpid()
        path = directory / f"ledger-{_pid}.jsonl"
        _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    return _fd


def do_work(kind: str) -> None:
    """One record's work: ``io`` sleeps, ``cpu`` burns."""
    if kind == "io":
        time.sleep(_io_s)
    else:
        burn(_cpu_iters)


def handle_and_record(
    kind: str,
    offset: int,
    ts_ms: int,
    after: Callable[[], dict[str, Any]] | None = None,
    **extra: Any,
) -> None:
    """Do one record's work, then append its ledger line (with ``extra`` fields, and those
    that ``after`` gives once the work is done)."""
    start, cpu = time.time(), time.thread_time()
    do_work(kind)
    end, cpu = time.time(), time.thread_time() - cpu
    row = {"pid": os.getpid(), "offset": offset, "ts": ts_ms, "start": start, "end": end,
           "cpu": cpu, **extra, **(after() if after is not None else {})}  # fmt: skip
    os.write(_ledger_fd(), (json.dumps(row) + "\n").encode())


def _marshal(kind: str, record: Any, ctx: Any) -> None:
    def lease() -> dict[str, Any]:
        return {"lease_end": time.time() + ctx.lease_remaining()}

    handle_and_record(kind, record.offset, record.timestamp, lease, token=ctx.fencing_token,
                      slice=ctx.slice)  # fmt: skip


def io(record: Any, ctx: Any) -> None:
    """marshal-run's ``--handler bench.hot_handlers:io``: wait, then write the ledger line."""
    _marshal("io", record, ctx)


def cpu(record: Any, ctx: Any) -> None:
    """marshal-run's ``--handler bench.hot_handlers:cpu``: burn, then write the ledger line."""
    _marshal("cpu", record, ctx)
