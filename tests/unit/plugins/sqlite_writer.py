"""A stand-alone owner of one partition writing through the SQLite sink, for
tests/unit/plugins/test_sqlite_sink.py:
``python -m tests.unit.plugins.sqlite_writer DB TOKEN FIRST COUNT``.

It writes records FIRST, FIRST+1, ... (one transaction each, 20 ms apart) under fencing token
TOKEN, printing each offset once committed. Exit 0 when COUNT were written, 3 on `FencedWrite`.
"""

from __future__ import annotations

import sys
import time

from marshal_workers.handler import Record
from marshal_workers.plugins.sqlite_sink import FencedWrite, SqliteSink

EXIT_FENCED = 3
TOPIC = "orders"
PARTITION = 2


def record(offset: int, partition: int = PARTITION) -> Record:
    """A record of the test partition."""
    return Record(TOPIC, partition, offset, b"k", f"v{offset}".encode(), 1_700_000_000_000, ())


def main(path: str, token: int, first: int, count: int) -> int:
    sink = SqliteSink(path)
    sink.setup()
    try:
        for offset in range(first, first + count):
            try:
                sink.write([record(offset)], token, f"owner-{token}")
            except FencedWrite as exc:
                print(f"fenced {offset}: {exc}", flush=True)
                return EXIT_FENCED
            print(offset, flush=True)
            time.sleep(0.02)
    finally:
        sink.teardown()
    return 0


if __name__ == "__main__":
    path, token, first, count = sys.argv[1:5]
    sys.exit(main(path, int(token), int(first), int(count)))
