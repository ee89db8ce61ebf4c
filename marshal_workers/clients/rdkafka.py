"""What every librdkafka client of the package shares: where its log lines go, the connect
back-off every client starts with, and the readable text of a Kafka error.

librdkafka's own log lines go to the Python logger `RDKAFKA_LOG` (the one client builder,
`kafkaconfig`, hands it to every client as ``logger``), with librdkafka's level, so they are
rendered like every other line of the process. A `LogGate` on that logger keeps them from
flooding: an unreachable broker makes librdkafka log a failed connect for every attempt
(hundreds a second with the short back-off below), so

- while a supervisor starts (`LogGate.hold` ... `LogGate.release`) nothing passes: a start-up
  failure prints its one line only; once started, one line says how many were held and
  repeats the last, at its level;
- after that, at most ``burst`` lines per ``window_s`` pass for each facility of each client
  (``FAIL``, ``REQTMOUT``, ...); the next one to pass says how many were suppressed.

Used by the supervisor's and the tools' clients and by the child's consumer and dead letters,
so the child never imports the coordination-log client for them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException

BURST: Final = 3  # lines of one facility of one client that pass per window
WINDOW_S: Final = 10.0


class LogGate(logging.Filter):
    """Holds librdkafka's lines back during a start-up and rate-limits them after it (see the
    module doc). Thread-safe: librdkafka's lines are logged from whichever thread polls."""

    def __init__(
        self,
        burst: int = BURST,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.burst, self.window_s, self.clock = burst, window_s, clock
        self._lock = threading.Lock()
        self._holding = False
        self._held = 0
        self._last_held: logging.LogRecord | None = None
        # key -> [window start, lines passed in it, lines suppressed since the last passed]
        self._windows: dict[tuple[str, str], list[float]] = {}

    def hold(self) -> None:
        """Let nothing pass until `release` (a supervisor's start-up)."""
        with self._lock:
            self._holding = True

    def release(self) -> logging.LogRecord | None:
        """Let lines pass again (rate limited); a record saying how many were held, with the
        last one's level and text, for the caller to log (None if none were)."""
        with self._lock:
            self._holding = False
            held, last = self._held, self._last_held
            self._held, self._last_held = 0, None
        if last is None:
            return None
        summary = logging.makeLogRecord(last.__dict__)
        summary.msg = "%d librdkafka lines during start-up; the last: %s"
        summary.args = (held, last.getMessage())
        summary._marshal_summary = True  # passes the gate
        return summary

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_marshal_summary", False):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        key = (str(args[0]), str(args[1])) if len(args) >= 2 else (str(record.msg), "")
        now = self.clock()
        with self._lock:
            if self._holding:
                self._held += 1
                self._last_held = record
                return False
            window = self._windows.get(key)
            if window is None or now - window[0] >= self.window_s:
                suppressed = int(window[2]) if window is not None else 0
                window = self._windows[key] = [now, 0, suppressed]
            if window[1] >= self.burst:
                window[2] += 1
                return False
            window[1] += 1
            suppressed, window[2] = int(window[2]), 0
        if suppressed:
            record.msg = f"{record.getMessage()} ({suppressed} similar lines suppressed)"
            record.args = ()
        return True


# librdkafka's own log lines go here (not straight to stderr), so that a command-line error
# stays one line; an application that configures logging still sees them, gated.
RDKAFKA_LOG: Final = logging.getLogger("marshal_workers.librdkafka")
RDKAFKA_LOG.addHandler(logging.NullHandler())
RDKAFKA_GATE: Final = LogGate()
RDKAFKA_LOG.addFilter(RDKAFKA_GATE)

# librdkafka holds a request for a broker it has not connected to yet for half of
# reconnect.backoff.ms (default 100 ms) after any other connection attempt: about 50 ms, once
# for the bootstrap server and again for the partition leader, on every client's first
# requests. A start-up makes a few such clients in a row (the coordination log's reader, the
# data topics' metadata, each child's consumer): 10 ms (the back-off still doubles up to
# reconnect.backoff.max.ms after each failure).
FAST_CONNECT: Final[Mapping[str, Any]] = {"reconnect.backoff.ms": 10}


def error_text(err: object) -> str:
    """The readable text of a Kafka error: a KafkaError, a KafkaException wrapping one, or any
    other object (its ``str``)."""
    if isinstance(err, KafkaError):
        return str(err.str())
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        return str(err.args[0].str())
    return str(err)


AUTHORIZATION: Final = frozenset(  # the error codes of a principal that lacks an ACL
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)
ACLS_HINT: Final = "see marshal-admin acls for what each role needs"


def refusal_hint(err: object) -> str:
    """A few words for an authorization failure (the principal lacks an ACL), else ''."""
    inner = err.args[0] if isinstance(err, KafkaException) and err.args else err
    if isinstance(inner, KafkaError) and inner.code() in AUTHORIZATION:
        return f" (this principal is not allowed to: {ACLS_HINT})"
    return ""


class ErrorMemory:
    """A client's ``error_cb``: remembers the last error and the last authentication failure,
    so that a connect that times out can say why. librdkafka reports a wrong password as an
    authentication error, then goes on reporting the broken connection ("Broker transport
    failure"): the first is what the operator must read."""

    def __init__(self, log: bool = False) -> None:
        self.last: str | None = None
        self.authentication: str | None = None
        self._log = log  # to RDKAFKA_LOG, at debug level

    def __call__(self, err: KafkaError) -> None:
        text = error_text(err)
        self.last = text
        if err.code() == KafkaError._AUTHENTICATION:
            self.authentication = text
        if self._log:
            RDKAFKA_LOG.debug("kafka error: %s", text)

    def unreachable(self, bootstrap: str, detail: str, within: str = "") -> str:
        """The one line for a client that could not talk to ``bootstrap`` (``detail``: the
        exception's text), an authentication failure named as such."""
        if self.authentication is not None:
            return (
                f"Kafka at {bootstrap} refused this client's credentials (authentication "
                f"failed: check sasl.username, sasl.password and sasl.mechanisms): "
                f"{self.authentication}"
            )
        return f"cannot reach Kafka at {bootstrap}{within}: {self.last or detail}"
