"""Log time per coordination partition, estimated between records (pure arithmetic).

Every decision of the fold uses the log time of the records themselves. A member that plans a
claim needs an estimate of the log's time *now* on the partition where the claim lives: the
newest log time folded there, plus the local time elapsed since it was folded. Each partition
has its own estimate, because partitions can be led by brokers whose clocks differ: a claim is
judged silent only by the clock of its own coordination partition.
"""

from __future__ import annotations


class LogClock:
    """The newest log time seen per coordination partition, and when (local monotonic s)."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[int, float]] = {}

    def saw(self, partition: int, log_time_ms: int, now: float) -> None:
        """Note that ``partition``'s log reached ``log_time_ms`` at local time ``now``."""
        seen = self._seen.get(partition)
        if seen is None or log_time_ms > seen[0]:
            self._seen[partition] = (log_time_ms, now)

    def now_ms(self, partition: int, now: float) -> int | None:
        """The estimated log time of ``partition`` at local time ``now`` (None: never seen).
        It runs on from the last record seen, so silence on a partition still ages claims."""
        seen = self._seen.get(partition)
        if seen is None:
            return None
        log_time, at = seen
        return log_time + int((now - at) * 1000)
