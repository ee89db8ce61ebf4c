"""Echo: a reference handler that logs each record (topic, partition, offset, key, value).

Use it as ``--handler echo`` (``marshal_workers.plugins.echo:handle``) to watch what a group
would process. Keys and values are shown as text (undecodable bytes replaced), cut to 200
characters.
"""

from __future__ import annotations

from marshal_workers.handler import Context, Record

MAX_CHARS = 200


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    text = data.decode("utf-8", errors="replace")
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + "..."


def handle(record: Record, ctx: Context) -> None:
    """Log the record with the child's logger (which already carries topic and partition)."""
    ctx.log.info(
        "record",
        offset=record.offset,
        key=_text(record.key),
        value=_text(record.value),
        timestamp=record.timestamp,
    )
