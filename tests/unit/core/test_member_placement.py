"""A member of a placed group folds its home and window only, and writes every claim there."""

from __future__ import annotations

from dataclasses import replace

from marshal_workers.core import commands as cmd
from marshal_workers.core.member import Member
from marshal_workers.protocol.placement import Placement, home, reads
from marshal_workers.protocol.wire import ClaimingPartition, Heartbeat
from tests.unit.core.test_member_core import fresh_topic, settings, start

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
