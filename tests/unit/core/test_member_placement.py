"""A member of a placed group folds its home and window only, and writes every claim there."""

from __future__ import annotations

from dataclasses import replace

from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core.claiming import start_settle
from marshal_workers.core.member import Member
from marshal_workers.protocol.placement import Placement, home, reads
from marshal_workers.protocol.wire import ClaimingPartition, Heartbeat
from tests.unit.core.test_member_core import Harness, fresh_topic, keys, settings, start

N = 8


def placed_member(span: int, first: int | None = None) -> Member:
    where = home("g", N) if first is None else first
    return Member(replace(settings(partitions=N), placement=Placement(N, where, span)))


class TestPlacedMember:
    def test_it_folds_home_and_window_only(self) -> None:
        """Worlds for `placement.reads` only; a spread member folds every partition."""
        member = placed_member(2, first=(home("g", N) + 3) % N)
        assert set(member.worlds) == reads("g", member.s.placement)  # type: ignore[arg-type]
        assert len(member.worlds) == 3
        assert set(Member(settings(partitions=N)).worlds) == set(range(N))

    def test_every_claim_and_heartbeat_goes_to_its_placed_home(self) -> None:
        """Span 1: the member's claims, its member claim and heartbeats all land at home (the
        only writer: every other partition stays empty)."""
        topic, log_ms = fresh_topic(N)
        member = placed_member(1)
        h = start(member, topic, log_ms, n=4)
        h.tick(1.0)
        appends = [c for c in h.commands if isinstance(c, cmd.Append)]
        assert {type(c.message) for c in appends} >= {ClaimingPartition, Heartbeat}
        assert {c.partition for c in appends} == {home("g", N)}
        assert len([k for k in member.held if k.topic == "orders"]) == 4


class FollowingHarness(Harness):
    """The harness, reading only what the member folds (as its runtime follows it)."""

    def followed(self) -> list[int]:
        return sorted(self.member.worlds)


def test_after_a_stall_it_waits_for_the_ends_of_its_own_partitions_only() -> None:
    """The log's ends come for every partition; a placed member reads to those it follows and
    claims again (another group's records elsewhere, never read, hold nothing up)."""
    topic, log_ms = fresh_topic(N)
    member = placed_member(1)
    elsewhere = next(p for p in range(N) if p not in member.worlds)
    topic.append(elsewhere, b"other/t/0", b"Heartbeat/1/0/i/c/other/t/0/5")
    h = FollowingHarness(topic, member, log_ms)
    h.read()
    h.run(member.begin(h.now, 1_000.0, keys(2)))
    h.tick(start_settle(1.0))
    assert member.held
    h.now += 0.5
    log_ms[0] += 3_500  # the broker's time ran 3*HB past the member's clock
    since = len(h.commands)
    h.run(member.feed(inp.Tick(h.now, 1_000.0 + h.now + 3.0)))
    assert any(isinstance(c, cmd.FindLogEnd) for c in h.commands[since:])
    ends = {p: topic.end_offset(p) for p in range(N)}
    h.run(member.feed(inp.LogEndFound(h.now, ends)))
    for _ in range(16):
        h.tick(0.25)
    claims = [c for c in h.commands[since:] if isinstance(c, cmd.Append)
              and isinstance(c.message, ClaimingPartition)]  # fmt: skip
    assert claims and member.ctx.resync is None
