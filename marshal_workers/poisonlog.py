"""The supervisor's side of poison records (`poison`): writing a failure to the log, and reading
what the fold says a claim's holder must do about its failing record.

ALO only: in AMO a failing record is lost with the rest of its granted batch when the child
stops (at most once), so no record fails twice.
"""

from __future__ import annotations

from typing import Any

from marshal_workers import poison
from marshal_workers.config import RunConfig
from marshal_workers.coordination import Coordinator
from marshal_workers.coordlog import LogError
from marshal_workers.poison import PoisonState, RecordFailed, Step
from marshal_workers.protocol import ClaimKey
from marshal_workers.rationalizer import Mode


class PoisonLog:
    """Writes this member's RecordFailed and reads the claims' poison states from the fold."""

    def __init__(self, config: RunConfig, co: Coordinator, log: Any) -> None:
        self.config = config
        self.co = co
        self._log = log
        self._parked_logged: set[tuple[ClaimKey, int]] = set()

    @property
    def enabled(self) -> bool:
        """Only at least once repeats a failing record."""
        return self.config.mode is Mode.ALO

    def state(self, key: ClaimKey) -> PoisonState | None:
        """The fold's poison state of ``key`` (whether or not it is still active)."""
        world = self.co.reader.worlds.get(self.co.partition_of(key))
        return None if world is None else world.poison.get(key)

    def note_failure(self, key: ClaimKey, offset: int, error: str) -> PoisonState | None:
        """Write one more failure on ``offset`` (parked at ``poison_park_after``), fold up to
        it, and return the state after it (None: not written or refused; logged)."""
        if not self.enabled:
            return None
        failures, outcome = poison.park_outcome(
            self.state(key), offset, self.config.poison_park_after
        )
        c = self.config
        msg = RecordFailed(
            int(self.co.wall()),
            c.instance_id,
            c.client_id,
            key.group,
            key.topic,
            key.partition,
            offset,
            failures,
            outcome,
            error,
        )
        timeout = max(1.0, min(5.0, self.co.hb))
        try:
            appended = self.co.log.append(
                self.co.partition_of(key),
                poison.poison_key(key),
                poison.encode_poison(msg),
                timeout,
            )
            verdict, _ = self.co.reader.wait_for(appended, timeout_s=2 * timeout)
        except LogError as exc:
            self._log.warning("poison record not written", topic=key.topic, error=str(exc))
            return None
        if not isinstance(verdict, poison.PoisonNoted):
            self._log.warning(
                "poison record refused",
                topic=key.topic,
                partition=key.partition,
                offset=offset,
                reason=getattr(verdict, "reason", type(verdict).__name__),
            )
            return None
        state = verdict.state
        (self._log.error if state.parked else self._log.warning)(
            "record parked" if state.parked else "record failure counted",
            topic=key.topic,
            partition=key.partition,
            offset=offset,
            failures=state.failures,
            poison_park_after=c.poison_park_after,
            error=state.error,
        )
        return state

    def step(self, key: ClaimKey, position: int) -> tuple[Step, PoisonState | None]:
        """What the holder of ``key`` at ``position`` does before it starts a child."""
        if not self.enabled:
            return Step.RUN, None
        state = self.state(key)
        step = poison.poison_action(
            state, position, self.co.now_ms(), int(self.config.poison_park_time * 1000)
        )
        if step is Step.PARK and state is not None:
            mark = (key, state.offset)
            if mark not in self._parked_logged:
                self._parked_logged.add(mark)
                self._log.error(
                    "partition parked on a poison record",
                    topic=key.topic,
                    partition=key.partition,
                    offset=state.offset,
                    failures=state.failures,
                    error=state.error,
                    next="marshal-admin skip-record or retry-record",
                )
        elif state is not None:
            self._parked_logged.discard((key, state.offset))
        return step, state
