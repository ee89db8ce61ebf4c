"""Logging for every marshal-workers process: structlog, one event per line on stderr.

`configure_logging(json=True)` renders JSON lines (for journald, systemd and log shippers);
``json=False`` renders a human console format. The supervisor and each child call it once at
start; a child then binds its claim (group, topic, partition, client_id, instance_id, pid,
fencing_token) to its logger, so every line it writes says which claim it ran under.

`raw_line` formats one event without structlog, for the few places that must not take
structlog's writer lock (a signal handler, the watchdog thread about to end the process).
"""

from __future__ import annotations

import datetime
import json as jsonlib
import logging
import sys
from typing import Any, TextIO

import structlog

from marshal_workers.common.secrets import redact_event

_STDLIB_HANDLER = "marshal-workers"


def configure_logging(json: bool, level: str | int = "info", stream: TextIO | None = None) -> None:
    """Send structlog events to ``stream`` (stderr) as JSON lines or as console lines."""
    out = stream if stream is not None else sys.stderr
    renderer: Any
    if json:
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        redact_event,  # no line carries a secret of this process's [kafka] table
    ]
    if json:
        # no local variables in tracebacks: they can hold record contents and secrets
        processors.append(
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            )
        )
    min_level = level if isinstance(level, int) else logging.getLevelNamesMapping()[level.upper()]
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(min_level),
        # one write per line (print() writes the newline separately): the supervisor and its
        # children share stderr, and two lines must not be spliced into each other
        logger_factory=structlog.WriteLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    _route_standard_logging(processors, renderer, min_level, out)


def _route_standard_logging(processors: list[Any], renderer: Any, level: int, out: TextIO) -> None:
    """Render what is logged with the standard library (kafkalog's warnings, librdkafka's own
    lines from WARNING up) like structlog's events, on the same stream, instead of as bare
    text; replaces the handler an earlier call installed."""
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*processors, structlog.stdlib.add_logger_name],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    handler.set_name(_STDLIB_HANDLER)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _STDLIB_HANDLER]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("marshal_workers.librdkafka").setLevel(max(level, logging.WARNING))


def raw_line(json: bool, event: str, level: str, context: dict[str, Any]) -> bytes:
    """One rendered log line (newline-terminated), built without structlog or any lock."""
    timestamp = datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")
    if json:
        fields = {**context, "event": event, "level": level, "timestamp": timestamp}
        return (jsonlib.dumps(fields, default=str) + "\n").encode()
    pairs = " ".join(f"{key}={value}" for key, value in sorted(context.items()))
    return f"{timestamp} [{level}] {event} {pairs}\n".encode()
