"""The offset committer: which positions go to Kafka's group offsets, and how often."""

from __future__ import annotations

from collections.abc import Sequence

from marshal_workers.protocol.members import member_key
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.supervisor.observe import ClaimSnapshot
from marshal_workers.supervisor.offsets import OffsetCommitter, TopicOffset

HB = 1.0


class FakeSink:
    def __init__(self) -> None:
        self.commits: list[list[TopicOffset]] = []
        self.served = 0
        self.closed = False

    def commit(self, offsets: Sequence[TopicOffset]) -> None:
        self.commits.append(list(offsets))

    def serve(self) -> None:
        self.served += 1

    def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def snap(partition: int, position: int, phase: str = "running") -> tuple[ClaimKey, ClaimSnapshot]:
    key = ClaimKey("g", "orders", partition)
    return key, ClaimSnapshot(key, 1, position, 1.0, 123, phase)


def make() -> tuple[OffsetCommitter, FakeSink, Clock]:
    sink, clock = FakeSink(), Clock()
    return OffsetCommitter(sink, HB, clock=clock, refresh_s=60), sink, clock


class TestCommitter:
    def test_commits_positions_of_data_claims_only(self) -> None:
        """Member claims and lost claims are never committed."""
        committer, sink, _ = make()
        member = member_key("g", "w1")
        claims = dict([snap(0, 5), snap(1, 9, phase="lost")])
        claims[member] = ClaimSnapshot(member, 1, 0, 1.0, None, "running")
        committer.tick(claims, healthy=True)
        assert sink.commits == [[("orders", 0, 5)]]
        assert sink.served == 1

    def test_a_claim_without_a_position_yet_is_not_committed(self) -> None:
        """A claim just won has no position (-1): committing it made Kafka answer "Local: No
        offset stored", an offset_commit_failed warning on a new user's first start."""
        committer, sink, _ = make()
        committer.tick(dict([snap(0, -1), snap(1, 4)]), healthy=True)
        assert sink.commits == [[("orders", 1, 4)]]

    def test_at_most_once_per_half_heartbeat_and_only_when_moved(self) -> None:
        """A moved position waits for HB/2; an unchanged one waits for the refresh."""
        committer, sink, clock = make()
        committer.tick(dict([snap(0, 5)]), True)
        clock.now += 0.2
        committer.tick(dict([snap(0, 6)]), True)  # moved, but too soon
        clock.now += 0.4
        committer.tick(dict([snap(0, 6)]), True)  # HB/2 after the first: due
        clock.now += 1.0
        committer.tick(dict([snap(0, 6)]), True)  # unchanged: not due
        clock.now += 60.0
        committer.tick(dict([snap(0, 6)]), True)  # refresh
        assert sink.commits == [[("orders", 0, 5)], [("orders", 0, 6)], [("orders", 0, 6)]]
        assert committer.commits == 3

    def test_a_failed_commit_is_counted_and_retried_when_due(self) -> None:
        """The broker refused: counted, and the same position goes again after HB/2."""
        committer, sink, clock = make()
        committer.tick(dict([snap(0, 5)]), True)
        committer.failed([("orders", 0)], "Broker: Unknown member")
        assert committer.failures == 1
        clock.now += 0.5
        committer.tick(dict([snap(0, 5)]), True)
        assert sink.commits[-1] == [("orders", 0, 5)] and len(sink.commits) == 2

    def test_a_claim_held_again_is_committed_at_once(self) -> None:
        """A released claim is forgotten; when held again its position is committed at once."""
        committer, sink, clock = make()
        committer.tick(dict([snap(0, 5)]), True)
        committer.tick({}, True)
        clock.now += 0.1
        committer.tick(dict([snap(0, 5)]), True)
        assert len(sink.commits) == 2
        committer.close()
        assert sink.closed
