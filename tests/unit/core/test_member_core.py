"""The member's sans-I/O core driven by hand: inputs in, commands out, on an in-memory log
whose clock the test sets (the log's time is the broker's; ``now`` is the member's)."""

from __future__ import annotations

import signal
from dataclasses import replace

import pytest

from marshal_workers.common.errors import EXIT_COORDINATION_CHANGED
from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core import observations as obs
from marshal_workers.core.childexits import ChildEnd
from marshal_workers.core.claiming import SETTLE_ABOVE_CLAIMS, START_WAIT_HB, start_settle
from marshal_workers.core.heldclaim import Phase
from marshal_workers.core.member import Member
from marshal_workers.core.pending import WRITE_TRIES
from marshal_workers.core.settings import MemberSettings
from marshal_workers.ipc import messages as ipc
from marshal_workers.ipc.exits import (
    EXIT_HANDLER_FAILED,
    EXIT_HANDLER_TIMEOUT,
    EXIT_KAFKA,
    EXIT_LEASE_EXPIRED,
)
from marshal_workers.log.memlog import MemoryTopic
from marshal_workers.protocol.members import member_key
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import RationalizerConfig
from marshal_workers.protocol.recordfailures import (
    Action,
    PoisonResolved,
    encode_poison,
    poison_record_key,
)
from marshal_workers.protocol.wire import (
    ClaimingMessages,
    ClaimingPartition,
    ClaimKey,
    Heartbeat,
    Message,
    Partitioner,
    ReleasingPartition,
    coordination_partition,
    encode,
    record_key,
)

HB = 1.0


def settings(client: str = "c1", group: str = "g", mode: Mode = Mode.ALO, instance: str = "i1",
             partitions: int = 2) -> MemberSettings:  # fmt: skip
    spec = ipc.ChildSpec("h", mode, "b", group, client, instance, "", 0, None, 0)
    return MemberSettings(
        group=group,
        client_id=client,
        instance_id=instance,
        topics=("orders",),
        mode=mode,
        coordination_partitions=partitions,
        partitioner=Partitioner.SPEC,
        rationalizer=RationalizerConfig(1000, num_partitions=partitions),
        child=spec,
    )


class Harness:
    """One member on a memory topic; the test moves both clocks."""

    def __init__(self, topic: MemoryTopic, member: Member, log_ms: list[int]) -> None:
        self.topic, self.member, self.log_ms = topic, member, log_ms
        self.cursor = [0] * topic.num_partitions
        self.now = 0.0
        self.commands: list[cmd.Command] = []

    def run(self, commands: list[cmd.Command]) -> None:
        """Carry out appends at once (acknowledged, then read), keep every command."""
        self.commands.extend(commands)
        for c in commands:
            if isinstance(c, cmd.Append):
                done = self.topic.append(c.partition, c.key, c.value)
                self.run(self.member.feed(inp.AppendDone(self.now, c.op, done)))
        self.read()

    def followed(self) -> list[int]:
        """The coordination partitions the harness reads for the member: all of them."""
        return list(range(self.topic.num_partitions))

    def read(self) -> None:
        records = []
        for p in self.followed():
            got = self.topic.read(p, self.cursor[p])
            if got:
                self.cursor[p] = got[-1].offset + 1
                records.extend(got)
        if records:
            self.run(self.member.feed(inp.RecordsRead(self.now, records)))

    def tick(self, seconds: float = 0.0) -> None:
        self.now += seconds
        self.log_ms[0] += int(seconds * 1000)
        self.run(self.member.feed(inp.Tick(self.now, 1_000.0 + self.now)))

    def appended(self, kind: type) -> list[Message]:
        return [c.message for c in self.commands if isinstance(c, cmd.Append)
                and isinstance(c.message, kind)]  # fmt: skip


def keys(n: int = 2, group: str = "g") -> list[ClaimKey]:
    return [ClaimKey(group, "orders", p) for p in range(n)]


def start(member: Member, topic: MemoryTopic, log_ms: list[int], n: int = 2) -> Harness:
    """Begin, then let the start's settle pass: the member has claimed its whole share."""
    h = Harness(topic, member, log_ms)
    h.read()
    h.run(member.begin(h.now, 1_000.0, keys(n, member.s.group)))
    h.tick(start_settle(HB))
    return h


def write(topic: MemoryTopic, msg: Message) -> None:
    p = coordination_partition(msg.topic, msg.partition, topic.num_partitions, Partitioner.SPEC)
    topic.append(p, record_key(msg), encode(msg))


def fresh_topic(partitions: int = 2) -> tuple[MemoryTopic, list[int]]:
    log_ms = [10_000]
    return MemoryTopic(partitions, lambda: log_ms[0]), log_ms


class TestClaiming:
    def test_claims_the_whole_share_and_the_member_claim_in_one_round(self) -> None:
        """A lone member writes every claim at once, not one per turn. With few claims
        (SETTLE_ABOVE_CLAIMS or less) all of them as it begins, with its announcement."""
        topic, log_ms = fresh_topic()
        member = Member(settings())
        h = Harness(topic, member, log_ms)
        h.read()
        h.run(member.begin(h.now, 1_000.0, keys(4)))
        claimed = {(m.topic, m.partition) for m in h.appended(ClaimingPartition)}
        assert claimed == {*(("orders", p) for p in range(4)), ("__member.c1", 0)}
        h.tick(0.01)
        assert set(h.member.held) == {*keys(4), member_key("g", "c1")}

    def test_the_settle_is_for_groups_of_many_claims(self) -> None:
        assert 4 <= SETTLE_ABOVE_CLAIMS < 20  # the tests above and below use 4 and 20

    def test_with_many_claims_the_share_waits_for_the_settle(self) -> None:
        """More than SETTLE_ABOVE_CLAIMS claims: its announcement and one claim as it begins,
        the rest of its share in one round once its announcement is folded and the settle has
        passed (members started together see each other before they claim)."""
        n = 20  # more than SETTLE_ABOVE_CLAIMS
        topic, log_ms = fresh_topic()
        member = Member(settings())
        h = Harness(topic, member, log_ms)
        h.read()
        h.run(member.begin(h.now, 1_000.0, keys(n)))
        first = {(m.topic, m.partition) for m in h.appended(ClaimingPartition)}
        assert len(first) == 2 and ("__member.c1", 0) in first
        h.tick(start_settle(HB) - 0.01)
        assert len(h.appended(ClaimingPartition)) == 2
        h.tick(0.01)
        claimed = {(m.topic, m.partition) for m in h.appended(ClaimingPartition)}
        assert claimed == {*(("orders", p) for p in range(n)), ("__member.c1", 0)}
        assert set(h.member.held) == {*keys(n), member_key("g", "c1")}

    def test_a_member_started_with_another_claims_only_its_share(self) -> None:
        """Two members begin 20 ms apart on 20 partitions: neither claims more than 10, so
        none is released again (each release a child stopped and another started)."""
        n = 20  # more than SETTLE_ABOVE_CLAIMS
        topic, log_ms = fresh_topic()
        one, two = Member(settings("c1")), Member(settings("c2"))
        h1, h2 = Harness(topic, one, log_ms), Harness(topic, two, log_ms)
        h1.run(one.begin(0.0, 1_000.0, keys(n)))
        h1.tick(0.02)  # c2 begins a little later: c1's first round must not take everything
        h2.now = h1.now
        h2.run(two.begin(h2.now, 1_000.0, keys(n)))
        for _ in range(10):
            h1.tick(0.05)  # (moves the log's clock too: one clock for both hosts)
            h2.now = h1.now
            h2.run(two.feed(inp.Tick(h2.now, 1_000.0 + h2.now)))
        for h in (h1, h2):  # (a claim the other won first is refused: another one is claimed)
            assert not [m for m in h.appended(ReleasingPartition) if m.topic == "orders"]
            assert len([k for k in h.member.held if k.topic == "orders"]) == n // 2

    def test_claims_wait_for_the_announcement_at_most_hb_2(self) -> None:
        """An announcement that never lands (its partition down) delays the share by HB/2,
        not more."""
        n = 20  # more than SETTLE_ABOVE_CLAIMS
        topic, log_ms = fresh_topic()
        member = Member(settings())
        h = Harness(topic, member, log_ms)
        commands = member.begin(0.0, 1_000.0, keys(n))  # nothing appended: nothing folded
        assert len([c for c in commands if isinstance(c, cmd.Append)]) == 2
        assert member.claiming.announced_at is None
        assert member.claiming.claims_open_at() == START_WAIT_HB * HB
        h.now = START_WAIT_HB * HB
        opened = member.feed(inp.Tick(h.now, 1_000.0 + h.now))
        claims = [c for c in opened if isinstance(c, cmd.Append)]
        assert len(claims) == n - 1  # the other partitions

    def test_a_claim_starts_its_child_after_its_start_is_found(self) -> None:
        """No position in the log: LookupStart, then the child at the found offset."""
        topic, log_ms = fresh_topic()
        h = start(Member(settings()), topic, log_ms, n=1)
        assert [c.key for c in h.commands if isinstance(c, cmd.LookupStart)] == keys(1)
        h.run(h.member.feed(inp.StartFound(h.now, keys(1)[0], 42)))
        h.tick(0.05)
        spawned = [c for c in h.commands if isinstance(c, cmd.Spawn)]
        assert [(c.spec.start_offset, c.spec.partition) for c in spawned] == [(42, 0)]

    def test_a_failed_start_lookup_loses_only_that_claim(self) -> None:
        """One partition's offline leader: that claim is let go, the other goes on."""
        topic, log_ms = fresh_topic()
        h = start(Member(settings()), topic, log_ms, n=2)
        bad, good = keys(2)
        h.run(h.member.feed(inp.StartFailed(h.now, bad, "leader not available")))
        h.run(h.member.feed(inp.StartFound(h.now, good, 0)))
        h.tick(0.05)
        assert bad not in h.member.held and h.member.held[good].phase is Phase.RUNNING
        assert not h.member.done

    def test_a_refused_claim_on_a_compacted_claim_waits_more_than_2hb(self) -> None:
        """A refusal is activity on an uncertain claim: retrying within 2*HB never wins."""
        member = Member(settings())
        assert member.claiming.refusal_backoff(uncertain=True) > 2 * HB
        assert member.claiming.refusal_backoff(uncertain=False) < HB

    def test_a_verdict_folded_before_its_acknowledgement_is_matched(self) -> None:
        """The consumer may deliver the record before the producer's delivery report."""
        topic, log_ms = fresh_topic(partitions=1)
        member = Member(settings(partitions=1))
        h = Harness(topic, member, log_ms)
        commands = member.begin(0.0, 1_000.0, keys(1))
        appends = [c for c in commands if isinstance(c, cmd.Append)]
        landed = [topic.append(c.partition, record_key(c.message), encode(c.message))
                  for c in appends]  # fmt: skip
        h.read()  # the records first
        assert not member.held
        for c, done in zip(appends, landed, strict=True):
            member.feed(inp.AppendDone(0.0, c.op, done))
        assert set(member.held) == {keys(1)[0], member_key("g", "c1")}


def running_claim(member: Member | None = None) -> tuple[Harness, ClaimKey]:
    """``member`` (an ALO member of one partition by default) holding its one claim, its
    start found and its child spawned."""
    topic, log_ms = fresh_topic(partitions=1)
    h = start(member or Member(settings(partitions=1)), topic, log_ms, n=1)
    key = keys(1)[0]
    h.run(h.member.feed(inp.StartFound(h.now, key, 100)))
    h.tick(0.05)
    return h, key


def a_claim_that_failed_without_landing() -> tuple[
    MemoryTopic, Member, Harness, ClaimKey, cmd.Append
]:
    """A member begun at wall second 1000 whose one data claim failed without landing (no
    verdict): the topic, the member, its harness, the claim's key and the failed claim."""
    topic, log_ms = fresh_topic(partitions=1)
    member = Member(settings(partitions=1))
    h = Harness(topic, member, log_ms)
    h.read()
    commands = member.begin(h.now, 1_000.0, keys(1))
    (lost,) = data_claims(commands)
    h.run([c for c in commands if c is not lost])
    h.run(member.feed(inp.AppendFailed(0.1, lost.op, "not enough replicas")))
    assert keys(1)[0] not in member.held
    return topic, member, h, keys(1)[0], lost


def claim_at(h: Harness, key: ClaimKey, at: float, wall: float) -> cmd.Append:
    """The member claims ``key`` again at ``at`` on its lease clock, ``wall`` on the wall's."""
    h.now = at
    h.run(h.member.feed(inp.ClocksRead(at, wall)))
    h.member.ctx.out = []
    h.member.claiming.claim(key, at)
    (sent,) = [c for c in h.member.ctx.out if isinstance(c, cmd.Append)]
    return sent


def data_claims(commands: list[cmd.Command]) -> list[cmd.Append]:
    """The claims of data partitions among ``commands`` (not the member's own claim)."""
    return [
        c for c in commands
        if isinstance(c, cmd.Append) and isinstance(c.message, ClaimingPartition)
        and c.message.topic == "orders"
    ]  # fmt: skip


class TestClaimsThatTimedOut:
    @pytest.mark.parametrize("folded_first", [True, False])
    def test_a_claim_whose_write_failed_but_landed_is_held(self, folded_first: bool) -> None:
        """marshal-sim seed 11 of poison,failures (fail rate 0.2): a claim's write timed out
        but landed; told it failed, the member held nothing while the log said it held the
        claim, and could claim again only once that went stale (2*HB). It now holds it, with
        the lease of the claim's send (the grant folded before or after the failure)."""
        topic, log_ms = fresh_topic(partitions=1)
        member = Member(settings(partitions=1))
        h = Harness(topic, member, log_ms)
        h.read()
        commands = member.begin(h.now, 1_000.0, keys(1))
        claims = [c for c in commands if isinstance(c, cmd.Append)
                  and isinstance(c.message, ClaimingPartition)]  # fmt: skip
        h.run([c for c in commands if c not in claims])
        data = [c for c in claims if c.message.topic == "orders"]
        assert len(data) == 1
        (claim_cmd,) = data
        topic.append(claim_cmd.partition, claim_cmd.key, claim_cmd.value)  # it landed
        failed = inp.AppendFailed(h.now + 0.1, claim_cmd.op, "timed out")
        if folded_first:
            h.read()
            h.run(member.feed(failed))
        else:
            h.run(member.feed(failed))
            h.read()
        key = keys(1)[0]
        assert key in member.held
        assert member.held[key].lease == member.ctx.lease_from(0.0)  # from the claim's send

    def test_a_landed_claim_is_held_with_the_lease_of_its_own_send(self) -> None:
        """marshal-sim seed 1608056 of feed-loss,failures,read-latency,stall (fail rate 0.3): a
        claim failed without landing and got no verdict; 20 s later another claim of the same
        partition timed out and landed. The lease counted from the first claim since the last
        verdict, so the landed claim was adopted with its lease over by 17 s and given up at
        once (the partition then waited for that claim's own record to go stale, 2*HB). The
        landed record's bytes (whole wall seconds among them) say which claim it is: its lease
        counts from the first send of those bytes."""
        topic, member, h, key, lost = a_claim_that_failed_without_landing()
        assert key not in member.held
        again = claim_at(h, key, 20.0, 1_020.0)
        assert again.message != lost.message  # another second: other bytes
        topic.append(again.partition, again.key, again.value)  # it landed
        h.run(member.feed(inp.AppendFailed(20.1, again.op, "timed out")))
        h.read()
        assert key in member.held
        assert member.held[key].lease == member.ctx.lease_from(20.0)  # from its own send

    def test_a_landed_claim_sent_twice_in_one_second_counts_from_the_first_send(self) -> None:
        """Two claims in one wall second are the same bytes: the record that landed may be the
        first, so the lease counts from the first send, not the second's."""
        topic, member, h, key, _ = a_claim_that_failed_without_landing()
        sends = [claim_at(h, key, at, 1_000.0 + at) for at in (20.0, 20.5)]  # in second 1020
        assert sends[0].message == sends[1].message
        h.run(member.feed(inp.AppendFailed(20.1, sends[0].op, "not enough replicas")))
        topic.append(sends[1].partition, sends[1].key, sends[1].value)  # the second landed
        h.run(member.feed(inp.AppendFailed(20.6, sends[1].op, "timed out")))
        h.read()
        assert key in member.held
        assert member.held[key].lease == member.ctx.lease_from(20.0)  # the bytes' first send

    def test_a_claim_repeating_the_bytes_of_one_let_go_counts_from_the_first_send(
        self,
    ) -> None:
        """Claims older than a lease are let go (a claim write that fails for good must not
        grow the member for days). If the wall clock then goes back, a new claim may repeat
        the bytes of one let go, which may be the record that landed: its lease counts from
        the first claim's send."""
        topic, member, h, key, early = a_claim_that_failed_without_landing()
        later = claim_at(h, key, 10.0, 1_010.0)
        h.run(member.feed(inp.AppendFailed(10.1, later.op, "not enough replicas")))
        sent = claim_at(h, key, 11.0, 1_000.2)  # the wall clock went back
        assert sent.message == early.message  # the same bytes as the claim let go
        topic.append(sent.partition, sent.key, sent.value)
        h.run(member.feed(inp.AppendFailed(11.1, sent.op, "timed out")))
        h.read()
        lease = member.held[key].lease if key in member.held else None
        assert lease in (None, member.ctx.lease_from(0.0))  # never from 11.0

    @pytest.mark.parametrize("moved", [False, True])
    @pytest.mark.parametrize("refused", [False, True])
    def test_an_earlier_tenure_the_fold_still_shows_is_not_adopted(
        self, refused: bool, moved: bool
    ) -> None:
        """A review of the adoption above: the fold shows this instance holding a claim it lost
        (its lease ended; no release, no rival's grant landed yet) until a record says
        otherwise. A claim of it that then fails (never landed), or is refused as already held
        by this client, must not hold that old tenure: a rival may win it any moment. A later
        review: the check compared the grant's token with the fold's offset at the claim's
        send, and a moved group's tokens start above its offsets (its token base), so the old
        tenure passed it (``moved``); the grant's record offset is compared now."""
        topic, log_ms = fresh_topic(partitions=1)
        member = Member(settings(partitions=1))
        h = start(member, topic, log_ms, n=1)
        key = keys(1)[0]
        held = member.held[key]
        member.keeping.lose(held, "test")
        h.run(member.feed(inp.ChildExited(h.now, key, -9)))
        assert key not in member.held
        state = member.ctx.state_of(key)
        assert state is not None and state.holder_instance == "i1"  # the old tenure, shown
        if moved:  # as a move's token base: every token above every offset
            assert state.token is not None
            token, offset, message = member.claiming.own_grants[key]
            state.token = token + 1_000_000
            member.claiming.own_grants[key] = (state.token, offset, message)
        member.ctx.out = []
        member.claiming.claim(key, h.now)
        (again,) = [c for c in member.ctx.out if isinstance(c, cmd.Append)]
        if refused:  # it lands, and the log refuses it: already held by this client
            h.run([again])
        else:
            h.run(member.feed(inp.AppendFailed(h.now, again.op, "queue full")))
        assert key not in member.held


class TestIsolation:
    def test_a_restart_resumes_only_its_own_groups_claims(self) -> None:
        """Client id c1 in groups a and b: the restarted member of b touches nothing of a."""
        topic, log_ms = fresh_topic()
        for group in ("a", "b"):
            start(Member(settings(group=group)), topic, log_ms)
        restarted = start(Member(settings(group="b", instance="i2")), topic, log_ms)
        groups = {m.group_id for m in restarted.appended(Heartbeat)}
        assert groups == {"b"}
        assert all(k.group == "b" for k in restarted.member.held)


class TestLogClock:
    def test_silence_is_measured_on_the_claims_own_partition(self) -> None:
        """Two partitions whose brokers' clocks differ: each claim ages by its own."""
        member = Member(settings())
        member.ctx.clock.saw(0, 50_000, now=10.0)
        member.ctx.clock.saw(1, 20_000, now=10.0)
        assert member.ctx.clock.now_ms(0, 11.0) == 51_000
        assert member.ctx.clock.now_ms(1, 11.0) == 21_000


class TestTakeover:
    def test_a_takeover_gets_a_new_token_and_waits_for_the_old_lease(self) -> None:
        """The second instance of c1 resumes with the takeover's offset as token, and starts
        its child only 2*HB after the old instance's last accepted heartbeat."""
        topic, log_ms = fresh_topic(partitions=1)
        old = start(Member(settings(partitions=1)), topic, log_ms, n=1)
        old.run(old.member.feed(inp.StartFound(old.now, keys(1)[0], 7)))
        old.tick(0.1)
        old_token = old.member.held[keys(1)[0]].token
        log_ms[0] += 300
        new = start(Member(settings(instance="i2", partitions=1)), topic, log_ms, n=1)
        held = new.member.held[keys(1)[0]]
        assert held.token > old_token and held.position == 7
        assert held.start_after >= new.now + 2 * HB - 0.3 - 0.01
        new.tick(1.0)
        assert not any(isinstance(c, cmd.Spawn) for c in new.commands)
        new.tick(1.0)
        assert any(isinstance(c, cmd.Spawn) for c in new.commands)

    def test_a_claim_with_no_position_is_not_taken_over_but_claimed_once_stale(self) -> None:
        """The old instance won the claim and died before a position was in the log: the new
        instance does not take it over at a start of its own looking up (the old instance's
        first heartbeat may land first with a lower start, which a takeover above it would
        pass over, and a reader of the compacted log would estimate the takeover's offset:
        `marshal-sim` seed 403004, a review). It claims the claim once it is stale."""
        topic, log_ms = fresh_topic(partitions=1)
        old = start(Member(settings(partitions=1)), topic, log_ms, n=1)
        assert keys(1)[0] in old.member.held  # won, its start not found yet: no position
        log_ms[0] += 300
        new = start(Member(settings(instance="i2", partitions=1)), topic, log_ms, n=1)
        takeovers = [m for m in new.appended(Heartbeat) if m.topic == "orders"]
        assert takeovers == [] and keys(1)[0] not in new.member.held
        assert not any(isinstance(c, cmd.LookupStart) for c in new.commands)
        for _ in range(6):
            new.tick(0.5)  # past 2*HB of silence from the old instance
        assert keys(1)[0] in new.member.held
        assert [c.key for c in new.commands if isinstance(c, cmd.LookupStart)] == keys(1)

    def test_a_takeover_that_lands_below_the_position_is_followed_by_one_at_it(self) -> None:
        """A twin of the old instance (the same client id, still running) heartbeats 9 between
        the new instance's read and its takeover at 7: the whole log keeps 9, but the takeover
        is now the newest record under the claim's position key, and a reader of the compacted
        log would resume at 7 (AMO: 7 and 8 handed out twice). The new instance writes a
        heartbeat at 9 at once, not HB/2 later."""
        topic, log_ms = fresh_topic(partitions=1)
        key = keys(1)[0]
        old = start(Member(settings(partitions=1)), topic, log_ms, n=1)
        old.run(old.member.feed(inp.StartFound(old.now, key, 7)))
        old.tick(0.1)
        log_ms[0] += 300
        member = Member(settings(instance="i2", partitions=1))
        new = Harness(topic, member, log_ms)
        new.read()
        commands = member.begin(new.now, 1_000.0, [key])
        (takeover,) = [
            c for c in commands
            if isinstance(c, cmd.Append) and isinstance(c.message, Heartbeat)
            and c.message.topic == "orders"
        ]  # fmt: skip
        assert takeover.message.offset == 7
        write(topic, Heartbeat(0, "i1", "c1", "g", "orders", 0, 9))  # the twin's, landed first
        new.run(commands)
        assert member.held[key].position == 9
        new.tick(0.05)
        beats = [m.offset for m in new.appended(Heartbeat) if m.topic == "orders"]
        assert beats == [7, 9]

    def test_a_resumed_claim_is_not_released_before_the_old_lease_ends(self) -> None:
        """TERM right after a takeover: the release waits (found by marshal-sim, seed 29)."""
        topic, log_ms = fresh_topic(partitions=1)
        old = start(Member(settings(partitions=1)), topic, log_ms, n=1)
        old.run(old.member.feed(inp.StartFound(old.now, keys(1)[0], 0)))
        old.tick(0.1)
        new = start(Member(settings(instance="i2", partitions=1)), topic, log_ms, n=1)
        new.run(new.member.feed(inp.SignalReceived(new.now, signal.SIGTERM)))

        def released() -> bool:
            return any(
                isinstance(c, cmd.Append)
                and isinstance(c.message, ReleasingPartition)
                and c.message.topic == "orders"
                for c in new.commands
            )

        for _ in range(10):
            new.tick(0.1)
        assert not released() and new.member.held[keys(1)[0]].phase is Phase.STOPPING
        for _ in range(15):
            new.tick(0.1)
        assert released()


class TestGrants:
    def grant_setup(self) -> tuple[Harness, ClaimKey]:
        topic, log_ms = fresh_topic(partitions=1)
        h = start(Member(settings(mode=Mode.AMO, partitions=1)), topic, log_ms, n=1)
        key = keys(1)[0]
        h.run(h.member.feed(inp.StartFound(h.now, key, 100)))
        h.tick(0.05)
        return h, key

    def test_a_batch_behind_the_logs_position_is_refused(self) -> None:
        """Another instance reserved up to 200: a batch from 150 is refused by the verdict."""
        h, key = self.grant_setup()
        other = ClaimingMessages(0, "i9", "c1", "g", "orders", 0, 200)
        h.member.held[key].position = 150  # what a stale instance believes
        write(h.topic, other)  # refused by the fold (not the holder instance); change nothing
        h.run(h.member.feed(inp.ChildSaid(h.now, key, ipc.GrantRequest(1, 50, 300))))
        grants = [c.message for c in h.commands if isinstance(c, cmd.TellChild)]
        assert grants == [ipc.Grant(1, False, "batch starts at 50, before the position 150")]

    def committed(self, h: Harness, key: ClaimKey) -> int | None:
        """The claim's committed position in the member's fold of the log."""
        state = next(w.claims[key] for w in h.member.worlds.values() if key in w.claims)
        return state.committed

    def test_a_batch_at_the_position_is_reserved_committed_and_granted(self) -> None:
        """Reservation folded valid, then the grant; the reservation commits its records
        itself (rule 4): no heartbeat per batch (one coordination record per batch, not two)."""
        h, key = self.grant_setup()
        heartbeats = len(h.appended(Heartbeat))
        h.run(h.member.feed(inp.ChildSaid(h.now, key, ipc.GrantRequest(1, 100, 150))))
        grants = [c.message for c in h.commands if isinstance(c, cmd.TellChild)]
        assert grants == [ipc.Grant(1, True, "")]
        assert h.member.held[key].position == 150
        assert len(h.appended(Heartbeat)) == heartbeats
        assert self.committed(h, key) == 150
        h.tick(0.6)  # the next periodic heartbeat carries the granted end
        assert h.appended(Heartbeat)[-1].offset == 150

    # ---- one batch ahead: two reservations of a child in flight -----------------------------

    def ask(self, h: Harness, key: ClaimKey, request: ipc.GrantRequest) -> list[cmd.Append]:
        """The child asks; its reservation is held back (in flight) and returned."""
        commands = h.member.feed(inp.ChildSaid(h.now, key, request))
        h.commands.extend(commands)
        return [c for c in commands if isinstance(c, cmd.Append)]

    def land(self, h: Harness, appends: list[cmd.Append]) -> None:
        """The held-back reservations are appended, acknowledged and read, in order."""
        for c in appends:
            done = h.topic.append(c.partition, record_key(c.message), encode(c.message))
            h.run(h.member.feed(inp.AppendDone(h.now, c.op, done)))
        h.read()

    def grants(self, h: Harness) -> list[ipc.ToChild]:
        return [c.message for c in h.commands if isinstance(c, cmd.TellChild)]

    def beats(self, h: Harness) -> list[int]:
        """The offsets of the heartbeats written for the data claim (not the member's own)."""
        return [m.offset for m in h.appended(Heartbeat) if m.topic == "orders"]

    def test_a_heartbeat_due_while_a_reservation_is_in_flight_waits_for_its_verdict(
        self,
    ) -> None:
        """Decision 18: a heartbeat sets the committed position, so one written while a
        reservation is in flight would carry the position before it and land after it (the
        key's newest record behind the reservation: a compacted reader would resume there).
        It waits for the verdict, then goes at once with the reservation's end."""
        h, key = self.grant_setup()
        h.tick(0.5)  # a periodic heartbeat now; the next is due in HB/2
        before = len(self.beats(h))
        asked = self.ask(h, key, ipc.GrantRequest(1, 100, 150))
        h.tick(0.55)  # due, and the reservation still in flight: no heartbeat yet
        assert len(self.beats(h)) == before
        self.land(h, asked)
        assert self.grants(h) == [ipc.Grant(1, True, "")]
        assert self.beats(h)[before:] == [150]

    def test_a_heartbeat_that_cannot_wait_longer_is_written_again_after_the_verdict(
        self,
    ) -> None:
        """The lease comes first: past HB/4 of waiting the heartbeat goes with the position it
        has, and once the reservation is decided another carries the reservation's end, so the
        key's newest record is not left behind it."""
        h, key = self.grant_setup()
        h.tick(0.5)
        before = len(self.beats(h))
        asked = self.ask(h, key, ipc.GrantRequest(1, 100, 150))
        h.tick(0.8)  # due 0.3 s ago: more than HB/4
        assert self.beats(h)[before:] == [100]
        self.land(h, asked)
        assert self.beats(h)[before:] == [100, 150]

    def test_a_heartbeat_does_not_wait_on_a_lease_with_less_than_hb_left(self) -> None:
        """The lease first: when the heartbeat before was not confirmed (lost, late), the
        lease has less than HB left when the next is due, and it goes at once, reservation in
        flight or not (then again after the verdict)."""
        h, key = self.grant_setup()
        h.tick(0.5)
        before = len(self.beats(h))
        asked = self.ask(h, key, ipc.GrantRequest(1, 100, 150))
        held = h.member.held[key]
        held.lease = h.now + 0.9  # what an unconfirmed heartbeat leaves
        h.tick(0.55)  # due: it goes now, though the reservation is in flight
        assert self.beats(h)[before:] == [100]
        self.land(h, asked)
        assert self.beats(h)[before:] == [100, 150]

    def test_a_heartbeat_that_went_on_a_short_lease_is_not_written_again_each_turn(
        self,
    ) -> None:
        """The one that went at once on a lease with less than HB left is followed by one
        after the verdict, not by one on every turn until then: a member turns on every record
        it reads, so that was dozens of writes a second while the log was slow. The next one
        due still goes on time."""
        h, key = self.grant_setup()
        h.tick(0.5)
        before = len(self.beats(h))
        asked = self.ask(h, key, ipc.GrantRequest(1, 100, 150))
        h.member.held[key].lease = h.now + 1.4  # less than HB left when the next is due
        written: list[cmd.Append] = []

        def turn(step: float) -> list[int]:
            """A member turn ``step`` later, the log slow (nothing written lands): the offsets
            of the claim's heartbeats written so far."""
            h.now += step
            h.log_ms[0] += round(step * 1000)
            said = h.member.feed(inp.Tick(h.now, 1_000.0 + h.now))
            written.extend(c for c in said if isinstance(c, cmd.Append))
            beats = [c.message for c in written if isinstance(c.message, Heartbeat)]
            return [m.offset for m in beats if m.topic == "orders"]

        assert [turn(step) for step in (0.55, 0.01, 0.01, 0.02, 0.05)] == [[100]] * 5
        assert turn(0.42) == [100, 100]  # the next on time (HB/2 after), the verdict still late
        h.commands.extend(written)
        self.land(h, asked + written)
        assert self.beats(h)[before:] == [100, 100, 150]

    def test_a_batch_asked_while_a_heartbeat_waits_is_held_back_until_after_it(self) -> None:
        """A child asks for its next batch as soon as it may, so a heartbeat waiting for no
        reservation in flight would wait for ever: while one is owed, a new reservation is
        held back, and written right after the heartbeat (which carries the end of the one
        decided), never before it."""
        h, key = self.grant_setup()
        h.tick(0.5)
        before = len(self.beats(h))
        first = self.ask(h, key, ipc.GrantRequest(1, 100, 150))
        h.tick(0.55)  # the heartbeat is owed, and waits for the first reservation
        assert self.ask(h, key, ipc.GrantRequest(2, 150, 200)) == []  # held back
        self.land(h, first)
        order = [
            (type(c.message).__name__, c.message.offset)
            for c in h.commands
            if isinstance(c, cmd.Append)
            and isinstance(c.message, Heartbeat | ClaimingMessages)
            and c.message.topic == "orders"
        ]
        assert order[-2:] == [("Heartbeat", 150), ("ClaimingMessages", 200)]
        assert self.beats(h)[before:] == [150]
        h.read()
        assert self.grants(h) == [ipc.Grant(1, True, ""), ipc.Grant(2, True, "")]
        assert h.member.held[key].position == 200

    def test_the_next_batch_asked_while_one_is_in_flight_is_reserved_and_granted_in_order(
        self,
    ) -> None:
        """Two reservations in flight: both written, decided in order, each committed."""
        h, key = self.grant_setup()
        first = self.ask(h, key, ipc.GrantRequest(1, 100, 150))
        second = self.ask(h, key, ipc.GrantRequest(2, 150, 200))
        assert [c.message.offset for c in first + second] == [150, 200]
        assert self.grants(h) == []
        self.land(h, first + second)
        assert self.grants(h) == [ipc.Grant(1, True, ""), ipc.Grant(2, True, "")]
        assert h.member.held[key].position == 200
        assert self.committed(h, key) == 200

    def test_a_batch_overlapping_the_one_in_flight_is_refused_unwritten(self) -> None:
        """The floor is the end of the batch asked for before, not only the position."""
        h, key = self.grant_setup()
        assert len(self.ask(h, key, ipc.GrantRequest(1, 100, 150))) == 1
        assert self.ask(h, key, ipc.GrantRequest(2, 120, 200)) == []
        assert self.grants(h) == [
            ipc.Grant(2, False, "batch starts at 120, before the position 150")
        ]

    def test_after_a_refusal_the_batch_asked_ahead_is_refused_too(self) -> None:
        """Batch 1 refused at once: batch 2, valid on its own, is refused (the child exits at 1)."""
        h, key = self.grant_setup()
        h.member.held[key].position = 150
        assert self.ask(h, key, ipc.GrantRequest(1, 100, 150)) == []
        assert self.ask(h, key, ipc.GrantRequest(2, 150, 200)) == []
        assert [g.granted for g in self.grants(h) if isinstance(g, ipc.Grant)] == [False, False]
        assert h.appended(ClaimingMessages) == []

    def test_a_first_reservation_unwritten_is_covered_by_the_second_that_lands(self) -> None:
        """1 fails to append while 2 is in flight, 2 lands: 2's record, by the same holder,
        reserves everything below its end, so 1 is granted with it (before, both were refused
        and the child ended, counted as a crash, losing 1 and 2)."""
        h, key = self.grant_setup()
        first = self.ask(h, key, ipc.GrantRequest(1, 100, 150))
        second = self.ask(h, key, ipc.GrantRequest(2, 150, 200))
        h.run(h.member.feed(inp.AppendFailed(h.now, first[0].op, "broker down")))
        assert self.grants(h) == []  # answered with the second
        self.land(h, second)
        assert self.grants(h) == [ipc.Grant(1, True, ""), ipc.Grant(2, True, "")]
        assert h.member.held[key].position == 200

    def test_a_covered_reservation_is_refused_with_the_later_one(self) -> None:
        """1 unwritten, 2 refused at its verdict: both refused, 1 first."""
        h, key = self.grant_setup()
        first = self.ask(h, key, ipc.GrantRequest(1, 100, 150))
        second = self.ask(h, key, ipc.GrantRequest(2, 150, 200))
        h.commands.extend(h.member.feed(inp.AppendFailed(h.now, first[0].op, "broker down")))
        op = second[0].op
        for _ in range(WRITE_TRIES):  # the second, written again, fails each time
            commands = h.member.feed(inp.AppendFailed(h.now, op, "broker down"))
            h.commands.extend(commands)
            op = next((c.op for c in commands if isinstance(c, cmd.Append)), op)
        assert [(g.request_id, g.granted) for g in self.grants(h)] == [(1, False), (2, False)]

    def test_a_verdict_for_an_ended_child_is_not_told_to_its_successor(self) -> None:
        """Request ids start again at 1 in a new child: an old grant must not answer it."""
        h, key = self.grant_setup()
        first = self.ask(h, key, ipc.GrantRequest(1, 100, 150))
        h.run(h.member.feed(inp.ChildExited(h.now, key, 1)))  # it crashed; restarted later
        h.tick(1.0)
        assert len([c for c in h.commands if isinstance(c, cmd.Spawn)]) == 2
        self.land(h, first)
        assert self.grants(h) == []
        assert h.member.held[key].position == 150  # reserved: the new child asks from there

    def test_verdicts_acted_on_out_of_request_order_never_move_the_position_back(self) -> None:
        """Both records folded before their acknowledgements, which come second first: both
        granted, and the position ends at the second's end (it went back to 150 before)."""
        h, key = self.grant_setup()
        first = self.ask(h, key, ipc.GrantRequest(1, 100, 150))
        second = self.ask(h, key, ipc.GrantRequest(2, 150, 200))
        done = [h.topic.append(c.partition, record_key(c.message), encode(c.message))
                for c in first + second]  # fmt: skip
        h.read()  # the verdicts wait for their acknowledgements
        h.run(h.member.feed(inp.AppendDone(h.now, second[0].op, done[1])))
        h.run(h.member.feed(inp.AppendDone(h.now, first[0].op, done[0])))
        assert self.grants(h) == [ipc.Grant(2, True, ""), ipc.Grant(1, True, "")]
        assert h.member.held[key].position == 200
        assert self.committed(h, key) == 200

    def test_an_unwritten_reservation_is_written_again_not_refused(self) -> None:
        """The newest reservation's append fails (a leader election): it is written
        again and both batches are granted; before, the refusal ended the child with exit 7,
        counted as a crash (three in a row released the partition for 60 s)."""
        h, key = self.grant_setup()
        first = self.ask(h, key, ipc.GrantRequest(1, 100, 150))
        second = self.ask(h, key, ipc.GrantRequest(2, 150, 200))
        commands = h.member.feed(inp.AppendFailed(h.now, second[0].op, "broker down"))
        again = [c for c in commands if isinstance(c, cmd.Append)]
        assert [c.message.offset for c in again] == [200]
        self.land(h, first + again)
        assert self.grants(h) == [ipc.Grant(1, True, ""), ipc.Grant(2, True, "")]
        assert h.member.held[key].position == 200

    def test_a_reservation_written_again_whose_first_write_landed_is_granted(self) -> None:
        """The first write timed out but landed; the second (same end) finds the position at its
        own end: granted, not refused as 'behind the log's position' (marshal-sim seed 55)."""
        h, key = self.grant_setup()
        (first,) = self.ask(h, key, ipc.GrantRequest(1, 100, 150))
        again = [c for c in h.member.feed(inp.AppendFailed(h.now, first.op, "timed out"))
                 if isinstance(c, cmd.Append)]  # fmt: skip
        h.topic.append(first.partition, record_key(first.message), encode(first.message))
        self.land(h, again)
        assert self.grants(h) == [ipc.Grant(1, True, "")]
        assert h.member.held[key].position == 150

    def test_a_reservation_fails_for_good_after_its_tries(self) -> None:
        """Written `WRITE_TRIES` times and failed each time: refused (the child ends there)."""
        h, key = self.grant_setup()
        (op,) = self.ask(h, key, ipc.GrantRequest(1, 100, 150))
        for _ in range(WRITE_TRIES):
            commands = h.member.feed(inp.AppendFailed(h.now, op.op, "broker down"))
            h.commands.extend(commands)
            retried = [c for c in commands if isinstance(c, cmd.Append)]
            if retried:
                op = retried[0]
        assert self.grants(h) == [ipc.Grant(1, False, "reservation not written: broker down")]

    # ---- a graceful stop with batches in flight (AMO loses nothing) -------------------------

    def test_batches_in_flight_when_told_to_stop_are_granted_and_released_after(self) -> None:
        """SIGTERM with two reservations in flight: both granted (the child handles them before
        it exits), and the release carries the end of the second. Refusing them would lose the
        200 records the log reserved (graceful operations lose nothing)."""
        h, key = self.grant_setup()
        first = self.ask(h, key, ipc.GrantRequest(1, 100, 150))
        second = self.ask(h, key, ipc.GrantRequest(2, 150, 200))
        h.run(h.member.feed(inp.SignalReceived(h.now, signal.SIGTERM)))
        assert h.member.held[key].phase is Phase.STOPPING
        assert any(isinstance(c, cmd.TellChild) and c.message == ipc.Stop() for c in h.commands)
        self.land(h, first + second)
        grants = [g for g in self.grants(h) if isinstance(g, ipc.Grant)]
        assert grants == [ipc.Grant(1, True, ""), ipc.Grant(2, True, "")]
        h.run(h.member.feed(inp.ChildSaid(h.now, key, ipc.Stopped(200))))
        h.run(h.member.feed(inp.ChildExited(h.now, key, 0)))
        h.tick(0.05)
        assert [m.offset for m in h.appended(ReleasingPartition) if m.topic == "orders"] == [200]

    def test_a_fast_stop_kills_the_child_and_still_releases(self) -> None:
        """INT revokes the child's lease and kills it at once, but the claim's lease in the log
        still runs: the release is written (a member past its own lease writes none, decision
        19, and the revoked lease is not that; CI found the releases gone after the merge)."""
        h, key = self.grant_setup()
        self.land(h, self.ask(h, key, ipc.GrantRequest(1, 100, 150)))
        h.run(h.member.feed(inp.SignalReceived(h.now, signal.SIGINT)))
        assert h.member.held[key].lease == 0.0  # the child's is revoked
        h.run(h.member.feed(inp.ChildExited(h.now, key, -9, None, 120)))
        h.tick(0.05)
        assert [m.topic for m in h.appended(ReleasingPartition)] == ["orders", "__member.c1"]

    def test_a_batch_asked_after_the_stop_is_refused_unwritten(self) -> None:
        """A request that crossed the `Stop` on the pipe is refused before anything is written:
        nothing is reserved, so nothing is lost, and the release stays at the handled end."""
        h, key = self.grant_setup()
        first = self.ask(h, key, ipc.GrantRequest(1, 100, 150))
        h.run(h.member.feed(inp.SignalReceived(h.now, signal.SIGTERM)))
        assert self.ask(h, key, ipc.GrantRequest(2, 150, 200)) == []
        self.land(h, first)
        grants = [g for g in self.grants(h) if isinstance(g, ipc.Grant)]
        assert [(g.request_id, g.granted) for g in grants] == [(2, False), (1, True)]
        h.run(h.member.feed(inp.ChildExited(h.now, key, 0)))
        h.tick(0.05)
        assert [m.offset for m in h.appended(ReleasingPartition) if m.topic == "orders"] == [150]

    def losses(self, h: Harness) -> list[obs.AmoLost]:
        return [
            c.what
            for c in h.commands
            if isinstance(c, cmd.Observe) and isinstance(c.what, obs.AmoLost)
        ]

    def test_a_crash_with_a_batch_granted_ahead_reports_what_it_loses(self) -> None:
        """A child killed after handling 100..130 of two granted batches (to 200)
        loses 130..200: observed with its cause, for the loss metric."""
        h, key = self.grant_setup()
        self.land(h, self.ask(h, key, ipc.GrantRequest(1, 100, 150)))
        self.land(h, self.ask(h, key, ipc.GrantRequest(2, 150, 200)))
        h.run(h.member.feed(inp.ChildExited(h.now, key, -9, None, 130)))
        assert self.losses(h) == [obs.AmoLost(key, 130, 200, obs.LossCause.CRASH)]

    def test_a_child_that_stops_on_a_raising_handler_loses_its_run_to_the_handler(self) -> None:
        """The handler raised on 130 under `stop`: the child reports HandlerFailed and exits
        with EXIT_HANDLER_FAILED; 130..200 is lost to the handler's failure, as a timeout's
        is, not to a crash (a review read `crash` for every raised handler)."""
        h, key = self.grant_setup()
        self.land(h, self.ask(h, key, ipc.GrantRequest(1, 100, 150)))
        self.land(h, self.ask(h, key, ipc.GrantRequest(2, 150, 200)))
        h.run(h.member.feed(inp.ChildSaid(h.now, key, ipc.HandlerFailed(130, "ValueError", ""))))
        h.run(h.member.feed(inp.ChildExited(h.now, key, EXIT_HANDLER_FAILED, None, 130)))
        assert self.losses(h) == [obs.AmoLost(key, 130, 200, obs.LossCause.HANDLER_FAILED)]

    def test_a_refused_reservation_and_the_crash_after_it_are_reported_once(self) -> None:
        """Batch 1 (100..150) granted, batch 2 (150..200) reserved in the log but refused by
        the member (its lease ran out); the child ends having handled to 120: 120..200 is lost
        and each record is reported once (150..200 refused, 120..150 with the crash)."""
        h, key = self.grant_setup()
        self.land(h, self.ask(h, key, ipc.GrantRequest(1, 100, 150)))
        second = self.ask(h, key, ipc.GrantRequest(2, 150, 200))
        h.member.held[key].lease = h.now - 0.01  # the verdict comes after the lease ran out
        self.land(h, second)
        h.run(h.member.feed(inp.ChildExited(h.now, key, -9, None, 120)))
        ranges = sorted((lost.start, lost.end) for lost in self.losses(h))
        assert ranges == [(120, 150), (150, 200)]

    def test_a_graceful_stop_reports_no_loss(self) -> None:
        """Told to stop, the child handles both granted batches: nothing lost, nothing said."""
        h, key = self.grant_setup()
        first = self.ask(h, key, ipc.GrantRequest(1, 100, 150))
        second = self.ask(h, key, ipc.GrantRequest(2, 150, 200))
        h.run(h.member.feed(inp.SignalReceived(h.now, signal.SIGTERM)))
        self.land(h, first + second)
        h.run(h.member.feed(inp.ChildSaid(h.now, key, ipc.Stopped(200))))
        h.run(h.member.feed(inp.ChildExited(h.now, key, 0, None, 200)))
        assert self.losses(h) == []

    def test_a_verdict_for_a_lost_claims_child_is_not_told_to_the_next_holding(self) -> None:
        """The claim is lost with a reservation in flight and won again: the new child (its
        request ids start at 1 too) hears nothing of the old verdict, and is not refused."""
        h, key = self.grant_setup()
        old = self.ask(h, key, ipc.GrantRequest(1, 100, 150))
        held = h.member.held[key]
        h.member.keeping.lose(held, "test")
        h.run(h.member.feed(inp.ChildExited(h.now, key, -9)))
        assert key not in h.member.held
        h.member.keeping.hold(key, held.token + 1, h.now + 10, h.now)  # won again, new token
        h.member.held[key].position = 100
        h.tick(0.05)
        assert h.member.held[key].child
        self.land(h, old)  # the old verdict: refused (another token), told to nobody
        assert self.grants(h) == []
        assert len(self.ask(h, key, ipc.GrantRequest(1, 150, 200))) == 1  # not refused


class TestFailureCounts:
    def test_a_release_for_a_lease_that_ran_out_is_a_warning_not_an_error(self) -> None:
        """A frozen supervisor's children end at their lease: each claim's release is said
        at warning (what went wrong is the freeze, said once); a review counted 16 error lines
        after one freeze, each followed by its release withheld."""
        h, key = running_claim()
        h.member.held[key].lease = h.now - 0.01  # it ran out meanwhile
        commands = h.member.feed(inp.ChildExited(h.now, key, EXIT_LEASE_EXPIRED))
        (line,) = [c for c in commands if isinstance(c, cmd.Log) and c.event == "claim_releasing"]
        assert line.level == "warning" and line.fields["reason"] == "lease expired"

    def test_a_host_reader_lost_again_and_again_never_releases_a_quiet_slice(self) -> None:
        """A slice child fed by its host's reader (`supervisor.feeds`) ends with the Kafka
        code each time the reader is killed, minutes apart; the slice has no records, so no
        `Stats` ever clears a count. Each child ran a while: restarted without a count, and the
        claim is kept (a review: five reader kills released the slice for a minute)."""
        member = Member(replace(settings(partitions=1), max_handler_failures=3))
        h, key = running_claim(member)
        for _ in range(5):
            assert h.member.held[key].child
            for _ in range(10):
                h.tick(0.5)  # the child runs a while (heartbeats go on)
            lost = ChildEnd(EXIT_KAFKA, feed_lost=True)
            h.run(h.member.feed(inp.ChildExited(h.now, key, EXIT_KAFKA, lost)))
            assert h.member.held[key].failures == 0
            h.tick(1.0)  # the restart's back-off
        assert [m for m in h.appended(ReleasingPartition) if m.topic == "orders"] == []

    def test_a_failure_count_whose_write_fails_is_written_again(self) -> None:
        """A RecordFailed whose append failed was dropped, and the failure count
        with it; it is written again, the same record."""
        h, key = running_claim()
        failed = ipc.HandlerFailed(120, "ValueError: bad", "")
        commands = h.member.feed(inp.ChildSaid(h.now, key, failed))
        (first,) = [
            c for c in commands if isinstance(c, cmd.Append) and c.value.startswith(b"RecordFailed")
        ]
        again = h.member.feed(inp.AppendFailed(h.now, first.op, "broker down"))
        (second,) = [c for c in again if isinstance(c, cmd.Append)]
        assert (second.value, second.key) == (first.value, first.key)
        assert second.op != first.op

    def test_a_release_waits_for_the_failure_count_written_again(self) -> None:
        """marshal-sim (mix with `failures`, seeds 58, 81, 119): the child failed for the last
        time, the member wrote the count and released the claim; the count's write failed, was
        written again behind the release, and the log refused it (not the holder): the record
        was tried once more than `poison_park_after`, with no fault of the member's. The release
        waits until the count is decided or given up."""
        member = Member(replace(settings(partitions=1), max_handler_failures=1))
        h, key = running_claim(member)
        failed = member.feed(inp.ChildSaid(h.now, key, ipc.HandlerFailed(120, "ValueError", "")))
        (count,) = [c for c in failed if isinstance(c, cmd.Append)]
        ended = member.feed(inp.ChildExited(h.now, key, EXIT_HANDLER_FAILED))
        h.run([c for c in ended if not isinstance(c, cmd.Append)])
        written = [c for c in ended if isinstance(c, cmd.Append)]
        again = member.feed(inp.AppendFailed(h.now, count.op, "broker down"))  # written again
        h.run(written)  # sent before the count was written again: it lands first
        h.run(again)
        for _ in range(5):
            h.tick(0.1)
        values = [r.value for r in h.topic.read(0, 0)]
        kinds = [v.split(b"/")[0] for v in values if v.startswith((b"RecordFailed", b"Releasing"))]
        assert kinds == [b"RecordFailed", b"ReleasingPartition"]
        state = member.worlds[0].poison.get(key)
        assert state is not None and state.failures == 1  # counted: the holder wrote it
        assert key not in member.held  # released once the count landed

    @pytest.mark.parametrize("ended", ["handler_failed", "handler_timed_out"])
    def test_past_its_lease_a_member_writes_no_failure_count(self, ended: str) -> None:
        """Decision 19 for counts (a review of 2026-11-27): a member frozen past its lease
        thaws, hears its child's failure and wrote its count; by then a rival may hold the
        claim and have counted the record (or the next one) to parked, the log refuses the
        count, but it is the newest record under the counts' key, and once the cleaner runs a
        compacted reader takes it as written: the rival's parked count is gone, and a record
        is tried again from 1. Past its own lease a member writes no count."""
        topic, log_ms = fresh_topic(partitions=1)
        member = Member(settings(partitions=1))
        h = start(member, topic, log_ms, n=1)
        key = keys(1)[0]
        h.run(member.feed(inp.StartFound(h.now, key, 100)))
        h.tick(0.05)
        held = member.held[key]
        late = held.lease + 0.5  # frozen: no tick in between
        if ended == "handler_failed":
            said = ipc.HandlerFailed(120, "ValueError", "")
            commands = member.feed(inp.ChildSaid(late, key, said))
        else:
            end = ChildEnd(EXIT_HANDLER_TIMEOUT, ipc.Settle(120, 121, "timed out"), 2.0)
            commands = member.feed(inp.ChildExited(late, key, EXIT_HANDLER_TIMEOUT, end=end))
        counts = [c for c in commands if isinstance(c, cmd.Append)
                  and c.value.startswith(b"RecordFailed")]  # fmt: skip
        assert counts == []

    @pytest.mark.parametrize("given_up", ["append_failed", "no_verdict_in_time"])
    def test_a_failure_count_is_not_written_again_once_the_claim_was_lost_and_won_again(
        self, given_up: str
    ) -> None:
        """marshal-sim seed 2120009 (unordered, every fault): a member wrote a count (3 of 4),
        its host stalled with its lease clock held, the cleaner took the count's record before
        the member read it, so no verdict came. Meanwhile others held the claim, an operator
        retried the record and it was counted to parked again. The member won the claim back,
        the old count's write timed out, and it wrote the count again under its new lease: the
        log counted it once more and its outcome ``retry`` unparked the record, tried a fifth
        time after the operator's retry. A count is written again only in the tenure it was
        written in (the claim's token); after that, the failure goes uncounted, as after a
        crash."""
        topic, log_ms = fresh_topic(partitions=1)
        member = Member(settings(partitions=1))
        h = start(member, topic, log_ms, n=1)
        key = keys(1)[0]
        h.run(member.feed(inp.StartFound(h.now, key, 100)))
        h.tick(0.05)
        failed = member.feed(inp.ChildSaid(h.now, key, ipc.HandlerFailed(120, "ValueError", "")))
        (count,) = [c for c in failed if isinstance(c, cmd.Append)
                    and c.value.startswith(b"RecordFailed")]  # fmt: skip
        held = member.held[key]
        member.keeping.lose(held, "test")  # lost, its count not written yet
        h.run(member.feed(inp.ChildExited(h.now, key, EXIT_HANDLER_FAILED)))
        assert key not in member.held
        member.keeping.hold(key, held.token + 1, h.now + 30, h.now)  # won again: a new token
        member.held[key].position = 120
        h.commands = []
        if given_up == "append_failed":
            h.run(member.feed(inp.AppendFailed(h.now, count.op, "broker down")))
        else:
            h.tick(member.s.op_timeout + 0.1)  # the count's record never read
        again = [c for c in h.commands if isinstance(c, cmd.Append)
                 and c.value.startswith(b"RecordFailed")]  # fmt: skip
        assert again == []

    @pytest.mark.parametrize("action", [Action.RETRY, Action.SKIP])
    def test_an_operators_decision_ends_the_members_wait_to_claim_again(
        self, action: Action
    ) -> None:
        """A member that released a claim after its handler failed `max_handler_failures`
        times does not claim it again for a minute (another member may fare better). Found in
        the poison story of tests/integration: both members had released the claim once, an
        operator's retry-record came, one member tried the record again and released it, and
        then nobody claimed the partition for 55 s. An operator's retry or skip of the claim's
        record is a new start: the member may claim it again at once."""
        topic, log_ms = fresh_topic(partitions=1)
        member = Member(replace(settings(partitions=1), max_handler_failures=1))
        h = start(member, topic, log_ms, n=1)
        key = keys(1)[0]
        h.run(member.feed(inp.StartFound(h.now, key, 100)))
        h.tick(0.05)
        h.run(member.feed(inp.ChildSaid(h.now, key, ipc.HandlerFailed(120, "ValueError", ""))))
        h.run(member.feed(inp.ChildExited(h.now, key, EXIT_HANDLER_FAILED)))
        for _ in range(5):
            h.tick(0.1)
        assert key not in member.held  # released, and not claimed again for a while
        claims_before = len(h.appended(ClaimingPartition))
        for _ in range(20):
            h.tick(0.1)
        assert len(h.appended(ClaimingPartition)) == claims_before
        decision = PoisonResolved(0, "admin-1", "admin", key.group, key.topic, key.partition,
                                  120, action)  # fmt: skip
        topic.append(0, poison_record_key(decision), encode_poison(decision))
        h.read()
        for _ in range(10):
            h.tick(0.1)
        assert len(h.appended(ClaimingPartition)) > claims_before, "not claimed again"
        assert key in member.held


class TestPoisonRateAcrossRestarts:
    """The poison rate is the partition's, not the child's."""

    def poison_stop(self, h: Harness, key: ClaimKey, units: int) -> None:
        """The child dead-letters or skips ``units``, 0.1 s apart, then stops on the rate."""
        for _ in range(units):
            h.now += 0.1
            h.run(h.member.feed(inp.ChildSaid(h.now, key, ipc.Poisoned())))
        failed = ipc.HandlerFailed(100 + units, "Poisoned", "", cause=ipc.CAUSE_POISON_RATE)
        h.run(h.member.feed(inp.ChildSaid(h.now, key, failed)))
        h.run(h.member.feed(inp.ChildExited(h.now, key, EXIT_HANDLER_FAILED)))

    def spawned(self, h: Harness) -> list[ipc.ChildSpec]:
        return [c.spec for c in h.commands if isinstance(c, cmd.Spawn)]

    def test_a_restarted_child_starts_with_the_partitions_last_minute(self) -> None:
        h, key = running_claim()
        assert self.spawned(h)[0].poison_ages == ()
        self.poison_stop(h, key, 5)
        stopped_at = h.now
        for _ in range(30):  # past the restart back-off
            h.tick(0.1)
        _, again = self.spawned(h)
        ages = again.poison_ages
        assert len(ages) == 5
        youngest = min(ages)  # the last unit, as old as the restart back-off made it
        assert 0 < youngest <= h.now - stopped_at
        assert sorted(ages) == pytest.approx([youngest + 0.1 * i for i in range(5)])

    def test_units_older_than_the_window_are_not_passed_on(self) -> None:
        h, key = running_claim()
        self.poison_stop(h, key, 3)
        h.tick(61.0)
        h.tick(0.1)
        assert self.spawned(h)[-1].poison_ages == ()


class TestPositionsAndHealth:
    def test_alo_heartbeats_carry_the_position_published_in_shared_memory(self) -> None:
        """A tick's positions go into the next heartbeat, whatever the batch."""
        topic, log_ms = fresh_topic(partitions=1)
        h = start(Member(settings(partitions=1)), topic, log_ms, n=1)
        key = keys(1)[0]
        h.run(h.member.feed(inp.StartFound(h.now, key, 0)))
        h.tick(0.05)
        h.now += HB
        h.run(h.member.feed(inp.Tick(h.now, 0.0, {key: 321})))
        assert h.appended(Heartbeat)[-1].offset == 321

    def test_a_changed_coordination_partition_count_exits_not_restartable(self) -> None:
        """Discovery sees a new count: exit code 5, which systemd does not restart."""
        topic, log_ms = fresh_topic()
        h = start(Member(settings()), topic, log_ms)
        h.run(h.member.feed(inp.PartitionsFound(h.now, keys(2), 3)))
        assert [c.code for c in h.commands if isinstance(c, cmd.Exit)] == [
            EXIT_COORDINATION_CHANGED
        ]

    def test_holding_nothing_while_work_is_unclaimed_is_unhealthy(self) -> None:
        """A member whose claims keep failing for a few HB reports itself unhealthy."""
        topic, log_ms = fresh_topic(partitions=1)
        member = Member(replace(settings(partitions=1), starving_after_hb=2.0))
        h = start(member, topic, log_ms, n=1)
        h.run(member.feed(inp.StartFailed(h.now, keys(1)[0], "offline")))
        for _ in range(40):
            h.tick(0.1)
            h.run(member.feed(inp.StartFailed(h.now, keys(1)[0], "offline")))
        assert not member.healthy(h.now)


class TestLogOrder:
    def test_claim_won_is_logged_before_its_child_starts(self) -> None:
        """The log says what happened in the order it happened."""
        topic, log_ms = fresh_topic(partitions=1)
        h = start(Member(settings(partitions=1)), topic, log_ms, n=1)
        h.run(h.member.feed(inp.StartFound(h.now, keys(1)[0], 0)))
        h.tick(0.05)
        order = [
            "won" if isinstance(c, cmd.Log) and c.event == "claim_won" else "spawn"
            for c in h.commands
            if (isinstance(c, cmd.Log) and c.event == "claim_won" and c.fields["topic"] == "orders")
            or isinstance(c, cmd.Spawn)
        ]
        assert order == ["won", "spawn"]


class TestDormantObservations:
    def test_observers_are_told_of_each_replacer_once_and_of_none_while_stopping(self) -> None:
        """A replaced member tells its observers (metrics, systemd) which instance replaced
        it, once; if that one stops and another instance of the client id wins the
        announcement while this one waits, the observers are told the new one's name (a
        review: they kept naming the instance that had stopped). Nothing once stopping."""
        topic, log_ms = fresh_topic()
        member = Member(settings())
        h = start(member, topic, log_ms)

        def told() -> list[obs.Observation]:
            out, member.ctx.out = member.ctx.out, []
            return [c.what for c in out if isinstance(c, cmd.Observe)]

        told()
        member.operator.replaced("x", h.now)
        assert obs.Dormant("x") in told()
        member.operator.replaced("x", h.now)
        assert [o for o in told() if isinstance(o, obs.Dormant)] == []
        member.operator.replaced("y", h.now)
        assert [o for o in told() if isinstance(o, obs.Dormant)] == [obs.Dormant("y")]
        assert member.operator.replacer == "y" and member.operator.dormant
        member.request_stop(h.now, fast=False)
        member.operator.replaced("z", h.now)
        assert [o for o in told() if isinstance(o, obs.Dormant)] == []
        assert not member.operator.dormant
