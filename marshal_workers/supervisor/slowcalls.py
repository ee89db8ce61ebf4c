"""A log line for a handler call past half its timeout: the metrics and /healthz show such a
call (`ClaimSnapshot.call_slow`), the log said nothing until the watchdog ended it at the whole
(a review SIGSTOPped a child mid-call: 300 s of silence at the default timeout, `status`
showing its claim fresh throughout). One warning per call, when it crosses the half."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.supervisor.observe import ClaimSnapshot, Observer


class SlowCallLog(Observer):
    """Logs ``handler_call_slow`` (warning) once for each call that becomes slow."""

    def __init__(self, log: Any, handler_timeout_s: float | None) -> None:
        self.log = log
        self.timeout_s = handler_timeout_s
        self.said: set[ClaimKey] = set()  # claims whose slow call in progress was said

    def tick(self, claims: Mapping[ClaimKey, ClaimSnapshot], healthy: bool) -> None:
        for key in [k for k in self.said if k not in claims or not claims[k].call_slow]:
            self.said.discard(key)  # the call ended (or the claim went): the next may be said
        for key, snap in claims.items():
            if not snap.call_slow or snap.call_s is None or key in self.said:
                continue
            self.said.add(key)
            self.log.warning(
                "handler_call_slow", topic=key.topic, partition=key.partition,
                child_pid=snap.child_pid, call_s=round(snap.call_s, 1),
                handler_timeout_s=self.timeout_s,
            )  # fmt: skip
