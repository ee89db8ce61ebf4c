"""The runtime `Supervisor` on the in-memory log under faults: members
joining after compaction, one claim's start lookup failing, one slow coordination partition,
and a record folded while an own write waits. Stand-in children over real pipes
(`tests.supervisor_doubles`); the tests judge from the coordination log and the children's
leases and signals, not from the supervisor's internals."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from marshal_workers.common.errors import ConfigError, MarshalError
from marshal_workers.config.runconfig import RunConfig
from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core.heldclaim import Phase
from marshal_workers.core.member import Member
from marshal_workers.fleet.groupcheck import own_settings
from marshal_workers.log.memlog import MemoryLog, MemoryTopic
from marshal_workers.protocol.leases import kill_grace
from marshal_workers.protocol.members import is_live, is_member_key, member_key
from marshal_workers.protocol.metadata import (
    METADATA_PARTITION,
    TOPIC_RECORD_KEY,
    GroupSettings,
    TopicRecord,
    encode_metadata,
    metadata_key,
)
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.placement import home as placement_home
from marshal_workers.protocol.placement import placed
from marshal_workers.protocol.rationalizer import ClaimState, RationalizerConfig, World, fold
from marshal_workers.protocol.wire import (
    Appended,
    ClaimingPartition,
    ClaimKey,
    CoordRecord,
    Heartbeat,
    Message,
    PartitionMessage,
    coordination_partition,
    encode,
    record_key,
)
from marshal_workers.supervisor.metrics import Metrics
from marshal_workers.supervisor.observe import Observer
from marshal_workers.supervisor.runtime import Supervisor
from tests.supervisor_doubles import MP, FakeChild, FakeTopics, initialised, patch_children
from tests.support import message_of
from tests.unit.core.test_member_core import fresh_topic, start, write
from tests.unit.core.test_member_core import keys as core_keys
from tests.unit.core.test_member_core import settings as core_settings

HB = 0.5
COORDINATION_PARTITIONS = 2


def wall_ms() -> int:
    return int(time.time() * 1000)


def home(partition: int) -> int:
    """The coordination partition of ``orders``/``partition``."""
    return coordination_partition("orders", partition, COORDINATION_PARTITIONS)


def supervisor(
    config: RunConfig, log: MemoryLog, topics: FakeTopics, observer: Observer | None = None
) -> Supervisor:
    """A runtime supervisor on ``log`` with stand-in data topics."""
    return Supervisor(config, log, topics, MP, observer or Observer())  # type: ignore[arg-type]


class Rig:
    """Supervisors on one memory topic, their stand-in children, and the log folded anew."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, partitions: int) -> None:
        self.topic = initialised(MemoryTopic(COORDINATION_PARTITIONS, wall_ms))
        self.partitions = partitions
        self.children: list[FakeChild] = []
        self.running: list[Supervisor] = []
        self.stopped_children = 0
        patch_children(monkeypatch, self.children)

    def start(
        self,
        client_id: str,
        log: MemoryLog | None = None,
        topics: FakeTopics | None = None,
        mode: Mode = Mode.ALO,
        observer: Observer | None = None,
    ) -> Supervisor:
        config = RunConfig(
            handler="marshal_workers.plugins.ledger:handle",
            mode=mode,
            topics=("orders",),
            group="g",
            client_id=client_id,
            heartbeat_interval=HB,
            stop_timeout=5.0,
        )
        sup = supervisor(
            config, log or MemoryLog(self.topic), topics or FakeTopics(self.partitions), observer
        )
        sup.start(catch_up_timeout=5)
        self.running.append(sup)
        return sup

    def crash(self, sup: Supervisor) -> None:
        """The supervisor dies (kill -9): its children die, nothing more is written."""
        sup.kill_all()
        self.running.remove(sup)

    def step(self) -> None:
        for sup in self.running:
            sup.step([], wait_s=0.005)
        for child in self.children:  # graceful hand-overs: a stopped child reports 0
            child.answer_stop(0)

    def run_until(self, check: Callable[[], bool], what: str, timeout: float) -> float:
        start = time.monotonic()
        while not check():
            assert time.monotonic() - start < timeout, f"timed out waiting for {what}"
            self.step()
        return time.monotonic() - start

    def run_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.step()

    def records(self, partition: int) -> list[CoordRecord]:
        return self.topic.read(partition, 0)

    def claims(self) -> dict[ClaimKey, ClaimState]:
        """Every claim, folded from the log as a new reader would."""
        out: dict[ClaimKey, ClaimState] = {}
        for p in range(COORDINATION_PARTITIONS):
            world = World(RationalizerConfig(int(HB * 1000), COORDINATION_PARTITIONS), p)
            for r in self.records(p):
                fold(world, r)
            out.update(world.claims)
        return out

    def holders(self) -> Counter[str]:
        """How many data partitions each client holds with a live claim, per the log."""
        now = wall_ms()
        return Counter(
            state.holder_client
            for key, state in self.claims().items()
            if not is_member_key(key)
            and state.holder_client is not None
            and is_live(state, now, int(HB * 1000))
        )

    def live_children(self, partition: int | None = None) -> list[FakeChild]:
        return [
            c
            for c in self.children
            if c.exitcode is None and (partition is None or c.spec.partition == partition)
        ]

    def close(self) -> None:
        for sup in self.running:
            sup.kill_all()


@pytest.fixture
def rig(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], Rig]]:
    made: list[Rig] = []

    def make(partitions: int) -> Rig:
        made.append(Rig(monkeypatch, partitions))
        return made[-1]

    yield make
    for r in made:
        r.close()


class TestJoiningAfterCompaction:
    def test_a_restarted_and_a_new_member_get_their_share_within_3_hb(
        self, rig: Callable[[int], Rig]
    ) -> None:
        """Six partitions: w1 and w2 hold 3+3; w2 dies; the log is compacted (every claim's
        history is gone, so every claim is uncertain to a new reader); a restarted w2 and a
        new w3 start, and the fleet holds 2/2/2 within 3*HB plus claim latency."""
        r = rig(6)
        r.start("w1")
        w2 = r.start("w2")
        r.run_until(lambda: sorted(r.holders().values()) == [3, 3], "a 3/3 split", 10)
        # a heartbeat round, so the cleaner has superseded records to remove (members started
        # together claim 3/3 at once and release nothing: before, the first one's releases did)
        r.run_for(HB)
        r.crash(w2)
        removed = r.topic.compact(wall_ms() + 1)
        assert removed > 0, "nothing was compacted"
        began = time.monotonic()
        r.start("w2")
        r.start("w3")
        r.run_until(lambda: r.holders() == {"w1": 2, "w2": 2, "w3": 2}, "a 2/2/2 split", 8 * HB + 5)
        took = time.monotonic() - began  # from their start (catching up included)
        print(f"\njoin after compaction (memory log, HB={HB}s): {took:.2f}s = {took / HB:.1f} HB")
        # Stale 2*HB after w2's last heartbeat, plus claim latency (one round trip in memory,
        # a planning round every HB/10, w1's release of its third partition, and turns of
        # three supervisors on a busy host).
        assert took <= 3 * HB + 1.0, f"joined after {took:.2f}s, more than 3*HB + 1 s"


class FlakyTopics(FakeTopics):
    """Data topics whose start lookup (watermarks) fails for some partitions."""

    def __init__(self, partitions: int, failing: set[int]) -> None:
        super().__init__(partitions)
        self.failing = failing
        self.calls: list[tuple[int, float]] = []

    def watermarks(self, topic: str, partition: int, timeout_s: float = 10.0) -> tuple[int, int]:
        self.calls.append((partition, time.monotonic()))
        if partition in self.failing:
            raise MarshalError(f"{topic}[{partition}]: leader not available")
        return 0, 0


class TestStartLookupFails:
    def test_one_failing_partition_is_let_go_and_retried_while_the_others_run(
        self, rig: Callable[[int], Rig]
    ) -> None:
        """watermarks() fails for partition 1: the supervisor goes on, partitions 0, 2, 3 run
        untouched, partition 1 is let go and tried again at least 2*HB later; once the lookup
        works it runs too."""
        r = rig(4)
        topics = FlakyTopics(4, failing={1})
        sup = r.start("w1", topics=topics)

        def failed_twice() -> bool:
            return sum(1 for p, _ in topics.calls if p == 1) >= 2

        r.run_until(failed_twice, "two start lookups of partition 1", 10 * HB + 5)
        r.run_until(lambda: all(r.live_children(p) for p in (0, 2, 3)), "children on 0, 2, 3", 5)
        attempts = [t for p, t in topics.calls if p == 1]
        assert attempts[1] - attempts[0] >= 2 * HB, "retried without back-off"
        assert not r.live_children(1)
        topics.failing.clear()
        r.run_until(lambda: bool(r.live_children(1)), "a child on partition 1", 10 * HB + 5)
        assert not sup.done
        others = [c for c in r.children if c.spec.partition != 1]
        assert all(c.signals == [] for c in others), "other claims were disturbed"
        assert len(others) == 3, "other claims' children were restarted"


class SlowLog(MemoryLog):
    """A memory log whose appends to one partition are acknowledged (and land) ``delay`` late:
    a slow partition leader. Blocking appends wait; submitted ones are queued."""

    def __init__(self, topic: MemoryTopic, slow_partition: int, delay: float) -> None:
        super().__init__(topic)
        self.slow_partition = slow_partition
        self.delay = delay
        self.enabled = False
        self._queue: list[tuple[float, int, int, bytes, bytes]] = []

    def _slow(self, partition: int) -> bool:
        return self.enabled and partition == self.slow_partition

    def append(self, partition: int, key: bytes, value: bytes, timeout_s: float) -> Appended:
        if self._slow(partition):
            time.sleep(self.delay)
        return super().append(partition, key, value, timeout_s)

    def submit(self, op: int, partition: int, key: bytes, value: bytes) -> None:
        if self._slow(partition):
            self._queue.append((time.monotonic() + self.delay, op, partition, key, value))
        else:
            super().submit(op, partition, key, value)

    def acks(self) -> list[tuple[int, Appended | str]]:
        now = time.monotonic()
        due = [q for q in self._queue if q[0] <= now]
        self._queue = [q for q in self._queue if q[0] > now]
        for _, op, partition, key, value in due:
            super().submit(op, partition, key, value)
        return super().acks()


class TestSlowCoordinationPartition:
    def test_heartbeats_on_the_other_partition_keep_their_leases(
        self, rig: Callable[[int], Rig]
    ) -> None:
        """Appends to one coordination partition take 0.6*HB: the claims homed on the other
        partition keep leases more than kill_grace from their end, sampled every 5 ms over
        6*HB, and their children get no signal."""
        homes = Counter(home(p) for p in range(6))
        slow = max(homes, key=lambda h: homes[h])
        assert 0 < homes[slow] < 6, "need claims on both coordination partitions"
        r = rig(6)
        log = SlowLog(r.topic, slow, 0.6 * HB)
        r.start("w1", log=log)
        r.run_until(lambda: len(r.live_children()) == 6, "six children", 10)
        fast = [c for c in r.live_children() if home(c.spec.partition) != slow]
        lowest = {c.spec.partition: float("inf") for c in fast}
        sampling = threading.Event()
        sampling.set()

        def sample() -> None:
            while sampling.is_set():
                now = time.monotonic()
                for c in fast:
                    lowest[c.spec.partition] = min(lowest[c.spec.partition], c.lease.deadline - now)
                time.sleep(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        log.enabled = True
        sampler.start()
        try:
            r.run_for(6 * HB)
        finally:
            sampling.clear()
            sampler.join(5)
        figures = ", ".join(f"{p}: {v:.3f}s" for p, v in sorted(lowest.items()))
        print(f"\nlowest lease remaining per fast claim (HB={HB}s, slow +{log.delay}s): {figures}")
        assert all(c.signals == [] for c in fast), "a child on the fast partition was signalled"
        assert min(lowest.values()) > kill_grace(HB), f"a lease came near its end: {figures}"


class LaggingLog(MemoryLog):
    """A memory log whose reader sees one partition's records ``lag`` late (a lagging fetch);
    once armed, it writes a record into the log during the first read made while one of this
    client's own claims on that partition waits for its verdict (is still unread)."""

    def __init__(self, topic: MemoryTopic, lagging: int, lag: float) -> None:
        super().__init__(topic)
        self.lagging = lagging
        self.lag_ms = int(lag * 1000)
        self.enabled = False
        self.inject: Callable[[], Appended] | None = None
        self.injected: Appended | None = None
        self._unread: set[int] = set()  # own claims on the lagging partition, by offset

    def _note(self, appended: Appended, value: bytes) -> Appended:
        if not (self.enabled and appended.partition == self.lagging):
            return appended
        if isinstance(message_of(value), ClaimingPartition):
            self._unread.add(appended.offset)
        return appended

    def append(self, partition: int, key: bytes, value: bytes, timeout_s: float) -> Appended:
        return self._note(super().append(partition, key, value, timeout_s), value)

    def submit(self, op: int, partition: int, key: bytes, value: bytes) -> None:
        super().submit(op, partition, key, value)
        outcome = self._acks[-1][1]
        if isinstance(outcome, Appended):
            self._note(outcome, value)

    def _take(self) -> list[CoordRecord]:
        if self.inject is not None and self._unread:
            self.injected, self.inject = self.inject(), None
        batch: list[CoordRecord] = []
        for p in range(self.num_partitions):
            records = self._topic.read(p, self._cursor[p])
            if self.enabled and p == self.lagging:
                horizon = wall_ms() - self.lag_ms
                ready = []
                for rec in records:  # in offset order, stopping at the first too new
                    if rec.timestamp_ms > horizon:
                        break
                    ready.append(rec)
                records = ready
            if records:
                self._cursor[p] = records[-1].offset + 1
                if p == self.lagging:
                    self._unread -= {r.offset for r in records}
                batch.extend(records)
        return batch


class TestNoFoldedEventDropped:
    def test_a_takeover_folded_while_an_own_claim_waits_is_acted_on(
        self, rig: Callable[[int], Rig]
    ) -> None:
        """Coordination partition L is read 3*HB late. A dead rival's claim there goes stale
        and w1 claims it; while that claim waits for its verdict, another instance of w1 takes
        over a claim homed on the other partition. The member kills that claim's child and never
        writes on the claim after the takeover (a heartbeat or a release would show that it
        still believes it holds it: the takeover's event was dropped)."""
        lagging = home(0)
        victim = next((p for p in range(4) if home(p) != lagging), None)
        assert victim is not None, "need claims on both coordination partitions"
        r = rig(4)
        last_beat = [0.0]

        def rival_alive() -> None:
            """w9 holds partition 0 (homed on L) while the test keeps it alive."""
            if time.monotonic() - last_beat[0] > HB / 4:
                last_beat[0] = time.monotonic()
                unix = int(time.time())
                message: Message = Heartbeat(unix, "dead", "w9", "g", "orders", 0, 0)
                if not r.claims():
                    message = ClaimingPartition(unix, "dead", "w9", "g", "orders", 0)
                r.topic.append(lagging, record_key(message), encode(message))

        rival_alive()
        log = LaggingLog(r.topic, lagging, 3 * HB)
        sup = r.start("w1", log=log)

        def three_running() -> bool:
            rival_alive()
            return len(r.live_children()) == 3

        r.run_until(three_running, "children on 1, 2, 3", 10)
        rival_alive()  # its last heartbeat: stale 2*HB from now, then w1 claims it
        log.enabled = True
        child = r.live_children(victim)[0]
        instance = child.spec.instance_id
        key = ClaimKey("g", "orders", victim)

        def takeover() -> Appended:
            state = r.claims()[key]
            beat = Heartbeat(
                int(time.time()),
                "other-instance",
                "w1",
                "g",
                "orders",
                victim,
                state.committed or 0,
            )
            return r.topic.append(home(victim), record_key(beat), encode(beat))

        log.inject = takeover
        r.run_until(lambda: log.injected is not None, "w1 to claim partition 0", 5 * HB + 5)
        r.run_for(4 * HB)
        assert log.injected is not None
        later = []  # own writes on the claim after the takeover, until it claims anew
        for rec in r.records(home(victim)):
            m = message_of(rec.value)
            if rec.offset <= log.injected.offset or not isinstance(m, PartitionMessage):
                continue
            if (m.topic, m.partition, m.instance_id) != ("orders", victim, instance):
                continue
            if isinstance(m, ClaimingPartition):
                break  # the claim went stale (nobody heartbeats it): winning it again is fine
            later.append((rec.offset, m))
        assert signal.SIGKILL in child.signals, "the taken-over claim's child was not killed"
        assert later == [], f"wrote to a claim it had lost (the takeover went unseen): {later}"
        assert not sup.done


class TestCoreActsOnEveryFoldedRecord:
    def test_a_takeover_read_while_heartbeats_wait_is_acted_on_at_once(self) -> None:
        """The core alone: heartbeats of both claims are written but neither acknowledged nor
        read when another instance's takeover of orders/0 is read. The same input revokes
        orders/0's lease and kills its child; the waiting heartbeat of orders/1 still extends
        its lease once it lands."""
        topic, log_ms = fresh_topic()
        h = start(Member(core_settings()), topic, log_ms, n=2)
        lost, kept = core_keys(2)
        for key in (lost, kept):
            h.run(h.member.feed(inp.StartFound(h.now, key, 0)))
        h.tick(0.05)
        assert {c.key for c in h.commands if isinstance(c, cmd.Spawn)} == {lost, kept}
        h.now += 0.6
        log_ms[0] += 600
        waiting = [c for c in h.member.feed(inp.Tick(h.now, 0.0)) if isinstance(c, cmd.Append)]
        assert {(c.message.topic, c.message.partition) for c in waiting} >= {
            ("orders", 0),
            ("orders", 1),
        }
        write(topic, Heartbeat(0, "i2", "c1", "g", "orders", 0, 0))  # another instance of c1
        reacted = h.member.feed(inp.RecordsRead(h.now, topic.read(home(0), h.cursor[home(0)])))
        assert cmd.SetLease(lost, 0.0) in reacted
        assert any(
            isinstance(c, cmd.SignalChild) and c.key == lost and c.signal is signal.SIGKILL
            for c in reacted
        )
        before = h.member.held[kept].lease
        h.cursor[home(0)] = topic.end_offset(home(0))
        h.now += 0.01
        h.run(list[cmd.Command](waiting))  # the waiting appends land now, acknowledged, read
        assert h.member.held[kept].lease > before
        assert h.member.held[kept].phase is Phase.RUNNING


class TestCompactedMemberClaim:
    def test_a_restarted_member_waits_for_silence_then_wins_its_member_claim_at_once(
        self,
    ) -> None:
        """After compaction a restarted member's own member claim is uncertain: it claims it
        once, after 2*HB of silence, and wins (a claim before that is refused, counts as
        activity, and costs a back-off of more than 2*HB)."""
        topic, log_ms = fresh_topic(partitions=1)
        old = start(Member(core_settings(partitions=1)), topic, log_ms, n=1)
        for _ in range(4):
            old.tick(0.25)  # member heartbeats every HB/2; then old dies
        topic.compact(log_ms[0] + 1)
        new = start(Member(core_settings(instance="i2", partitions=1)), topic, log_ms, n=1)
        mine = member_key("g", "c1")

        def member_claims() -> list[Message]:
            return [m for m in new.appended(ClaimingPartition) if m.topic == mine.topic]

        for _ in range(30):
            if mine in new.member.held:
                break
            new.tick(0.1)
        assert mine in new.member.held, "the member claim was not won within 3*HB"
        assert len(member_claims()) == 1, "the member claim was refused first"


class UnreadableLog(MemoryLog):
    """A memory log whose partitions end past records it never delivers (a broker gone after
    the log opened)."""

    def end_offsets(self, timeout_s: float) -> dict[int, int]:
        return {p: 1_000 for p in self.followed}

    def poll(self, timeout_s: float) -> list[CoordRecord]:
        time.sleep(min(timeout_s, 0.01))
        return []


class TestStartUpLogFailure:
    def test_a_log_that_cannot_be_read_at_start_is_one_line_and_exit_1(
        self, rig: Callable[[int], Rig]
    ) -> None:
        """Locating the group on a log that cannot be read to its end: a MarshalError (one
        line, exit 1), not the log's own exception (once a traceback), and nothing claimed."""
        r = rig(2)
        config = RunConfig(handler="marshal_workers.plugins.ledger:handle", mode=Mode.ALO,
                           topics=("orders",), group="g", client_id="w1",
                           heartbeat_interval=HB)  # fmt: skip
        sup = supervisor(config, UnreadableLog(r.topic), FakeTopics(2))
        with pytest.raises(MarshalError) as caught:
            sup.start(catch_up_timeout=0.3)
        assert caught.value.exit_code == 1
        assert "\n" not in str(caught.value) and "coordination" in str(caught.value)
        assert r.children == []


class UpgradedWhileStarting(MemoryLog):
    """A memory log on which `marshal-admin init --enable-placement` runs (a version-2 topic
    record on partition 0) just before the member's first settings record is appended."""

    def append(self, partition: int, key: bytes, value: bytes, timeout_s: float) -> Appended:
        if b"//settings" in key and not self.upgraded:
            self.upgraded = True
            pin = TopicRecord(0, "init-test", "marshal-admin", self.num_partitions, placed=True)
            self._topic.append(METADATA_PARTITION, TOPIC_RECORD_KEY, encode_metadata(pin))
            if self.rival is not None:  # a member started since placed the group first
                at = placement_home(self.rival.group_id, self.num_partitions)
                self._topic.append(at, metadata_key(self.rival), encode_metadata(self.rival))
        return super().append(partition, key, value, timeout_s)

    upgraded = False
    rival: GroupSettings | None = None


class TestUpgradeWhileANewGroupStarts:
    def test_a_new_group_located_spread_before_the_upgrade_claims_nothing(
        self, rig: Callable[[int], Rig]
    ) -> None:
        """The member locates a new group spread on a version-1 topic; the topic is upgraded
        before its settings are recorded. A member started after the upgrade may have found
        nothing of the group and placed it (its record on home replaces these spread
        settings), so this one stops before claiming: exit 1, restarted, it locates again."""
        r = rig(2)
        log = UpgradedWhileStarting(r.topic)
        with pytest.raises(MarshalError) as caught:
            r.start("w1", log=log)
        assert log.upgraded
        assert caught.value.exit_code == 1 and "enable-placement" in str(caught.value)
        assert r.children == []
        claims = [
            rec
            for p in range(COORDINATION_PARTITIONS)
            for rec in r.topic.read(p, 0)
            if isinstance(message_of(rec.value), ClaimingPartition)
        ]
        assert claims == []

    def test_placed_by_a_member_started_since_it_is_exit_1_not_2(
        self, rig: Callable[[int], Rig]
    ) -> None:
        """The same, with the placed settings of a member started after the upgrade on home
        before this member's spread ones (refused there): exit 1, so that it is started again
        and joins the placed group, not exit 2 (settings differ), which is not restarted."""
        r = rig(2)
        log = UpgradedWhileStarting(r.topic)
        config = RunConfig(handler="m:h", mode=Mode.ALO, topics=("orders",), group="g",
                           client_id="w0", heartbeat_interval=HB)  # fmt: skip
        log.rival = replace(own_settings(config), placement=placed("g", COORDINATION_PARTITIONS, 1))
        with pytest.raises(MarshalError) as caught:
            r.start("w1", log=log)
        assert caught.value.exit_code == 1 and "enable-placement" in str(caught.value)
        assert r.children == []

    def test_a_new_group_located_spread_after_nothing_changed_runs(
        self, rig: Callable[[int], Rig]
    ) -> None:
        """The same start on a topic that stays version 1: it claims (the check refuses the
        upgrade only)."""
        r = rig(2)
        r.start("w1")
        r.run_until(lambda: len(r.live_children()) == 2, "two children", 10)


class TestTheGroupsMode:
    """A group's mode is one of its settings: recorded by its first member, a member of the
    other mode refused (an ALO member would resume after runs an AMO one reserved and never
    handled), and recorded again by a member that finds settings without one."""

    def settings(self, r: Rig) -> list[GroupSettings]:
        out = []
        for p in range(COORDINATION_PARTITIONS):
            world = World(RationalizerConfig(int(HB * 1000), COORDINATION_PARTITIONS), p)
            for rec in r.records(p):
                fold(world, rec)
            out.append(world.group_settings["g"])
        return out

    def test_a_member_of_the_other_mode_is_refused(self, rig: Callable[[int], Rig]) -> None:
        """ALO first: its settings carry the mode on every partition; an AMO member is refused
        at start (exit 2, the setting and both values) and writes no claim."""
        r = rig(2)
        r.start("w1")
        assert [s.mode for s in self.settings(r)] == [Mode.ALO] * COORDINATION_PARTITIONS
        before = sum(len(r.records(p)) for p in range(COORDINATION_PARTITIONS))
        with pytest.raises(ConfigError) as caught:
            r.start("w2", mode=Mode.AMO)
        assert caught.value.exit_code == 2
        assert "mode is amo here but alo in group g's settings" in str(caught.value)
        assert sum(len(r.records(p)) for p in range(COORDINATION_PARTITIONS)) == before

    def test_settings_without_a_mode_are_recorded_again_with_it(
        self, rig: Callable[[int], Rig]
    ) -> None:
        """A group whose settings a member from before modes recorded: the first member of this
        version records them again with its mode, and then an AMO member is refused."""
        r = rig(2)
        config = RunConfig(handler="m:h", mode=Mode.ALO, topics=("orders",), group="g",
                           client_id="old", heartbeat_interval=HB)  # fmt: skip
        old = replace(own_settings(config), mode=None)
        assert encode_metadata(old).count(b"/") == 8  # the record a member from before wrote
        for p in range(COORDINATION_PARTITIONS):
            r.topic.append(p, metadata_key(old), encode_metadata(old))
        assert [s.mode for s in self.settings(r)] == [None] * COORDINATION_PARTITIONS
        r.start("w1")
        assert [s.mode for s in self.settings(r)] == [Mode.ALO] * COORDINATION_PARTITIONS
        with pytest.raises(ConfigError, match="mode is amo here but alo"):
            r.start("w2", mode=Mode.AMO)

    def test_a_running_member_stops_when_the_mode_recorded_changes(
        self, rig: Callable[[int], Rig]
    ) -> None:
        """An operator's change of the mode (group-settings --change --mode): the running
        member of the old mode stops and exits 2, saying why."""
        r = rig(2)
        sup = r.start("w1")
        r.run_until(lambda: len(r.live_children()) == 2, "two children", 10)
        new = replace(self.settings(r)[0], mode=Mode.AMO, client_id="marshal-admin")
        for p in range(COORDINATION_PARTITIONS):
            r.topic.append(p, metadata_key(new), encode_metadata(new))
        r.run_until(lambda: sup.member.done, "the member to stop", 20)
        assert sup.member.exit_code == 2
        assert "mode is alo here but amo" in (sup.member.exit_reason or "")


class TestReplacedByAnotherInstance:
    def test_the_replaced_instance_goes_dormant_and_resumes_once_the_new_one_stops(
        self, rig: Callable[[int], Rig]
    ) -> None:
        """A second instance of the client id starts (another host given the same --client-id,
        or this one restarted elsewhere while it was frozen): it takes the claims over, and the
        old instance must then stop handling rather than run on beside it (a review found it
        running on). It goes dormant, holding and claiming nothing while the new one holds the
        announcement, and does not exit: once the new instance stops, it claims again."""
        r = rig(2)
        old = r.start("w1")
        r.run_until(lambda: len(r.live_children()) == 2, "two children", 10)
        new = r.start("w1")
        assert new.settings.instance_id != old.settings.instance_id
        r.run_until(lambda: old.member.operator.dormant, "the replaced instance dormant", 20)
        assert old.member.operator.replacer == new.settings.instance_id
        r.run_until(lambda: r.holders() == Counter({"w1": 2}), "the new instance holding", 20)
        r.run_for(4 * HB)
        assert old.member.held == {} and old.member.operator.dormant and not old.member.done
        holders = {s.holder_instance for s in r.claims().values() if s.holder_instance}
        assert holders == {new.settings.instance_id}
        new.request_stop(fast=False)
        r.run_until(lambda: new.member.done, "the new instance to stop", 20)
        assert new.member.exit_code == 0
        r.running.remove(new)
        r.run_until(lambda: not old.member.operator.dormant, "the old instance to resume", 20)
        r.run_until(lambda: r.holders() == Counter({"w1": 2}), "the old instance holding", 20)
        holders = {s.holder_instance for k, s in r.claims().items() if s.holder_instance}
        assert holders == {old.settings.instance_id}

    def test_a_forged_takeover_costs_the_member_its_claims_for_a_while_not_for_good(
        self, rig: Callable[[int], Rig]
    ) -> None:
        """The log authenticates no writer: anyone with Write on the coordination topic can
        append a heartbeat of a member's announcement under its client id and an instance id
        nobody runs, which the fold takes as a takeover. The member goes dormant, and claims
        again once the forged instance has been silent past 2*HB (before dormancy, one such
        record stopped it for good: exit 2, which systemd does not restart). Its metrics say
        so while it lasts: dormant, not ready, healthy."""
        r = rig(2)
        metrics = Metrics("g", "w1", HB)
        sup = r.start("w1", observer=metrics)
        r.run_until(lambda: len(r.live_children()) == 2, "two children", 10)
        assert metrics.readiness() == (True, "ready") and not metrics.is_dormant
        key = member_key("g", "w1")
        forged = Heartbeat(0, "forged", "w1", "g", key.topic, 0, 0)
        r.topic.append(sup.member.ctx.home(key), record_key(forged), encode(forged))
        r.run_until(lambda: sup.member.operator.dormant, "the member dormant", 10)
        assert metrics.is_dormant and metrics.replacer == "forged"
        assert not metrics.readiness()[0] and metrics.health()[0]
        took = r.run_until(
            lambda: not sup.member.operator.dormant, "the member to resume", 10 * HB + 10
        )
        assert took >= 2 * HB, "it resumed while the forged instance's claim was fresh"
        assert not metrics.is_dormant and metrics.readiness() == (True, "ready")
        r.run_until(lambda: r.holders() == Counter({"w1": 2}), "the member holding again", 20)
        assert not sup.member.done
        assert r.claims()[key].holder_instance == sup.settings.instance_id

    def test_a_late_heartbeat_of_the_instance_it_replaced_leaves_one_instance_running(
        self, rig: Callable[[int], Rig]
    ) -> None:
        """The old instance's host was suspended past 2*HB; the client restarted elsewhere won
        the member claim by its silence. The old host wakes and its producer delivers a
        heartbeat it held through the suspend: the fold takes it as a takeover of the new
        instance's claim. Only the old instance goes dormant (on the new one's grant); the new
        one runs on and claims again (a review: both stopped, and the client id was gone)."""
        r = rig(2)
        old = r.start("w1")
        r.run_until(lambda: len(r.live_children()) == 2, "two children", 10)
        r.running.remove(old)  # suspended: it does nothing, its children end with their leases
        time.sleep(3 * HB)
        new = r.start("w1")
        key = member_key("g", "w1")
        r.run_until(lambda: key in new.member.held, "the new instance holding its claim", 20)
        beat = Heartbeat(0, old.settings.instance_id, "w1", "g", key.topic, 0, 0)
        r.topic.append(new.member.ctx.home(key), record_key(beat), encode(beat))
        r.running.append(old)  # it wakes
        r.run_until(lambda: old.member.operator.dormant, "the old instance dormant", 20)
        r.run_for(4 * HB)
        assert not new.member.done and not new.member.operator.dormant
        r.run_until(
            lambda: r.claims()[key].holder_instance == new.settings.instance_id,
            "the new instance holding its member claim again",
            20,
        )
        r.run_for(4 * HB)
        assert old.member.operator.dormant and old.member.held == {}
