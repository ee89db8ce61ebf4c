"""Moving a spread group to a placed layout (`group-settings --move`), on the in-memory log.

A group spread over every coordination partition keeps that layout until an operator moves
it. The move pauses the group, waits for its holders, records placed settings (a token base
above every old token) on every partition of either layout and the group's home, carries each
data claim's position to its new home, waits for the old members, and lifts the pause. A
parked record refuses it with nothing changed; a running member on the old layout stops and
exits 6 (restartable: started again, it locates the new placement).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from marshal_workers.admin.connection import recorded_settings
from marshal_workers.admin.group_move import MOVE_HOLD_S, move_group
from marshal_workers.admin.group_settings import change_settings
from marshal_workers.admin.move_carries import carry_all
from marshal_workers.admin.moveplan import (
    Carry,
    carries,
    moved_token_base,
    new_placement,
    plan_move,
    refusals,
    written_on,
)
from marshal_workers.admin.pause import pause_for
from marshal_workers.admin.session import AdminSession
from marshal_workers.admin.set_position_run import make_plan, set_position
from marshal_workers.common.errors import (
    EXIT_PLACEMENT_MOVED,
    EXIT_RUNTIME,
    EXIT_USAGE,
    ConfigError,
    MarshalError,
)
from marshal_workers.config.runconfig import RunConfig
from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core.member import Member
from marshal_workers.fleet.groupcheck import ensure_group_settings, own_settings
from marshal_workers.log.foldedlog import FoldedLog
from marshal_workers.log.memlog import MemoryLog, MemoryTopic
from marshal_workers.protocol import events as ev
from marshal_workers.protocol.members import member_key
from marshal_workers.protocol.metadata import TopicRecord, encode_metadata, metadata_key
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.placement import Placement, PlacementBook, home, reads, spread
from marshal_workers.protocol.rationalizer import (
    ClaimState,
    RationalizerConfig,
    World,
    pause_of,
    resume_offset,
)
from marshal_workers.protocol.recordfailures import (
    Outcome,
    PoisonState,
    RecordFailed,
    encode_poison,
    poison_record_key,
)
from marshal_workers.protocol.wire import (
    ClaimingPartition,
    ClaimKey,
    Heartbeat,
    Message,
    Partitioner,
    ReleasingPartition,
    encode,
    record_key,
)
from marshal_workers.supervisor.runtime import member_settings
from tests.support import GROUP, claim, hb, release, reserve

N = 4
HB_S = 0.25  # (the compacted-home test waits 2*HB of silence, twice, in real time)
SPREAD = spread(N, Partitioner.SPEC)


class Clock:
    def __init__(self, real: bool = False) -> None:
        self.now = int(time.time() * 1000)
        self.real = real  # follow the wall clock (an admin that waits in real time)

    def __call__(self) -> int:
        if self.real:
            self.now = int(time.time() * 1000)
        return self.now


def member(client: str) -> RunConfig:
    return RunConfig("h:h", Mode.ALO, ("orders",), GROUP, client, heartbeat_interval=HB_S)


def config() -> RationalizerConfig:
    return RationalizerConfig(int(HB_S * 1000), N, Partitioner.SPEC, frozenset({"marshal-admin"}))


def write(topic: MemoryTopic, msg: Message) -> int:
    """Append ``msg`` on its spread home; its offset."""
    at = SPREAD.partition_of(msg.topic, msg.partition)  # type: ignore[union-attr]
    return topic.append(at, record_key(msg), encode(msg)).offset


def spread_group(
    positions: dict[int, int], clock: Clock | None = None, *, placement_enabled: bool = True
) -> tuple[MemoryTopic, Clock, dict[int, int]]:
    """A spread group (its settings on all 4 partitions, by member a) that handled
    ``orders/p`` up to each position and released it, on a topic whose placement is enabled
    (version 2) unless told; the tokens of a's claims by p."""
    clock = clock or Clock()
    topic = MemoryTopic(N, clock)
    pin = TopicRecord(0, "init", "marshal-admin", N, placed=placement_enabled)
    topic.append(0, metadata_key(pin), encode_metadata(pin))
    a = member("a")
    log = MemoryLog(topic)
    reader = FoldedLog(log, config())
    reader.catch_up(1.0)
    ensure_group_settings(log, reader.worlds, reader.catch_up, own_settings(a, 0), 1.0)
    tokens = {}
    for p, offset in positions.items():
        tokens[p] = write(topic, claim("a", p))
        write(topic, hb("a", offset, p))
        write(topic, release("a", offset, p))
    return topic, clock, tokens


def session_on(topic: MemoryTopic, clock: Clock) -> AdminSession:
    reader = FoldedLog(MemoryLog(topic), config())
    session = AdminSession(
        reader.log, reader, "marshal-admin", wall=lambda: clock.now / 1000, placement=None
    )
    session.catch_up(1.0)
    return session


@dataclass
class MovedMember:
    """`run_moved_member`'s answer: the member's core, what it appended after the move's
    record, how long after it the member exited, and the log."""

    core: Member
    appended: list[cmd.Append]
    seconds: float
    topic: MemoryTopic
    clock: Clock


def client_whose_member_claim(*, moves: bool) -> str:
    """A client id whose member claim the move (spread, to span 1 at home) puts on another
    partition (``moves``) or leaves on its own."""
    at = home(GROUP, N)
    for c in "abcdefghijklmnopqrstuvwxyz":
        stays = SPREAD.partition_of(member_key(GROUP, c).topic, 0) == at
        if stays != moves:
            return c
    raise AssertionError("no such client id")


def run_moved_member(client: str) -> MovedMember:
    """A spread member ``client`` with its member claim won and heartbeated (its writes land),
    no data partition; the group moved to span 1 at its home; the member run until it exits."""
    topic, clock, _ = spread_group({})
    core = Member(member_settings(member(client), N))
    log = MemoryLog(topic)
    appended: list[cmd.Append] = []

    def run(out: list[cmd.Command], now: float) -> None:
        for c in out:
            if isinstance(c, cmd.Append):
                appended.append(c)
                done = topic.append(c.partition, c.key, c.value)
                run(core.feed(inp.AppendDone(now, c.op, done)), now)

    run(core.feed(inp.RecordsRead(0.0, log.poll(0))), 0.0)
    run(core.begin(0.0, 0.0, []), 0.0)
    now = 0.1
    while now < 2.0:  # its member claim won and heartbeated
        run(core.feed(inp.RecordsRead(now, log.poll(0))), now)
        run(core.feed(inp.Tick(now, 0.0)), now)
        now += 0.1
    assert core.claiming.member in core.held
    move_group(session_on(topic, clock), GROUP, span=1, first=None, timeout_s=5.0,
               progress=lambda _: None)  # fmt: skip
    before, moved = len(appended), now
    run(core.feed(inp.RecordsRead(now, log.poll(0))), now)
    while not core.done and now < moved + 20.0:
        now += 0.1
        run(core.feed(inp.Tick(now, 0.0)), now)
        run(core.feed(inp.RecordsRead(now, log.poll(0))), now)
    return MovedMember(core, appended[before:], now - moved, topic, clock)


def fold_as_placed(topic: MemoryTopic, placement: Placement) -> dict[int, World]:
    """What a member restarted after the move folds: home and window, knowing the placement."""
    cfg = RationalizerConfig(
        int(HB_S * 1000), N, Partitioner.SPEC, frozenset({"marshal-admin"}),
        placements=PlacementBook.of({GROUP: placement}),
    )  # fmt: skip
    reader = FoldedLog(MemoryLog(topic), cfg)
    reader.follow(sorted(reads(GROUP, placement)), from_start=True)
    reader.catch_up(1.0)
    return reader.worlds


class TestThePlan:
    def test_the_token_base_is_above_every_old_token(self) -> None:
        """max over the old partitions of (old base + end offset): spread from base 0, and a
        placed group's window from its base."""
        assert moved_token_base(SPREAD, {0: 5, 1: 9, 2: 3, 3: 0}) == 9
        old = Placement(N, 2, 2, 100)
        assert moved_token_base(old, {2: 7, 3: 40, 0: 1000}) == 140  # (0 is not its window)

    def test_a_new_placement_defaults_to_the_home_and_an_auto_span(self) -> None:
        """No --first: the window starts at the group's home; no --span: one partition per
        10,000 claims; the token base from the ends."""
        base = moved_token_base(SPREAD, {0: 1, 1: 2, 2: 3, 3: 4})
        moved = new_placement(
            GROUP, SPREAD, span=None, first=None, claims=5, partitioner=Partitioner.SPEC,
            token_base=base,
        )  # fmt: skip
        assert moved == Placement(N, home(GROUP, N), 1, 4)
        with pytest.raises(ValueError, match="span 9"):
            new_placement(GROUP, SPREAD, span=9, first=0, claims=1,
                          partitioner=Partitioner.SPEC)  # fmt: skip

    def test_a_placed_group_moved_without_a_span_keeps_its_span(self) -> None:
        """A placed group moved again (to a quieter window, say) with no --span keeps its own:
        the auto span of its claims would change it, and members configured with that span
        (`coordination_span`) would restart into exit 2 (a review: a span-2 group of 5 claims
        moved to span 1, and a bare --move moved it)."""
        old = Placement(N, 1, 2, 40)

        def window(span: int | None, first: int | None) -> tuple[int, int]:
            moved = new_placement(
                GROUP, old, span=span, first=first, claims=5, partitioner=Partitioner.SPEC
            )
            return moved.first, moved.span

        assert window(None, 2) == (2, 2)
        assert window(None, 1) == (old.first, old.span)  # (nothing to move)
        assert window(1, 2) == (2, 1)

    def test_settings_go_on_either_layout_and_home_first(self) -> None:
        """Spread to placed: every partition, home first; placed to placed: both windows."""
        at = home(GROUP, N)
        assert written_on(GROUP, SPREAD, Placement(N, at, 1))[0] == at
        assert sorted(written_on(GROUP, SPREAD, Placement(N, at, 1))) == [0, 1, 2, 3]
        old, new = Placement(N, (at + 1) % N, 1), Placement(N, (at + 2) % N, 1)
        assert written_on(GROUP, old, new) == (at, *sorted({(at + 1) % N, (at + 2) % N}))

    def test_positions_are_carried_amo_resume_and_past_a_skipped_record(self) -> None:
        """Each data claim's max(committed, reserved) goes to its new home; a record an
        operator skipped is carried past; member claims and claims never handled are not."""
        worlds = {p: World(config(), p) for p in range(N)}
        new = Placement(N, 1, 1)

        def put(topic: str, partition: int, state: ClaimState) -> ClaimKey:
            key = ClaimKey(GROUP, topic, partition)
            worlds[SPREAD.partition_of(topic, partition)].claims[key] = state
            return key

        plain = put("orders", 0, ClaimState(certain=True, committed=10, released=True))
        amo = put("orders", 1, ClaimState(certain=True, committed=10, reserved=25, released=True))
        skipped = put("orders", 2, ClaimState(certain=True, committed=7, released=True))
        put("orders", 3, ClaimState(certain=True, released=True))  # never handled
        put("__member.a", 0, ClaimState(certain=True, committed=0, released=True))
        world = worlds[SPREAD.partition_of("orders", 2)]
        world.poison[skipped] = PoisonState(7, 3, True, "boom", "ops", 0, skipped=True)
        carried = {c.key: (c.new_partition, c.offset) for c in carries(worlds, GROUP, SPREAD, new)}
        assert carried == {plain: (1, 10), amo: (1, 25), skipped: (1, 8)}
        assert refusals(worlds, GROUP, SPREAD) == []

    def test_a_parked_record_or_an_unknown_position_refuses_the_move(self) -> None:
        """A parked record (not skipped) and a position unknown after compaction are named."""
        worlds = {p: World(config(), p) for p in range(N)}
        parked, unknown = ClaimKey(GROUP, "orders", 0), ClaimKey(GROUP, "orders", 1)
        worlds[SPREAD.partition_of("orders", 0)].claims[parked] = ClaimState(
            certain=True, committed=4
        )
        worlds[SPREAD.partition_of("orders", 0)].poison[parked] = PoisonState(
            4, 3, True, "boom", "a", 0
        )
        worlds[SPREAD.partition_of("orders", 1)].claims[unknown] = ClaimState(
            certain=True, position_unknown=True
        )
        found = refusals(worlds, GROUP, SPREAD)
        assert found == [
            "orders/0: record 4 parked (resolve it: skip-record or retry-record)",
            "orders/1: position unknown (set it: set-position)",
        ]


class TestTheMove:
    def test_a_spread_group_moves_to_one_partition_with_its_positions(self) -> None:
        """Six released claims spread over 4 partitions (one AMO reservation above its
        committed position): after --move --span 1 every partition's accepted settings are the
        placed ones at home, each position is on home (as a member restarted on the placement
        folds it), every new token is above every old one, and the pause is lifted."""
        positions = {p: 10 * (p + 1) for p in range(6)}
        topic, clock, tokens = spread_group(positions)
        write(topic, claim("a", 6))
        write(topic, reserve("a", 90, 6))
        write(topic, release("a", 70, 6))  # (a release below the reservation: AMO resumes at 90)
        positions[6] = 90
        ends = {p: topic.end_offset(p) for p in range(N)}
        session = session_on(topic, clock)
        line = move_group(session, GROUP, span=1, first=None, timeout_s=5.0,
                          progress=lambda _: None)  # fmt: skip
        at = home(GROUP, N)
        assert f"group {GROUP} moved from spread to {at}:1:{N}:" in line
        for p in range(N):
            placement = session.worlds[p].group_settings[GROUP].placement
            assert placement is not None
            assert (placement.first, placement.span, placement.partitions) == (at, 1, N)
            assert placement.token_base >= max(ends.values()) > max(tokens.values())
            assert pause_of(session.worlds[p], GROUP, clock.now) is None
        moved = session.worlds[at].group_settings[GROUP].placement
        assert moved is not None
        worlds = fold_as_placed(topic, moved)
        assert sorted(worlds) == [at]
        for p, offset in positions.items():
            state = worlds[at].claims[ClaimKey(GROUP, "orders", p)]
            assert state.released and resume_offset(state, Mode.ALO) == offset
            assert state.token is not None and state.token > max(tokens.values())

    def test_positions_are_carried_to_a_compacted_home(self) -> None:
        """The cleaner shortened the new home's history (an offset gap): a claim first seen
        there after it is uncertain, and its first claim only counts as activity; the move
        claims every refused one again after 2*HB of silence and carries each position."""
        clock = Clock(real=True)
        positions = {p: 3 + p for p in range(5)}
        topic, _, _ = spread_group(positions, clock)
        at = home(GROUP, N)
        for _ in range(2):
            topic.append(at, b"filler", b"not a protocol record")
        topic.append(at, b"filler2", b"not a protocol record")
        assert topic.compact(clock() + 1) > 0  # (the first filler, and older records by key)
        said: list[str] = []
        session = session_on(topic, clock)
        assert session.worlds[at].gap_seen
        move_group(session, GROUP, span=1, first=None, timeout_s=10.0, progress=said.append)
        assert any("claiming again" in line for line in said), said
        moved = session.worlds[at].group_settings[GROUP].placement
        assert moved is not None
        worlds = fold_as_placed(topic, moved)
        for p, offset in positions.items():
            state = worlds[at].claims[ClaimKey(GROUP, "orders", p)]
            assert state.certain and resume_offset(state, Mode.ALO) == offset

    def test_a_parked_record_refuses_the_move_and_nothing_changes(self) -> None:
        """A claim whose record is parked: exit 1, one line naming it; nothing is written
        (no pause, no settings): the group stays spread."""
        topic, clock, _ = spread_group({1: 8})
        failed = RecordFailed(0, "a-1", "a", GROUP, "orders", 0, 5, 3, Outcome.PARKED, "boom")
        write(topic, claim("a", 0))
        write(topic, hb("a", 5, 0))
        at = SPREAD.partition_of("orders", 0)
        topic.append(at, poison_record_key(failed), encode_poison(failed))
        write(topic, release("a", 5, 0))  # (the holder stopped: the count stays parked)
        ends = {p: topic.end_offset(p) for p in range(N)}
        session = session_on(topic, clock)
        with pytest.raises(MarshalError) as refused:
            move_group(session, GROUP, span=1, first=None, timeout_s=5.0,
                       progress=lambda _: None)  # fmt: skip
        assert refused.value.exit_code == EXIT_RUNTIME
        text = str(refused.value)
        assert "\n" not in text and "orders/0: record 5 parked" in text
        assert "nothing changed" in text
        assert {p: topic.end_offset(p) for p in range(N)} == ends
        for world in session.worlds.values():
            assert world.group_settings[GROUP].placement is None

    def test_a_window_outside_the_topic_is_a_usage_error(self) -> None:
        """--first past the topic's partitions: exit 2, one line, nothing written."""
        topic, clock, _ = spread_group({0: 3})
        ends = {p: topic.end_offset(p) for p in range(N)}
        with pytest.raises(ConfigError) as refused:
            move_group(session_on(topic, clock), GROUP, span=1, first=N, timeout_s=5.0,
                       progress=lambda _: None)  # fmt: skip
        assert refused.value.exit_code == EXIT_USAGE
        assert f"first partition {N} is not one of its {N}" in str(refused.value)
        assert {p: topic.end_offset(p) for p in range(N)} == ends

    def test_a_running_member_on_the_old_layout_exits_6(self) -> None:
        """A spread member's core folds the moved settings: it says so, stops gracefully and
        exits 6 (its unit restarts it; it then locates the placement)."""
        topic, clock, _ = spread_group({})
        a = member("a")
        log = MemoryLog(topic)
        core = Member(member_settings(a, N))
        core.feed(inp.RecordsRead(0.0, log.poll(0)))
        core.begin(0.0, 0.0, [ClaimKey(GROUP, "orders", 0)])
        session = session_on(topic, clock)
        move_group(session, GROUP, span=1, first=None, timeout_s=5.0, progress=lambda _: None)
        out = core.feed(inp.RecordsRead(1.0, log.poll(0)))
        said = [c for c in out if isinstance(c, cmd.Log) and c.event == "group_settings_changed"]
        reason = str(said[0].fields["reason"]) if said else ""
        # it said "change it fleet-wide with group-settings": what the operator had just done
        assert reason.startswith(f"group {GROUP} was moved (placement spread here, "), reason
        assert "restarted, the member locates it there" in reason, reason
        assert core.ctx.stopping
        for step in range(1, 200):  # (its writes are never acknowledged here: they expire)
            out += core.feed(inp.Tick(1.0 + step * 0.1, 0.0))
            if core.done:
                break
        assert core.exit_code == EXIT_PLACEMENT_MOVED
        # No release of its member claim on the old layout: judged there by the new placement,
        # it was a malformed record in the group's status, and the stop waited 12 s for its
        # verdict (a review). The claim is no longer the group's member record there.
        member_topic = core.claiming.member.topic
        released = [
            c for c in out
            if isinstance(c, cmd.Append) and isinstance(c.message, ReleasingPartition)
            and c.message.topic == member_topic
        ]  # fmt: skip
        assert released == []

    def test_a_moved_member_writes_nothing_on_the_old_layout_as_it_stops(self) -> None:
        """A member whose member claim is won (its writes land here) folds the move: it stops
        and exits 6 without releasing that claim on the old layout, where the new placement
        judges it a record that belongs elsewhere (status then counted it malformed, and the
        stop waited 12 s for a verdict that never came; a review)."""
        moved = run_moved_member(client_whose_member_claim(moves=True))
        assert moved.core.exit_code == EXIT_PLACEMENT_MOVED
        assert moved.seconds < 1.0, f"exited {moved.seconds:.1f} s after the move's record"
        assert [c.message for c in moved.appended] == []

    def test_a_member_claim_the_move_leaves_on_its_partition_is_released(self) -> None:
        """A client whose member claim is on the group's new home already (spread, then span 1
        there: about 1 in N): the new layout judges that claim its own, so it is released as
        ever; dropped, it was a live member on the new layout for 2*HB (a review)."""
        moved = run_moved_member(client_whose_member_claim(moves=False))
        assert moved.core.exit_code == EXIT_PLACEMENT_MOVED and moved.seconds < 1.0
        kinds = [type(c.message) for c in moved.appended]  # (a heartbeat due may go first)
        assert kinds[-1:] == [ReleasingPartition] and kinds.count(ReleasingPartition) == 1
        at = home(GROUP, N)
        placement = session_on(moved.topic, moved.clock).worlds[at].group_settings[GROUP]
        assert placement.placement is not None
        key = moved.core.claiming.member
        state = fold_as_placed(moved.topic, placement.placement)[at].claims.get(key)
        assert state is not None and state.released, state

    def test_a_spread_member_started_after_the_move_is_told_to_restart(self) -> None:
        """A member that took the group for spread (it located it before the move reached
        home) finds placed settings when it checks them: exit 6, not 2 (started again, it
        locates the placement)."""
        topic, clock, _ = spread_group({0: 3})
        move_group(session_on(topic, clock), GROUP, span=1, first=None, timeout_s=5.0,
                   progress=lambda _: None)  # fmt: skip
        log = MemoryLog(topic)
        reader = FoldedLog(log, config())
        reader.catch_up(1.0)
        with pytest.raises(MarshalError) as refused:
            ensure_group_settings(
                log, reader.worlds, reader.catch_up, own_settings(member("b"), 0), 1.0
            )
        assert refused.value.exit_code == EXIT_PLACEMENT_MOVED
        assert "placement" in str(refused.value)


class TestAnUnfinishedMove:
    def stopped_move(self) -> tuple[MemoryTopic, Clock, dict[int, int], list[str]]:
        """A move of a group of five released claims that stopped (raised) right after its
        first carry: the settings are recorded, the other four positions not carried."""
        positions = {p: 10 + p for p in range(5)}
        topic, clock, _ = spread_group(positions)
        said: list[str] = []

        def progress(line: str) -> None:
            said.append(line)
            if line.startswith("carried"):
                raise RuntimeError("the admin died")

        with pytest.raises(RuntimeError):
            move_group(session_on(topic, clock), GROUP, span=1, first=None, timeout_s=5.0,
                       progress=progress)  # fmt: skip
        return topic, clock, positions, said

    def test_the_carry_plan_is_printed_before_anything_is_recorded(self) -> None:
        """Every claim's old position and where it goes are said before the settings are
        recorded, so an operator can finish a stopped move by hand."""
        _, _, positions, said = self.stopped_move()
        recorded_at = next(i for i, line in enumerate(said) if line.startswith("recorded:"))
        at = home(GROUP, N)
        for p, offset in positions.items():
            old = SPREAD.partition_of("orders", p)
            line = f"to carry: orders/{p} at {offset} from partition {old} to partition {at}"
            assert line in said[:recorded_at], said

    def test_a_move_stopped_after_recording_leaves_the_group_paused_until_lifted(self) -> None:
        """A move that stopped between recording and lifting leaves positions uncarried: the
        group stays paused on every partition it wrote for `MOVE_HOLD_S` (days), not minutes,
        so no member claims at no position before an operator finishes by hand (a review)."""
        topic, clock, _, _ = self.stopped_move()
        reader = FoldedLog(MemoryLog(topic), config())
        reader.catch_up(1.0)
        at = home(GROUP, N)
        pause = pause_of(reader.worlds[at], GROUP, clock.now)
        assert pause is not None
        assert pause.until_ms - clock.now >= (MOVE_HOLD_S - 60) * 1000

    @staticmethod
    def rerun_session(topic: MemoryTopic, clock: Clock, client_id: str = "marshal-admin"
                      ) -> tuple[AdminSession, Placement]:  # fmt: skip
        """What a rerun's session is: the group located on its new home, its reads followed."""
        at = home(GROUP, N)
        reader = FoldedLog(MemoryLog(topic), config())
        reader.catch_up(1.0)
        new = reader.worlds[at].group_settings[GROUP].placement
        assert new is not None and (new.first, new.span) == (at, 1)
        cfg = replace(config(), placements=PlacementBook.of({GROUP: new}))
        placed_reader = FoldedLog(MemoryLog(topic), cfg)
        placed_reader.follow(sorted(reads(GROUP, new)), from_start=True)
        session = AdminSession(
            placed_reader.log, placed_reader, client_id, wall=lambda: clock.now / 1000,
            placement=new,
        )  # fmt: skip
        session.catch_up(1.0)
        return session, new

    @pytest.mark.parametrize(("span", "client_id"), [(2, "marshal-admin"), (1, "ops-2")])
    def test_a_rerun_for_another_window_or_by_another_admin_refuses_and_writes_nothing(
        self, span: int, client_id: str
    ) -> None:
        """Rerun after it stopped for another window, or by an admin of another client id (not
        the pause's: it could not claim): the group is located on its new home and still
        paused; the rerun says so in one line (exit 1) naming the rerun and set-position, and
        writes nothing; it neither reports a finished move nor moves on from the half-carried
        layout."""
        topic, clock, _, _ = self.stopped_move()
        session, _ = self.rerun_session(topic, clock, client_id)
        ends = {p: topic.end_offset(p) for p in range(N)}
        with pytest.raises(MarshalError) as refused:
            move_group(session, GROUP, span=span, first=None, timeout_s=5.0,
                       progress=lambda _: None)  # fmt: skip
        text = str(refused.value)
        assert refused.value.exit_code == EXIT_RUNTIME and "\n" not in text
        assert "paused" in text and "set-position" in text and "nothing to move" not in text
        assert "run it again with the same --client-id" in text
        assert {p: topic.end_offset(p) for p in range(N)} == ends

    @pytest.mark.parametrize("span", [1, None])
    def test_a_rerun_by_the_same_admin_carries_what_is_left_and_lifts_the_pause(
        self, span: int | None
    ) -> None:
        """The same admin runs the move again (the same window, or none named): it finds the
        spread settings from before the move on home, folds the old homes as the move left
        them, carries the four positions the first run did not (not the one it did; a claim
        whose old home is its new one is carried as the first run would have), and lifts the
        pause. A member restarted on the new placement then finds every position on its new
        home (before, the rerun refused: an operator set each by hand)."""
        topic, clock, positions, said = self.stopped_move()
        (first,) = [line for line in said if line.startswith("carried")]
        at = home(GROUP, N)
        left = [p for p in positions if f"orders/{p} " not in first]
        session, new = self.rerun_session(topic, clock)
        lines: list[str] = []
        text = move_group(session, GROUP, span=span, first=None, timeout_s=5.0,
                          progress=lines.append)  # fmt: skip
        assert "finished; 4 positions carried now, 1 there already, 0 kept" in text, text
        assert "from spread to" in text and "pause lifted" in text, text
        assert sorted(line for line in lines if line.startswith("carried")) == sorted(
            f"carried orders/{p} at {positions[p]} to partition {at}" for p in left
        ), lines
        assert sum(line.startswith("to carry:") for line in lines) == 4, lines
        worlds = fold_as_placed(topic, new)
        for p, offset in positions.items():
            state = worlds[at].claims[ClaimKey(GROUP, "orders", p)]
            assert resume_offset(state, Mode.AMO) == offset
        assert pause_of(worlds[at], GROUP, clock.now) is None

    def test_a_rerun_keeps_a_position_an_operator_set_meanwhile(self) -> None:
        """Between the stop and the rerun an operator set one position that was not carried,
        with set-position as the stop's message says: set-position keeps the move's hold (it
        does not lift it), and the rerun keeps that position, names it, and carries the other
        three."""
        topic, clock, positions, _ = self.stopped_move()
        session, new = self.rerun_session(topic, clock)
        at = home(GROUP, N)
        plan = make_plan(session, GROUP, "orders", {4: 99})
        done = set_position(session, plan, timeout_s=5.0).summary
        assert done.endswith("pause kept (this client's from before the run)"), done
        assert pause_of(session.worlds[at], GROUP, session.now_ms()) is not None
        session, _ = self.rerun_session(topic, clock)  # (a new command)
        lines: list[str] = []
        text = move_group(session, GROUP, span=None, first=None, timeout_s=5.0,
                          progress=lines.append)  # fmt: skip
        assert "3 positions carried now, 1 there already, 1 kept as set" in text, text
        kept = f"kept: orders/4 at 99 on partition {at} (set there since the move; it had 14)"
        assert kept in lines, lines
        worlds = fold_as_placed(topic, new)
        got = {p: resume_offset(worlds[at].claims[ClaimKey(GROUP, "orders", p)], Mode.AMO)
               for p in positions}  # fmt: skip
        assert got == {**positions, 4: 99}

    def test_a_move_that_died_recording_its_settings_is_recorded_then_carried(self) -> None:
        """The first run died after its settings reached home, before the other partitions:
        the rerun records them where they are missing (else a partition of the old layout
        would still judge the group spread after the lift), then carries every position."""
        positions = {p: 10 + p for p in range(5)}
        topic, clock, _ = spread_group(positions)
        session = session_on(topic, clock)
        append = session.log.append
        settings_written: list[int] = []

        def dying_append(partition: int, key: bytes, value: bytes, timeout_s: float) -> object:
            if b"settings" in key:
                settings_written.append(partition)
                if len(settings_written) > 1:
                    raise RuntimeError("the admin died")
            return append(partition, key, value, timeout_s)

        session.log.append = dying_append  # type: ignore[method-assign,assignment]
        with pytest.raises(RuntimeError):
            move_group(session, GROUP, span=1, first=None, timeout_s=5.0,
                       progress=lambda _: None)  # fmt: skip
        rerun, new = self.rerun_session(topic, clock)
        lines: list[str] = []
        text = move_group(rerun, GROUP, span=None, first=None, timeout_s=5.0,
                          progress=lines.append)  # fmt: skip
        assert "finished; 5 positions carried now" in text, text
        others = sorted(set(range(N)) - {home(GROUP, N)})
        assert any(line.startswith("recorded:") and str(others) in line for line in lines), lines
        reader = FoldedLog(MemoryLog(topic), config())
        reader.catch_up(1.0)
        for p in range(N):
            taken = reader.worlds[p].group_settings[GROUP]
            assert taken.placement == new, p
        worlds = fold_as_placed(topic, new)
        for p, offset in positions.items():
            state = worlds[home(GROUP, N)].claims[ClaimKey(GROUP, "orders", p)]
            assert resume_offset(state, Mode.AMO) == offset

    def test_a_change_of_settings_during_a_stopped_move_refuses_and_keeps_the_hold(self) -> None:
        """`--change` by the same admin while the move's hold is in force: it would write its
        own short pause over the hold and lift it (a review: members then claimed positions
        not carried, and the move could not be finished). It refuses, writing nothing, and
        the move is finished by its rerun afterwards."""
        topic, clock, _, _ = self.stopped_move()
        session, _ = self.rerun_session(topic, clock)
        now = session.worlds[home(GROUP, N)].group_settings[GROUP]
        ends = {p: topic.end_offset(p) for p in range(N)}
        with pytest.raises(MarshalError, match="longer than this change needs"):
            change_settings(session, replace(now, heartbeat_interval_ms=500), timeout_s=5.0,
                            progress=lambda _: None)  # fmt: skip
        assert {p: topic.end_offset(p) for p in range(N)} == ends
        session, _ = self.rerun_session(topic, clock)
        text = move_group(session, GROUP, span=None, first=None, timeout_s=5.0,
                          progress=lambda _: None)  # fmt: skip
        assert "is finished" in text, text

    def test_a_pause_written_after_a_finished_move_is_not_a_stopped_move(self) -> None:
        """The move finished (rerun), members moved on, then the same admin paused the group
        for maintenance (release-group): a --move now refuses with the one line, writes
        nothing and leaves that pause in force (a review: it "finished" the old move again,
        named stale positions as kept, and lifted the operator's pause)."""
        topic, clock, _, _ = self.stopped_move()
        session, _ = self.rerun_session(topic, clock)
        move_group(session, GROUP, span=None, first=None, timeout_s=5.0, progress=lambda _: None)
        session, _ = self.rerun_session(topic, clock)
        assert pause_for(session, GROUP, 3600).accepted
        ends = {p: topic.end_offset(p) for p in range(N)}
        session, _ = self.rerun_session(topic, clock)
        with pytest.raises(MarshalError) as refused:
            move_group(session, GROUP, span=None, first=None, timeout_s=5.0,
                       progress=lambda _: None)  # fmt: skip
        assert "is paused: not moved" in str(refused.value)
        assert {p: topic.end_offset(p) for p in range(N)} == ends
        assert pause_of(session.worlds[home(GROUP, N)], GROUP, session.now_ms()) is not None


class TestGuards:
    def test_a_topic_without_placement_refuses_the_move(self) -> None:
        """A version-1 topic (members from before placement may run): exit 2, one line naming
        init --enable-placement; nothing written."""
        topic, clock, _ = spread_group({0: 3}, placement_enabled=False)
        ends = {p: topic.end_offset(p) for p in range(N)}
        with pytest.raises(ConfigError) as refused:
            move_group(session_on(topic, clock), GROUP, span=1, first=None, timeout_s=5.0,
                       progress=lambda _: None)  # fmt: skip
        assert refused.value.exit_code == EXIT_USAGE
        assert "marshal-admin init --enable-placement" in str(refused.value)
        assert "\n" not in str(refused.value)
        assert {p: topic.end_offset(p) for p in range(N)} == ends

    def move_with_a_jump(
        self, jump: Callable[[int], int]
    ) -> tuple[MemoryTopic, dict[int, int], list[str], list[bool], Callable[[], str]]:
        """Five released claims moved on a clock (log and admin alike) set to ``jump(the
        pause's end)`` after the first carry; what was said, and whether each carry was made
        under this admin's pause in force; the move itself (its line, or raises)."""
        positions = {p: 20 + p for p in range(5)}
        topic, clock, _ = spread_group(positions)
        reader = FoldedLog(MemoryLog(topic), config())
        session = AdminSession(
            reader.log, reader, "marshal-admin", wall=lambda: clock.now / 1000,
            monotonic=lambda: clock.now / 1000, placement=None,
        )  # fmt: skip
        session.catch_up(1.0)
        said: list[str] = []
        under_pause: list[bool] = []
        at = home(GROUP, N)

        def progress(line: str) -> None:
            said.append(line)
            if line.startswith("carried"):
                pause = pause_of(session.worlds[at], GROUP, clock.now)
                under_pause.append(pause is not None)
                if len(under_pause) == 1 and pause is not None:
                    clock.now = jump(pause.until_ms)

        def run() -> str:
            return move_group(session, GROUP, span=1, first=None, timeout_s=5.0,
                              progress=progress)  # fmt: skip

        return topic, positions, said, under_pause, run

    def test_the_pause_is_extended_before_it_lapses_during_the_carries(self) -> None:
        """The clock jumps to a second before the pause ends, after the first carry: the move
        writes the pause again before the next carry, so every carry is made under a pause in
        force, and every position is carried."""
        topic, positions, said, under_pause, run = self.move_with_a_jump(lambda end: end - 1000)
        run()
        assert any(line.startswith("pause extended") for line in said), said
        assert len(under_pause) == len(positions) and all(under_pause), under_pause
        at = home(GROUP, N)
        worlds = fold_as_placed(topic, Placement(N, at, 1))
        for p, offset in positions.items():
            key = ClaimKey(GROUP, "orders", p)
            assert resume_offset(worlds[at].claims[key], Mode.ALO) == offset

    def test_the_pause_outlasts_the_wait_for_the_old_members(self) -> None:
        """After the last carry the pause has left more than a carry's margin but less than
        the wait for the old members (--timeout): it is written again before that wait, so
        the line that wait's timeout prints (the group stays paused) is true."""
        topic, clock, _ = spread_group({0: 4})
        reader = FoldedLog(MemoryLog(topic), config())
        session = AdminSession(
            reader.log, reader, "marshal-admin", wall=lambda: clock.now / 1000,
            monotonic=lambda: clock.now / 1000, placement=None,
        )  # fmt: skip
        session.catch_up(1.0)
        said: list[str] = []
        at = home(GROUP, N)
        margin = 2 * int(HB_S * 1000) + 2 * int(session.write_timeout_s * 1000)

        def progress(line: str) -> None:
            said.append(line)
            pause = pause_of(session.worlds[at], GROUP, clock.now)
            if line.startswith("carried") and pause is not None:
                clock.now = pause.until_ms - margin - 1000  # (enough for carries, not 5s more)

        move_group(session, GROUP, span=1, first=None, timeout_s=5.0, progress=progress)
        carried = next(i for i, line in enumerate(said) if line.startswith("carried"))
        assert any(line.startswith("pause extended") for line in said[carried:]), said

    def test_a_pause_that_ran_out_stops_the_carries(self) -> None:
        """The clock jumps past the pause's end after the first carry: the move carries
        nothing more and stops with one line saying the pause ran out (exit 1)."""
        _, _, said, under_pause, run = self.move_with_a_jump(lambda end: end + 1000)
        with pytest.raises(MarshalError) as stopped:
            run()
        text = str(stopped.value)
        assert "ran out" in text and "set-position" in text and "\n" not in text
        assert under_pause == [True]
        assert not any(line.startswith("pause extended") for line in said)

    def test_a_claim_refused_for_another_reason_than_compaction_stops_at_once(self) -> None:
        """A carry's claim refused as held by another member is not claimed again after a
        wait: the move stops with one line naming the refusal and the pause in force."""
        topic, clock, _ = spread_group({0: 4, 1: 5})
        session = session_on(topic, clock)
        write_for_real = session.write
        said: list[str] = []

        def write(msg: Message, partition: int) -> ev.Event:
            verdict = write_for_real(msg, partition)
            if isinstance(msg, ClaimingPartition) and isinstance(verdict, ev.ClaimGranted):
                return ev.ClaimRejected(verdict.coord_partition, verdict.coord_offset,
                                        verdict.log_time, msg, "held by b", "b")  # fmt: skip
            return verdict

        session.write = write  # type: ignore[method-assign]
        with pytest.raises(MarshalError) as stopped:
            move_group(session, GROUP, span=1, first=None, timeout_s=5.0, progress=said.append)
        text = str(stopped.value)
        assert "held by b" in text and "stays paused until" in text and "\n" not in text
        assert not any("claiming again" in line for line in said), said
        assert pause_of(session.worlds[home(GROUP, N)], GROUP, session.now_ms()) is not None

    def test_a_carry_on_the_same_partition_never_moves_a_position_back(self) -> None:
        """A claim whose old and new home are one partition, its holder still valid there after
        the wait for the holders (brokers' clocks apart: the admin judges staleness by the
        newest log time of all partitions) and reserving to 200 and releasing after the plan
        took 100: the pausing admin's release sets a position outright, so a carry at 100 would
        hand 100..199 out again (a review). It releases at what the log holds there when its
        claim is granted, 200."""
        topic, clock, _ = spread_group({})
        key = ClaimKey(GROUP, "orders", 0)
        at = SPREAD.partition_of("orders", 0)
        write(topic, claim("a", 0))
        write(topic, hb("a", 100, 0))
        session = session_on(topic, clock)
        assert pause_for(session, GROUP, 60.0).in_force
        write_for_real = session.write

        def late_holder(msg: Message, partition: int) -> ev.Event:
            if isinstance(msg, ClaimingPartition):  # the holder goes on, then releases
                write(topic, reserve("a", 200, 0))
                write(topic, release("a", 200, 0))
            return write_for_real(msg, partition)

        session.write = late_holder  # type: ignore[method-assign]
        said: list[str] = []
        carry_all(session, GROUP, (Carry(key, at, at, 100),), 5.0, 60.0, said.append)
        state = session.worlds[at].claims[key]
        assert state.released and state.token != 0
        assert resume_offset(state, Mode.AMO) == 200, said
        assert said == [f"carried orders/0 at 200 to partition {at}"]

    def test_the_token_base_is_above_tokens_on_a_partition_emptied_by_deletion(self) -> None:
        """Every record of the busiest old partition deleted (its start is its end, which
        `end_offsets` reads as 0): the base is taken after the pause landed there, so it still
        counts that partition's log end and is above the tokens won there."""
        topic, clock, tokens = spread_group({p: 3 for p in range(6)}, Clock(real=True))
        at = home(GROUP, N)  # (the home is emptied too: the carries wait 2*HB of silence)
        busiest = max(range(N), key=topic.end_offset)
        assert busiest != 0  # (the topic record stays)
        topic.delete_records(busiest, topic.end_offset(busiest))
        won_there = [t for p, t in tokens.items() if SPREAD.partition_of("orders", p) == busiest]
        assert won_there and max(won_there) >= max(topic.end_offset(p) for p in range(N)
                                                    if p != busiest)  # fmt: skip
        session = session_on(topic, clock)
        move_group(session, GROUP, span=1, first=None, timeout_s=10.0, progress=lambda _: None)
        moved = session.worlds[at].group_settings[GROUP].placement
        assert moved is not None and moved.token_base > max(won_there)

    def test_a_claim_won_after_the_token_base_stops_the_move(self) -> None:
        """Another admin of the same client id sets a position (claims and releases) on the
        old layout after the token base was taken and before the record: its token is not
        below the base, and the move stops with one line naming it, nothing carried."""
        topic, clock, _ = spread_group({2: 5})
        session = session_on(topic, clock)
        said: list[str] = []

        def progress(line: str) -> None:
            said.append(line)
            if line.startswith("to carry:") and len(said) < 10:
                write(topic, claim("marshal-admin", 2, inst="ops-1"))
                write(topic, release("marshal-admin", 9, 2, inst="ops-1"))

        with pytest.raises(MarshalError) as stopped:
            move_group(session, GROUP, span=1, first=None, timeout_s=5.0, progress=progress)
        text = str(stopped.value)
        assert "orders/2's token" in text and "not below the moved token base" in text
        assert "\n" not in text
        assert "to carry: orders/2 at 9 from partition 3 to partition 2" in said, said
        assert not any(line.startswith("carried") for line in said), said


class TestAPlacedGroup:
    def placed_group(self) -> tuple[MemoryTopic, Clock, Placement, dict[int, int]]:
        """A group placed at its home (span 1) by member a, which handled and released
        ``orders/0..3`` at 5, 6, 7, 8; its claims' tokens."""
        clock = Clock()
        topic = MemoryTopic(N, clock)
        old = Placement(N, home(GROUP, N), 1)
        settings = replace(own_settings(member("a"), 0), placement=old)
        topic.append(old.first, metadata_key(settings), encode_metadata(settings))
        tokens = {}
        for p in range(4):
            tokens[p] = topic.append(old.first, *keyed(claim("a", p))).offset
            topic.append(old.first, *keyed(release("a", 5 + p, p)))
        return topic, clock, old, tokens

    def session(self, topic: MemoryTopic, clock: Clock, old: Placement) -> AdminSession:
        """An admin session as `group_session` opens one for a placed group: home and window."""
        cfg = replace(config(), placements=PlacementBook.of({GROUP: old}))
        reader = FoldedLog(MemoryLog(topic), cfg)
        reader.follow(sorted(reads(GROUP, old)), from_start=True)
        session = AdminSession(
            reader.log, reader, "marshal-admin", wall=lambda: clock.now / 1000, placement=old
        )
        session.catch_up(1.0)
        return session

    def test_a_placed_group_moves_to_another_window(self) -> None:
        """Home (span 1) to a window of 2 after it: the settings on home and both window
        partitions, the positions on their new homes, tokens above the old, pause lifted."""
        topic, clock, old, tokens = self.placed_group()
        first = (old.first + 1) % N
        session = self.session(topic, clock, old)
        line = move_group(session, GROUP, span=2, first=first, timeout_s=5.0,
                          progress=lambda _: None)  # fmt: skip
        assert f"moved from {old.first}:1:{N}:0 to {first}:2:{N}:" in line
        new = session.worlds[old.first].group_settings[GROUP].placement
        assert new is not None and (new.first, new.span) == (first, 2)
        assert sorted(session.worlds) == sorted(reads(GROUP, new) | reads(GROUP, old))
        for p, world in session.worlds.items():
            assert world.group_settings[GROUP].placement == new
            assert pause_of(world, GROUP, clock.now) is None, p
        worlds = fold_as_placed(topic, new)
        for p in range(4):
            state = worlds[new.partition_of("orders", p)].claims[ClaimKey(GROUP, "orders", p)]
            assert resume_offset(state, Mode.ALO) == 5 + p
            assert state.token is not None and state.token > max(tokens.values())

    def moved_on(self) -> tuple[MemoryTopic, Clock, Placement, Placement]:
        """The placed group moved from home to the next partition (finished) and handled on
        there up to 50+p: (topic, clock, the first placement, the one it is at now). Home still
        holds the claims' states from before that move (5+p)."""
        topic, clock, old, _ = self.placed_group()
        other = (old.first + 1) % N
        move_group(self.session(topic, clock, old), GROUP, span=1, first=other, timeout_s=5.0,
                   progress=lambda _: None)  # fmt: skip
        there = fold_as_placed(topic, old)[old.first].group_settings[GROUP].placement
        assert there is not None and there.first == other
        for p in range(4):
            topic.append(other, *keyed(claim("a", p)))
            topic.append(other, *keyed(release("a", 50 + p, p)))
        return topic, clock, old, there

    def move_back(self, topic: MemoryTopic, clock: Clock, there: Placement, home_at: int,
                  session: AdminSession | None = None) -> Placement:  # fmt: skip
        """A move back to ``home_at`` that dies (on its first carry unless ``session`` makes
        it die otherwise); the placement it recorded."""

        def dies(line: str) -> None:
            if line.startswith("carried"):
                raise RuntimeError("the admin died")

        with pytest.raises(RuntimeError):
            move_group(session or self.session(topic, clock, there), GROUP, span=1,
                       first=home_at, timeout_s=5.0, progress=dies)  # fmt: skip
        back = fold_as_placed(topic, there)[home_at].group_settings[GROUP].placement
        assert back is not None and back.first == home_at
        return back

    def rerun_carries_today_s(self, topic: MemoryTopic, clock: Clock, back: Placement) -> str:
        """The rerun of the move back; every position at home is today's (50+p), none of the
        states from before the first move; its line."""
        text = move_group(self.session(topic, clock, back), GROUP, span=None, first=None,
                          timeout_s=5.0, progress=lambda _: None)  # fmt: skip
        assert "0 kept as set" in text, text
        worlds = fold_as_placed(topic, back)
        got = {p: resume_offset(worlds[back.first].claims[ClaimKey(GROUP, "orders", p)], Mode.AMO)
               for p in range(4)}  # fmt: skip
        assert got == {p: 50 + p for p in range(4)}
        return text

    def test_a_stopped_move_back_to_an_earlier_window_carries_today_s_positions(self) -> None:
        """A move back home stops after its first carry. The rerun carries today's positions
        over home's stale states, not "keeping" them (a review: a member resumed at 5+, every
        record since handled twice)."""
        topic, clock, old, there = self.moved_on()
        back = self.move_back(topic, clock, there, old.first)
        text = self.rerun_carries_today_s(topic, clock, back)
        assert "3 positions carried now, 1 there already" in text, text

    def test_a_carry_claimed_and_never_released_is_carried_by_the_rerun(self) -> None:
        """The move back home dies between a carry's claim and its release: that claim, won
        since the record, holds home's state from before the first move (6). The rerun
        carries it (once the dead run's claim is stale), not "keeping" 6 (a review: records
        6 to 50 handled twice)."""
        topic, clock, old, there = self.moved_on()
        session = self.session(topic, clock, there)
        write, claims = session.write, [0]

        def dies_after_the_second_claim(msg: Message, partition: int | None = None) -> ev.Event:
            verdict = write(msg, partition)
            if isinstance(msg, ClaimingPartition):
                claims[0] += 1
                if claims[0] == 2:
                    raise RuntimeError("the admin died")
            return verdict

        session.write = dies_after_the_second_claim  # type: ignore[method-assign]
        back = self.move_back(topic, clock, there, old.first, session)
        clock.now += 3 * int(HB_S * 1000)  # the dead run's claim goes stale
        text = self.rerun_carries_today_s(topic, clock, back)
        assert "3 positions carried now, 1 there already" in text, text

    def test_a_failed_set_position_during_the_stopped_move_back_leaves_nothing_kept(
        self,
    ) -> None:
        """The move back home stops after its first carry; the operator starts the manual
        path, and set-position fails at its second heartbeat: its restore puts back home's
        states from before the first move (6, 7), which must not pass for an operator's
        setting. The rerun (once the restore's claims are stale) carries 51 and 52 over them
        (a review: "kept" 6 and 7, records 6 to 50 handed out again)."""
        topic, clock, old, there = self.moved_on()
        back = self.move_back(topic, clock, there, old.first)
        session = self.session(topic, clock, back)
        write, beats = session.write, [0]

        def second_heartbeat_fails(msg: Message, partition: int | None = None) -> ev.Event:
            if isinstance(msg, Heartbeat):
                beats[0] += 1
                if beats[0] == 2:
                    raise MarshalError("heartbeat not acknowledged")
            return write(msg, partition)

        session.write = second_heartbeat_fails  # type: ignore[method-assign]
        with pytest.raises(MarshalError, match="restored"):
            set_position(session, make_plan(session, GROUP, "orders", {1: 70, 2: 71}),
                         timeout_s=5.0)  # fmt: skip
        clock.now += 3 * int(HB_S * 1000)  # the restore's claims go stale
        self.rerun_carries_today_s(topic, clock, back)

    def test_the_same_window_is_no_move(self) -> None:
        """--first and --span of the group's placement: nothing written."""
        topic, clock, old, _ = self.placed_group()
        ends = {p: topic.end_offset(p) for p in range(N)}
        line = move_group(self.session(topic, clock, old), GROUP, span=1, first=old.first,
                          timeout_s=5.0, progress=lambda _: None)  # fmt: skip
        assert "nothing to move" in line
        assert {p: topic.end_offset(p) for p in range(N)} == ends


def keyed(msg: Message) -> tuple[bytes, bytes]:
    return record_key(msg), encode(msg)


def test_the_plan_names_every_partition_and_carry() -> None:
    """`plan_move` puts the partitions and the carries together."""
    worlds = {p: World(config(), p) for p in range(N)}
    key = ClaimKey(GROUP, "orders", 5)
    worlds[SPREAD.partition_of("orders", 5)].claims[key] = ClaimState(certain=True, committed=3)
    plan = plan_move(worlds, GROUP, SPREAD, Placement(N, 0, 2, 50))
    assert plan.partitions[0] == home(GROUP, N) and sorted(plan.partitions) == [0, 1, 2, 3]
    (carry,) = plan.carries
    assert (carry.key, carry.offset) == (key, 3)
    assert carry.new_partition == Placement(N, 0, 2, 50).partition_of("orders", 5)


def test_a_moved_group_s_settings_are_its_home_s_not_an_old_copy() -> None:
    """Spread, moved to span 1 at home (its placed settings on every partition), then changed
    to HB 1 s (on home and window only): the whole log's view of the group's settings (what
    `topic describe` and the whole-log `dump` fold it with) is home's newest, not the old copy
    a lower partition keeps (a review: they judged the group with the old interval)."""
    clock = Clock(real=True)
    topic, clock, _ = spread_group({}, clock)
    move_group(session_on(topic, clock), GROUP, span=1, first=None, timeout_s=5.0,
               progress=lambda _: None)  # fmt: skip
    at = home(GROUP, N)
    placed_settings = session_on(topic, clock).worlds[at].group_settings[GROUP]
    assert placed_settings.placement is not None
    cfg = replace(config(), placements=PlacementBook.of({GROUP: placed_settings.placement}))
    reader = FoldedLog(MemoryLog(topic), cfg)
    reader.follow(sorted(reads(GROUP, placed_settings.placement)), from_start=True)
    session = AdminSession(reader.log, reader, "marshal-admin", wall=lambda: clock.now / 1000,
                           placement=placed_settings.placement)  # fmt: skip
    session.catch_up(2.0)
    changed = replace(placed_settings, heartbeat_interval_ms=1000)
    change_settings(session, changed, timeout_s=5.0, progress=lambda _: None)
    whole = session_on(topic, clock).worlds
    older = [p for p, w in whole.items() if w.group_settings[GROUP].heartbeat_interval_ms != 1000]
    assert older and min(older) < at  # (the case: a lower partition keeps the old copy)
    found = recorded_settings(whole, GROUP)
    assert found is not None and found.heartbeat_interval_ms == 1000
