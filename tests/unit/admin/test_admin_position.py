"""set-position and release-group on the in-memory log: the dance, the restore, the refusals."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

import pytest

from marshal_workers.admin import set_position_run
from marshal_workers.admin.connection import Connection
from marshal_workers.admin.group_settings import change_settings
from marshal_workers.admin.pause import lift_pause, pause_for, write_pause
from marshal_workers.admin.session import AdminSession
from marshal_workers.admin.set_position_run import (
    _commit_to_kafka,
    make_plan,
    render_plan,
    run_set_position,
    set_position,
)
from marshal_workers.admin.targets import Kind, TargetSpec
from marshal_workers.common.errors import MarshalError
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.interface import LogError
from marshal_workers.log.memlog import MemoryLog, MemoryTopic
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.metadata import (
    GroupSettings,
    Partitioner,
    encode_metadata,
    metadata_key,
)
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.rationalizer import RationalizerConfig, pause_of, resume_offset
from marshal_workers.protocol.slicing import Ordering, Slicing
from marshal_workers.protocol.wire import (
    Appended,
    ClaimingMessages,
    ClaimingPartition,
    ClaimKey,
    CoordRecord,
    Heartbeat,
    Message,
    ReleasingPartition,
    coordination_partition,
    encode,
    record_key,
)

HB_MS = 10_000  # long: the holders written by a test stay fresh for the whole test
G, T = "g", "orders"
ADMINS = frozenset({"marshal-admin"})


class FailingLog:
    """A memory log whose first append matching ``fails`` is refused (a broker failure)."""

    def __init__(self, log: MemoryLog, fails: Callable[[bytes], bool]) -> None:
        self.log = log
        self.fails = fails
        self.failed = False

    @property
    def num_partitions(self) -> int:
        return self.log.num_partitions

    @property
    def followed(self) -> frozenset[int]:
        return self.log.followed

    def follow(self, partitions: Iterable[int], *, from_start: bool = False) -> None:
        self.log.follow(partitions, from_start=from_start)

    def append(self, partition: int, key: bytes, value: bytes, timeout_s: float) -> Appended:
        if not self.failed and self.fails(value):
            self.failed = True
            raise LogError("append refused (simulated)")
        return self.log.append(partition, key, value, timeout_s)

    def poll(self, timeout_s: float) -> list[CoordRecord]:
        return self.log.poll(timeout_s)

    def current_num_partitions(self, timeout_s: float) -> int:
        return self.log.num_partitions

    def end_offsets(self, timeout_s: float) -> dict[int, int]:
        return self.log.end_offsets(timeout_s)

    def close(self) -> None:
        self.log.close()


class Setup:
    """A coordination topic with a worker "w1" holding orders/0..2, and an admin session."""

    def __init__(self, admins: frozenset[str] | None = ADMINS) -> None:
        self.topic = MemoryTopic(2, lambda: int(time.time() * 1000))
        self.admins = admins
        self.worker(ClaimingPartition, 0)
        self.worker(Heartbeat, 0, 5)
        self.worker(ClaimingMessages, 0, 8)  # AMO: 5..7 reserved, maybe handled
        for p, offset in ((1, 20), (2, 30)):
            self.worker(ClaimingPartition, p)
            self.worker(Heartbeat, p, offset)

    def worker(self, cls: type[Message], partition: int, *last: int) -> None:
        msg = cls(0, "w1-1", "w1", G, T, partition, *last)  # type: ignore[call-arg]
        home = coordination_partition(T, partition, self.topic.num_partitions)
        self.topic.append(home, record_key(msg), encode(msg))

    def release_all(self) -> None:
        """What the supervisor does when it sees the pause: release at its positions."""
        for p, offset in ((0, 8), (1, 20), (2, 30)):
            self.worker(ReleasingPartition, p, offset)

    def session(
        self, client_id: str = "marshal-admin", fails: Callable[[bytes], bool] | None = None
    ) -> AdminSession:
        log: MemoryLog | FailingLog = MemoryLog(self.topic)
        if fails is not None:
            log = FailingLog(log, fails)
        config = RationalizerConfig(HB_MS, log.num_partitions, admin_client_ids=self.admins)
        session = AdminSession(log, FoldedLog(log, config), client_id)  # type: ignore[arg-type]
        session.catch_up(5)
        return session

    def observer(self) -> AdminSession:
        """A fresh reader of the whole log, as a worker starting now would fold it."""
        return self.session("observer")

    def releasing_on_first_wait(self) -> Callable[[str], None]:
        lines: list[str] = []

        def progress(line: str) -> None:
            if line.startswith("waiting for the holders") and not any(
                x.startswith("waiting") for x in lines
            ):
                self.release_all()
            lines.append(line)

        self.lines = lines
        return progress


def key(p: int) -> ClaimKey:
    return ClaimKey(G, T, p)


def admin_heartbeat(n: int) -> Callable[[bytes], bool]:
    """A `FailingLog` rule: the admin's ``n``-th heartbeat fails (a plan's ``n``-th partition's)."""
    heartbeats = 0

    def nth(value: bytes) -> bool:
        nonlocal heartbeats
        if value.startswith(b"Heartbeat/1/") and b"/marshal-admin/" in value:
            heartbeats += 1
        return heartbeats == n

    return nth


class SlicedSetup(Setup):
    """A key-ordered group of 3 slices per partition (its settings in the log): worker "w1"
    holds the slices of orders/0 at positions 4 (then reserved to 7), 9 and 6."""

    SLICES = Slicing(Ordering.KEY, 3)
    POSITIONS = (4, 9, 6)

    def __init__(self) -> None:
        self.topic = MemoryTopic(2, lambda: int(time.time() * 1000))
        self.admins = ADMINS
        settings = GroupSettings(0, "w1-1", "w1", G, HB_MS, Partitioner.SPEC, ADMINS, self.SLICES)
        for home in range(self.topic.num_partitions):
            self.topic.append(home, metadata_key(settings), encode_metadata(settings))
        for name, offset in zip(self.SLICES.claim_topics(T), self.POSITIONS, strict=True):
            self.slice_worker(ClaimingPartition, name)
            self.slice_worker(Heartbeat, name, offset)
        self.slice_worker(ClaimingMessages, self.SLICES.claim_topics(T)[0], 7)

    def slice_worker(self, cls: type[Message], name: str, *last: int) -> None:
        msg = cls(0, "w1-1", "w1", G, name, 0, *last)  # type: ignore[call-arg]
        home = coordination_partition(name, 0, self.topic.num_partitions)
        self.topic.append(home, record_key(msg), encode(msg))

    def release_all(self) -> None:
        for name, offset in zip(self.SLICES.claim_topics(T), (7, 9, 6), strict=True):
            self.slice_worker(ReleasingPartition, name, offset)


class TestSetPosition:
    def test_moves_every_partition_and_lifts_the_pause(self) -> None:
        """Pause, wait for the holder to release, claim/heartbeat/release each partition as the
        admin, lift: every partition is at its target, unheld, and the group not paused."""
        s = Setup()
        admin = s.session()
        plan = make_plan(admin, G, T, {0: 2, 1: 25, 2: 30})
        summary = set_position(
            admin, plan, timeout_s=5, progress=s.releasing_on_first_wait()
        ).summary
        assert summary.endswith("pause lifted")
        assert any(line.startswith("waiting for the holders") for line in s.lines)
        world = s.observer()
        for p, target in {0: 2, 1: 25, 2: 30}.items():
            state = world.state(key(p))
            assert state is not None and state.holder_client is None and state.released
            assert state.committed == target
            assert resume_offset(state, Mode.AMO) == target, "an AMO reservation survived"
        now = world.now_ms()
        assert all(pause_of(w, G, now) is None for w in world.worlds.values())

    def test_a_pause_this_client_held_for_longer_is_kept_not_shortened_or_lifted(self) -> None:
        """The group was paused by this client for longer than the run needs (a stopped move's
        hold of 30 days): set-position moves the partitions under it, writes no pause of its
        own over it, and leaves it in force (a review: its short pause replaced the hold and
        was lifted, and members claimed the positions a stopped move had not carried)."""
        s = Setup()
        admin = s.session()
        held = pause_for(admin, G, 30 * 24 * 3600)
        assert held.accepted
        plan = make_plan(admin, G, T, {0: 2, 1: 25, 2: 30})
        summary = set_position(
            admin, plan, timeout_s=5, progress=s.releasing_on_first_wait()
        ).summary
        assert summary.endswith("pause kept (this client's from before the run)"), summary
        world = s.observer()
        now = world.now_ms()
        for w in world.worlds.values():
            pause = pause_of(w, G, now)
            assert pause is not None and pause.until_ms == held.until_ms
        for p, target in {0: 2, 1: 25, 2: 30}.items():
            state = world.state(key(p))
            assert state is not None and state.committed == target

    def test_a_pause_of_this_client_that_would_lapse_is_the_run_s_to_lift(self) -> None:
        """A pause of this client's shorter than the run needs is extended by the run and
        lifted at its end, as before."""
        s = Setup()
        admin = s.session()
        assert pause_for(admin, G, 3).accepted
        plan = make_plan(admin, G, T, {0: 2})
        summary = set_position(
            admin, plan, timeout_s=5, progress=s.releasing_on_first_wait()
        ).summary
        assert summary.endswith("pause lifted"), summary
        world = s.observer()
        now = world.now_ms()
        assert all(pause_of(w, G, now) is None for w in world.worlds.values())

    def test_a_sliced_group_moves_every_slice_of_the_partition(self) -> None:
        """Key or unordered ordering: each slice of a partition is a claim with its own
        position, so the partition's move is one move per slice, each waited for, claimed and
        set; the partition-wide claim (which such a group never uses) is left alone."""
        s = SlicedSetup()
        admin = s.session()
        plan = make_plan(admin, G, T, {0: 2})
        names = s.SLICES.claim_topics(T)
        # slice 0's reservation at 7 is its position too (rule 4: a reservation commits)
        assert [(m.claim_topic, m.committed, m.reserved) for m in plan.moves] == [
            (names[0], 7, 7), (names[1], 9, None), (names[2], 6, None),
        ]  # fmt: skip
        assert "0 key.1of3" in render_plan(plan)
        summary = set_position(
            admin, plan, timeout_s=5, progress=s.releasing_on_first_wait()
        ).summary
        assert summary.endswith("pause lifted") and "0 key.2of3: 6 -> 2" in summary
        world = s.observer()
        for name in names:
            state = world.state(ClaimKey(G, name, 0))
            assert state is not None and state.holder_client is None and state.released
            assert state.committed == 2 and resume_offset(state, Mode.AMO) == 2, name
        assert world.state(key(0)) is None

    def test_nothing_moves_when_the_holders_do_not_release(self) -> None:
        """A holder that stays fresh: give up after the timeout, lift the pause, move nothing."""
        s = Setup()
        admin = s.session()
        plan = make_plan(admin, G, T, {1: 0})
        with pytest.raises(MarshalError, match=r"still held: 1 by w1; nothing moved; pause lifted"):
            set_position(admin, plan, timeout_s=0.3)
        world = s.observer()
        state = world.state(key(1))
        assert state is not None and (state.holder_client, state.committed) == ("w1", 20)
        assert all(pause_of(w, G, world.now_ms()) is None for w in world.worlds.values())

    def test_a_non_admin_is_refused_and_nothing_changes(self) -> None:
        """The fold refuses the ReleaseGroup of a client not in admin_client_ids."""
        s = Setup()
        intruder = s.session("intruder")
        plan = make_plan(intruder, G, T, {1: 0})
        with pytest.raises(MarshalError, match="refused: intruder is not an admin client"):
            set_position(intruder, plan, timeout_s=1)
        state = s.observer().state(key(1))
        assert state is not None and state.committed == 20

    def test_dry_run_plan_writes_nothing(self) -> None:
        """make_plan only reads the fold; the table shows current -> target per partition."""
        s = Setup()
        ends = s.topic.end_offset(0), s.topic.end_offset(1)
        plan = make_plan(s.session(), G, T, {0: 2, 1: 25})
        assert (s.topic.end_offset(0), s.topic.end_offset(1)) == ends
        assert [(m.partition, m.committed, m.reserved, m.target, m.holder) for m in plan.moves] == [
            (0, 8, 8, 2, "w1"),  # (w1's reservation to 8 committed it: rationalizer rule 4)
            (1, 20, None, 25, "w1"),
        ]
        table = render_plan(plan).splitlines()
        assert table[1].split() == ["PARTITION", "CURRENT", "RESERVED", "TARGET", "STATE", "HOLDER"]
        assert table[2].split() == ["0", "8", "8", "2", "fresh", "w1"]
        assert len(table) == 4, "no target at the end: no footnote"

    def test_a_target_at_the_end_is_marked_in_the_plan(self) -> None:
        """The end is the end as read for the plan: the table marks it and says it is read
        again when set; --json says which targets are ends."""
        plan = make_plan(Setup().session(), G, T, {0: 2, 1: 25}, ends={1})
        table = render_plan(plan).splitlines()
        assert table[3].split()[:4] == ["1", "20", "-", "25*"]
        assert table[-1].startswith("* the end now: read again once the holders have released")
        parts = plan.to_json(dry_run=True)["partitions"]
        assert isinstance(parts, list)
        assert [m["target_is_end"] for m in parts] == [False, True]


def committed(world: AdminSession, partitions: int) -> list[int | None]:
    """The committed offsets of orders/0.. in ``world``'s fold (None: no claim state)."""
    states = [world.state(key(p)) for p in range(partitions)]
    return [state.committed if state else None for state in states]


class GrowingSource:
    """The data topic `orders`, partitions 0..2: ends that grow while the fleet runs (set
    ``ends``), and the first record at or after a time where one is (``found``)."""

    def __init__(self, ends: dict[int, int], found: dict[int, int] | None = None) -> None:
        self.ends = dict(ends)
        self.found = dict(found or {})
        self.closed = False

    def partitions(self, topic: str) -> list[int]:
        return sorted(self.ends)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        return 0, self.ends[partition]

    def offsets_for_time(
        self, topic: str, partitions: Sequence[int], time_ms: int
    ) -> dict[int, int | None]:
        return {p: self.found.get(p) for p in partitions}

    def close(self) -> None:
        self.closed = True


def recording_sink(commits: list[tuple[str, int, int]]) -> type:
    """A `KafkaOffsetSink` stand-in that keeps in ``commits`` what it is asked to commit."""

    class Sink:
        def __init__(self, *_: object) -> None:
            pass

        def commit_now(self, offsets: Sequence[tuple[str, int, int]]) -> None:
            commits.extend(offsets)

        def close(self) -> None:
            pass

    return Sink


def run_live(
    s: Setup,
    source: GrowingSource,
    spec: TargetSpec,
    monkeypatch: pytest.MonkeyPatch,
    meanwhile: Callable[[], None],
) -> tuple[str, list[str], list[tuple[str, int, int]]]:
    """`run_set_position` on ``s``'s log and ``source`` (no broker): ``meanwhile`` runs while
    the command waits for the holders (what they handle before they release). Returns the
    output, the progress lines, and what was committed to Kafka's group offsets."""
    commits: list[tuple[str, int, int]] = []
    lines: list[str] = []

    @contextmanager
    def session(conn: Connection, *_: object) -> Iterator[tuple[AdminSession, Connection]]:
        yield s.session(), conn

    def progress(line: str) -> None:
        if line.startswith("waiting for the holders") and not any(
            x.startswith("waiting") for x in lines
        ):
            meanwhile()
        lines.append(line)

    monkeypatch.setattr(set_position_run, "KafkaOffsetSource", lambda *_: source)
    monkeypatch.setattr(set_position_run, "group_session", session)
    monkeypatch.setattr(set_position_run, "KafkaOffsetSink", recording_sink(commits))
    out = run_set_position(Connection("kafka:9092"), G, T, spec, dry_run=False, as_json=False,
                           client_id="marshal-admin", timeout_s=5, progress=progress)  # fmt: skip
    return out, lines, commits


class TestToTheEnd:
    """--to-latest (and --to-datetime where no record is later) on a live fleet: the end is
    the end when the position is set, not when the plan was made (a review: the holders
    handled on while the command waited for them, and the group was moved back to the end
    read before, so in AMO those records were handled twice)."""

    @staticmethod
    def handle_on(s: Setup, source: GrowingSource) -> Callable[[], None]:
        """w1 handles on while the command waits (AMO: reserves 0 to 14, heartbeats 1 at 26),
        then releases at 14, 26, 30; the ends grow to 15, 27, 34 meanwhile."""

        def meanwhile() -> None:
            s.worker(ClaimingMessages, 0, 14)
            s.worker(Heartbeat, 1, 26)
            for p, offset in ((0, 14), (1, 26), (2, 30)):
                s.worker(ReleasingPartition, p, offset)
            source.ends.update({0: 15, 1: 27, 2: 34})

        return meanwhile

    def test_to_latest_sets_the_end_read_when_each_partition_is_set(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The reviewer's case: the plan read ends 10, 22, 30; w1 released at 14, 26, 30 and
        the ends are 15, 27, 34 by then: those are set, committed to Kafka too, and the
        result line says so; the plan marks its ends as read again once the holders released."""
        s = Setup()
        source = GrowingSource({0: 10, 1: 22, 2: 30})
        out, lines, commits = run_live(s, source, TargetSpec(Kind.LATEST), monkeypatch,
                                       self.handle_on(s, source))  # fmt: skip
        assert committed(s.observer(), 3) == [15, 27, 34]
        assert "moved (0: 14 -> 15, 1: 26 -> 27, 2: 30 -> 34); pause lifted" in out, out
        assert commits == [(T, 0, 15), (T, 1, 27), (T, 2, 34)]
        plan = lines[0].splitlines()
        assert plan[2].split()[:4] == ["0", "8", "8", "10*"], plan
        assert "read again once the holders have released" in plan[-1], plan
        assert source.closed

    def test_to_datetime_reads_the_end_again_and_keeps_a_found_record(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Partition 0 has a record at or after the time (3): a rewind asked for, set as
        planned. Partitions 1 and 2 had none: 1 still has none (the end then, 27), 2 has one
        now (32, the first record at or after the time)."""
        s = Setup()
        source = GrowingSource({0: 10, 1: 22, 2: 30}, found={0: 3})
        handle_on = self.handle_on(s, source)

        def meanwhile() -> None:
            handle_on()
            source.found[2] = 32

        spec = TargetSpec(Kind.DATETIME, time_ms=1)
        out, _, _ = run_live(s, source, spec, monkeypatch, meanwhile)
        assert committed(s.observer(), 3) == [3, 27, 32]
        assert "moved (0: 14 -> 3, 1: 26 -> 27, 2: 30 -> 32)" in out, out

    def test_an_end_is_never_set_below_the_position_then(self) -> None:
        """An end that reads below the position found when the claim is taken (a stale
        read, a truncated topic): the position stays where it is, not moved back."""
        s = Setup()
        admin = s.session()
        plan = make_plan(admin, G, T, {0: 10, 1: 22}, ends={0, 1})
        handle_on = self.handle_on(s, GrowingSource({}))

        def progress(line: str) -> None:
            if line.startswith("waiting for the holders"):
                handle_on()

        moved = set_position(admin, plan, timeout_s=5, end_of=lambda p: 12, progress=progress)
        assert committed(s.observer(), 2) == [14, 26]
        assert moved.summary.endswith("moved (0: 14 -> 14, 1: 26 -> 26); pause lifted")


class TestRestore:
    def test_a_failed_step_restores_the_moved_partitions_and_lifts_the_pause(self) -> None:
        """The heartbeat of partition 2 fails: partitions 0 and 1 (moved) and 2 (claimed) get
        their old positions back, partition 0 its AMO reservation too; the pause is lifted."""
        s = Setup()
        admin = s.session(fails=admin_heartbeat(3))
        plan = make_plan(admin, G, T, {0: 100, 1: 100, 2: 100})
        progress = s.releasing_on_first_wait()
        with pytest.raises(MarshalError) as failure:
            set_position(admin, plan, timeout_s=5, progress=progress)
        message = str(failure.value)
        assert message.startswith("set-position failed at partition 2")
        assert "old offsets restored on partition(s) 0, 1, 2; pause lifted" in message
        assert "\n" not in message
        world = s.observer()
        p0, p1, p2 = (world.state(key(p)) for p in range(3))
        # the old position was 8 (w1's reservation committed it): restored by a heartbeat
        assert p0 is not None and (p0.committed, p0.reserved, p0.holder_client) == (8, None, None)
        assert resume_offset(p0, Mode.AMO) == 8 and resume_offset(p0, Mode.ALO) == 8
        assert p1 is not None and (p1.committed, p1.holder_client) == (20, None)
        assert p2 is not None and (p2.committed, p2.holder_client) == (30, None)
        assert all(pause_of(w, G, world.now_ms()) is None for w in world.worlds.values())
        assert [line for line in s.lines if "restored to" in line] == [
            "partition 0: restored to 8",
            "partition 1: restored to 20",
            "partition 2: restored to 30",
        ]

    def test_a_restore_puts_back_the_position_found_when_claimed_not_the_plan_s(self) -> None:
        """w1 handles on while the command waits and releases 1 at 26 (planned: 20). Partition
        2's heartbeat fails: partition 1 is restored to 26, where w1 left it, not to 20 (which
        would have handled 20 to 25 again in AMO), and the lines say so (a review)."""
        s = Setup()
        admin = s.session(fails=admin_heartbeat(3))
        plan = make_plan(admin, G, T, {0: 100, 1: 100, 2: 100})

        def progress(line: str) -> None:
            if line.startswith("waiting for the holders") and not any(
                "waiting" in x for x in lines
            ):
                s.worker(Heartbeat, 1, 26)
                for p, offset in ((0, 8), (1, 26), (2, 30)):
                    s.worker(ReleasingPartition, p, offset)
            lines.append(line)

        lines: list[str] = []
        with pytest.raises(MarshalError, match="old offsets restored on partition"):
            set_position(admin, plan, timeout_s=5, progress=progress)
        p1 = s.observer().state(key(1))
        assert p1 is not None and (p1.committed, p1.holder_client) == (26, None), p1
        assert "partition 1: 26 -> 100" in lines and "partition 1: restored to 26" in lines

    def test_a_partition_with_no_position_before_is_said_left_not_restored(self) -> None:
        """Partition 3 was never claimed: its heartbeat fails, and with nothing to go back to
        its claim is released at the target. The progress line says so ("left at"), as the
        failure's line does; it said "restored to 50" (a review)."""
        s = Setup()
        admin = s.session(fails=admin_heartbeat(2))
        plan = make_plan(admin, G, T, {0: 100, 3: 50})
        assert [(m.partition, m.old) for m in plan.moves] == [(0, 8), (3, None)]
        progress = s.releasing_on_first_wait()
        with pytest.raises(MarshalError) as failure:
            set_position(admin, plan, timeout_s=5, progress=progress)
        assert "partition 3 had no position before (left at 50)" in str(failure.value)
        said = [line for line in s.lines if line.startswith("partition ") and "->" not in line]
        assert said == ["partition 0: restored to 8", "partition 3: left at 50"]
        p3 = s.observer().state(key(3))
        assert p3 is not None and (p3.committed, p3.holder_client) == (50, None)

    def test_under_a_kept_pause_a_partition_with_no_position_is_said_left_with_none(
        self,
    ) -> None:
        """The same failure while the group is held paused by this client (a stopped move's
        hold): nothing is released, so partition 3's claim goes stale with no position. The
        lines said "left at 50" all the same (a review)."""
        s = Setup()
        admin = s.session(fails=admin_heartbeat(2))
        assert pause_for(admin, G, 30 * 24 * 3600).accepted
        plan = make_plan(admin, G, T, {0: 100, 3: 50})
        progress = s.releasing_on_first_wait()
        with pytest.raises(MarshalError) as failure:
            set_position(admin, plan, timeout_s=5, progress=progress)
        assert "partition 3 had no position before (left with none)" in str(failure.value)
        said = [line for line in s.lines if line.startswith("partition ") and "->" not in line]
        assert said == [
            "partition 0: restored to 8 (its claim goes stale)",
            "partition 3: left with no position (its claim goes stale)",
        ]
        p3 = s.observer().state(key(3))
        assert p3 is not None and (p3.committed, p3.holder_client) == (None, "marshal-admin")

    def test_a_restore_under_a_kept_pause_keeps_the_old_reservation(self) -> None:
        """w1 reserved partition 0 up to 8 and released it at 5; the group is held paused by
        this client (a stopped move's hold). The third heartbeat fails: the restore puts 5 back
        and reserves 8 again, and leaves its claims to go stale rather than releasing them as
        the pausing client (whose release would set 5 outright and drop the reservation: 5 to 7
        handled twice in AMO; a review)."""
        s = Setup()
        s.worker(ReleasingPartition, 0, 5)
        s.worker(ReleasingPartition, 1, 20)
        s.worker(ReleasingPartition, 2, 30)
        admin = s.session(fails=admin_heartbeat(3))
        was = s.observer().state(key(0))
        assert was is not None and (was.committed, resume_offset(was, Mode.AMO)) == (5, 8)
        assert pause_for(admin, G, 30 * 24 * 3600).accepted
        plan = make_plan(admin, G, T, {0: 100, 1: 100, 2: 100})
        lines: list[str] = []
        with pytest.raises(MarshalError) as failure:
            set_position(admin, plan, timeout_s=5, progress=lines.append)
        assert "old offsets restored on partition(s) 0, 1, 2; pause kept" in str(failure.value)
        world = s.observer()
        p0 = world.state(key(0))
        assert p0 is not None and resume_offset(p0, Mode.AMO) == 8, p0
        assert "partition 0: restored to 5 (its claim goes stale)" in lines, lines
        assert all(pause_of(w, G, world.now_ms()) is not None for w in world.worlds.values())

    def test_another_admin_s_pause_refuses_and_is_left_in_force(self) -> None:
        """A stopped move's hold (or any pause) of another admin client id: set-position writes
        nothing (its pause would replace that one, and its lift end it; a review)."""
        s = Setup(admins=frozenset({"marshal-admin", "ops-2"}))
        other = s.session("ops-2")
        held = pause_for(other, G, 30 * 24 * 3600)
        assert held.accepted
        admin = s.session()
        ends = s.topic.end_offset(0), s.topic.end_offset(1)
        plan = make_plan(admin, G, T, {1: 25})
        with pytest.raises(MarshalError, match=r"is paused by ops-2 until .*: nothing moved; run"):
            set_position(admin, plan, timeout_s=5)
        assert (s.topic.end_offset(0), s.topic.end_offset(1)) == ends
        world = s.observer()
        for w in world.worlds.values():
            pause = pause_of(w, G, world.now_ms())
            assert pause is not None and (pause.client_id, pause.until_ms) == (
                "ops-2",
                held.until_ms,
            )

    def test_another_admin_s_pause_on_one_partition_refuses_set_position_and_change(
        self,
    ) -> None:
        """A pause split between clients (this one's long hold on partition 1, ops-2's on
        partition 0, as a release-group that stopped after one partition leaves it): both
        commands refuse, naming ops-2 and the partition, and write nothing (a review: the one
        that ends last was checked only, and the run lifted both pauses)."""
        s = Setup(admins=frozenset({"marshal-admin", "ops-2"}))
        settings = GroupSettings(0, "w1-1", "w1", G, HB_MS, Partitioner.SPEC, s.admins)
        for home in range(s.topic.num_partitions):
            s.topic.append(home, metadata_key(settings), encode_metadata(settings))
        admin = s.session()
        assert pause_for(admin, G, 30 * 24 * 3600).accepted
        other = s.session("ops-2")
        first = sorted(other.worlds)[0]
        paused = other.write(other.release_group(G, int(other.now_ms() / 1000) + 600), first)
        assert isinstance(paused, ev.GroupPaused)
        admin = s.session()
        ends = s.topic.end_offset(0), s.topic.end_offset(1)
        with pytest.raises(MarshalError, match=rf"paused by ops-2 until .* on partition {first}"):
            set_position(admin, make_plan(admin, G, T, {1: 25}), timeout_s=5)
        changed = GroupSettings(1, "a-1", "marshal-admin", G, HB_MS * 2, Partitioner.SPEC,
                                s.admins)  # fmt: skip
        with pytest.raises(MarshalError, match=rf"paused by ops-2 until .* on partition {first}"):
            change_settings(admin, changed, timeout_s=5, progress=lambda _: None)
        assert (s.topic.end_offset(0), s.topic.end_offset(1)) == ends

    def test_a_claim_that_fails_moves_nothing_on_its_partition(self) -> None:
        """The claim on partition 1 is not acknowledged: partition 0 (moved) is restored,
        partition 1 was never written to and keeps its position."""
        s = Setup()
        admin = s.session(fails=lambda v: v.startswith(b"ClaimingPartition/") and v.endswith(b"/1"))
        plan = make_plan(admin, G, T, {0: 100, 1: 100})
        with pytest.raises(MarshalError) as failure:
            set_position(admin, plan, timeout_s=5, progress=s.releasing_on_first_wait())
        message = str(failure.value)
        assert message.startswith("set-position failed at partition 1 (ClaimingPartition on ")
        assert message.endswith("old offsets restored on partition(s) 0; pause lifted")
        world = s.observer()
        p0, p1 = world.state(key(0)), world.state(key(1))
        assert p0 is not None and (p0.committed, p0.reserved) == (8, None)
        assert p1 is not None and (p1.committed, p1.holder_client) == (20, None)


class TestPause:
    def test_pause_goes_to_every_coordination_partition(self) -> None:
        """One ReleaseGroup per coordination partition, each folded as GroupPaused."""
        s = Setup()
        outcome = pause_for(s.session(), G, 30)
        assert outcome.accepted and outcome.in_force
        assert sorted(v.coord_partition for v in outcome.verdicts) == [0, 1]
        assert all(isinstance(v, ev.GroupPaused) for v in outcome.verdicts)
        assert "paused until" in outcome.summary()
        assert lift_pause(s.session(), G).summary() == (
            "pause of group g lifted on all 2 coordination partitions"
        )

    def test_pause_for_corrects_a_skewed_admin_clock(self) -> None:
        """An admin clock 5 minutes behind the broker: the pause is written again on the
        broker's time, so it lasts what was asked."""
        s = Setup()
        admin = s.session()
        admin.wall = lambda: time.time() - 300
        outcome = pause_for(admin, G, 30)
        assert outcome.in_force
        remaining = outcome.until_ms - outcome.log_time
        assert 28_000 <= remaining <= 32_000

    def test_refusal_is_reported_with_the_reason(self) -> None:
        """Not an admin: the verdicts say so and nothing is paused."""
        s = Setup()
        outcome = write_pause(s.session("w1"), G, int(time.time()) + 60)
        assert not outcome.accepted
        assert outcome.summary() == "refused: w1 is not an admin client (pausing group g)"

    def test_anyone_may_pause_without_an_admin_list(self) -> None:
        """admin_client_ids None ('*'): any client's ReleaseGroup counts."""
        s = Setup(admins=None)
        assert pause_for(s.session("w1"), G, 30).in_force


class TestEndsReadFirst:
    """The ends a plan moves to are read once the holders have released, before the first
    claim (a slow broker's answer is not spent out of a step's pause budget), and a read that
    fails moves nothing (a review's cases)."""

    def test_an_end_read_failing_lifts_the_pause_and_moves_nothing(self) -> None:
        s = Setup()
        admin = s.session()
        plan = make_plan(admin, G, T, {0: 10, 1: 22}, ends={1})
        asked: list[int] = []

        def end_of(partition: int) -> int:
            asked.append(partition)
            raise MarshalError(f"cannot read watermarks of {T}[{partition}]: timed out")

        with pytest.raises(MarshalError) as failure:
            set_position(admin, plan, timeout_s=5, end_of=end_of,
                         progress=s.releasing_on_first_wait())  # fmt: skip
        assert "nothing moved; pause lifted" in str(failure.value)
        assert asked == [1]
        world = s.observer()
        assert committed(world, 3) == [8, 20, 30]
        assert all(pause_of(w, G, world.now_ms()) is None for w in world.worlds.values())

    def test_every_end_is_read_before_any_claim_of_the_admin(self) -> None:
        s = Setup()
        admin = s.session()
        plan = make_plan(admin, G, T, {0: 10, 1: 22, 2: 30}, ends={0, 1, 2})
        seen: list[tuple[int, int]] = []

        def end_of(partition: int) -> int:
            mine = [k for w in admin.worlds.values() for k, st in w.claims.items()
                    if st.holder_client == "marshal-admin"]  # fmt: skip
            seen.append((partition, len(mine)))
            return 40 + partition

        set_position(admin, plan, timeout_s=5, end_of=end_of,
                     progress=s.releasing_on_first_wait())  # fmt: skip
        assert seen == [(0, 0), (1, 0), (2, 0)]
        assert committed(s.observer(), 3) == [40, 41, 42]

    def test_kafka_gets_a_partition_s_lowest_slice(self, monkeypatch: pytest.MonkeyPatch) -> None:
        s = SlicedSetup()
        admin = s.session()
        plan = make_plan(admin, G, T, {0: 5}, ends={0})
        moved = set_position(admin, plan, timeout_s=5, end_of=lambda _: 8,
                             progress=s.releasing_on_first_wait())  # fmt: skip
        commits: list[tuple[str, int, int]] = []
        monkeypatch.setattr(set_position_run, "KafkaOffsetSink", recording_sink(commits))
        _commit_to_kafka(Connection("k:9092"), replace(plan, moves=moved.moves), lambda _: None)
        targets = sorted(m.target for m in moved.moves)
        assert targets[0] < targets[-1], targets  # a slice that had handled past the end
        assert commits == [(T, 0, targets[0])], (targets, commits)
