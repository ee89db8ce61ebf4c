"""The handler of `bench/amo_start_crash.py`: ``$CRASH_WORK_ITERS`` turns of a pure-Python loop
per record (23,000: about 1.7 ms here, on a quiet core), then one ledger row
(`common.ledgerfile`) in ``$MARSHAL_LEDGER_DIR``, a file per process, so the benchmark can tell
which reserved records were handled."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from marshal_workers.common.ledgerfile import LedgerRow

_ITERS = int(os.environ.get("CRASH_WORK_ITERS", "23000"))
_out: dict[int, int] = {}  # pid -> the ledger file's descriptor


def handle(record: Any, ctx: Any) -> None:
    pid = os.getpid()
    if pid not in _out:
        directory = Path(os.environ["MARSHAL_LEDGER_DIR"])
        directory.mkdir(parents=True, exist_ok=True)
        _out[pid] = os.open(
            directory / f"ledger-{pid}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND
        )
    start = time.time()
    x = 0
    for i in range(_ITERS):
        x += i * i
    row = LedgerRow(
        record.topic, record.partition, record.offset, ctx.client_id, pid,
        ctx.fencing_token, start, time.time(), ctx.group_id, ctx.instance_id,
    )  # fmt: skip
    os.write(_out[pid], (row.line() + "\n").encode())
