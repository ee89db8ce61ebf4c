"""JSON-lines sink: a reference class-based handler that appends each record to a file.

Use it as ``--handler jsonl`` (the entry point) or
``--handler marshal_workers.plugins.jsonl_sink:JsonlSink``.
Each child writes its partition's records to ``$MARSHAL_JSONL_DIR/<topic>-<partition>.jsonl``,
one JSON object per line:

    {"topic", "partition", "offset", "timestamp", "key", "value", "headers", "token"}

Keys, values and header values are text when they are UTF-8, else base64 under a ``*_b64`` name
(``key_b64``, ``value_b64``; a header ``[name, null, base64]``); ``token`` is the claim's fencing
token. The lifecycle hooks show the class form: ``setup`` opens the file (creating the directory),
``handle`` writes and flushes one line per record (so a record counts as handled only once its
line has left the process), ``teardown`` flushes and closes. Set ``MARSHAL_JSONL_FSYNC=1`` to
also ``fsync`` after every line (durable across a host crash, and much slower).

At least once, lines can repeat: after a crash, the next owner redoes the records after the last
committed offset. Deduplicate by (topic, partition, offset) when reading.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import IO, Any

from marshal_workers.handler import Context, Record

DIR_ENV = "MARSHAL_JSONL_DIR"
FSYNC_ENV = "MARSHAL_JSONL_FSYNC"


def _bytes_fields(name: str, data: bytes | None) -> dict[str, Any]:
    if data is None:
        return {name: None}
    try:
        return {name: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{name}_b64": base64.b64encode(data).decode("ascii")}


def to_line(record: Record, token: int) -> str:
    """The record as one JSON line (with its newline)."""
    headers: list[list[str | None]] = []
    for key, value in record.headers:
        fields = _bytes_fields("v", value)
        text = fields.get("v")
        headers.append([key, text, fields.get("v_b64")] if "v_b64" in fields else [key, text])
    row: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        **_bytes_fields("key", record.key),
        **_bytes_fields("value", record.value),
        "headers": headers,
        "token": token,
    }
    return json.dumps(row, ensure_ascii=False) + "\n"


def path_for(directory: str | os.PathLike[str], topic: str, partition: int) -> Path:
    """Where a partition's lines go."""
    return Path(directory) / f"{topic}-{partition}.jsonl"


class JsonlSink:
    """Appends each record of the child's partition to its JSON-lines file."""

    def __init__(self) -> None:
        self.out: IO[str] | None = None
        self.fsync = os.environ.get(FSYNC_ENV, "") not in ("", "0")

    def setup(self, ctx: Context) -> None:
        """Open ``$MARSHAL_JSONL_DIR/<topic>-<partition>.jsonl`` for appending."""
        directory = os.environ.get(DIR_ENV)
        if not directory:
            raise RuntimeError(f"the jsonl sink needs ${DIR_ENV}")
        Path(directory).mkdir(parents=True, exist_ok=True)
        self.out = open(path_for(directory, ctx.topic, ctx.partition), "a", encoding="utf-8")  # noqa: SIM115 (closed in teardown)

    def handle(self, record: Record, ctx: Context) -> None:
        """Append the record's line and flush it."""
        assert self.out is not None, "setup was not called"
        self.out.write(to_line(record, ctx.fencing_token))
        self.out.flush()
        if self.fsync:
            os.fsync(self.out.fileno())

    def teardown(self, ctx: Context, reason: str) -> None:
        """Flush and close the file."""
        if self.out is not None:
            self.out.flush()
            self.out.close()
            self.out = None


def read_lines(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a sink file (a last line without its newline is skipped)."""
    text = Path(path).read_text(encoding="utf-8")
    complete = text if text.endswith("\n") else text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in complete.splitlines() if line]
