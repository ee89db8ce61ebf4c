"""The member's two shells interpret the core's commands alike: the supervisor's runtime
(`Supervisor._run`) and the simulator's node (`SimNode._run`) carry one command stream out to
the same effects (appends, leases, children started, signalled and told, the answers of lookups
and discovery, warnings, releases seen, the exit code), and each names every command of the
core's `Command` union in its `match`, ending in ``assert_never`` (mypy --strict proves it
total; the AST check here lets the pure suite catch a command left out too)."""

from __future__ import annotations

import ast
import inspect
import random
import select
import signal
import textwrap
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from structlog.testing import capture_logs

from marshal_workers.config.runconfig import RunConfig
from marshal_workers.core import commands as cmd
from marshal_workers.core import inputs as inp
from marshal_workers.core import observations as obs
from marshal_workers.ipc import messages as ipc
from marshal_workers.log.memlog import MemoryLog, MemoryTopic
from marshal_workers.protocol.modes import Mode
from marshal_workers.protocol.wire import ClaimKey, Heartbeat, encode, record_key
from marshal_workers.sim.children import DataPartition, SimChild
from marshal_workers.sim.node import SimNode
from marshal_workers.sim.vlog import VirtualLog
from marshal_workers.supervisor.observe import Observer
from marshal_workers.supervisor.runtime import Supervisor, member_settings
from tests.supervisor_doubles import MP, FakeChild, FakeTopics, initialised, patch_children

K0, K1 = ClaimKey("g", "orders", 0), ClaimKey("g", "orders", 1)
K2 = ClaimKey("g", "orders", 2)  # a lease and no child: only the leases compare


def config() -> RunConfig:
    return RunConfig(
        handler="marshal_workers.plugins.ledger:handle",
        mode=Mode.ALO,
        topics=("orders",),
        group="g",
        client_id="c1",
        heartbeat_interval=1.0,
    )


def spec(key: ClaimKey, token: int) -> ipc.ChildSpec:
    return ipc.ChildSpec(
        "marshal_workers.plugins.ledger:handle", Mode.ALO, "localhost:9092", "g", "c1", "i1",
        key.topic, key.partition, 5, token,
    )  # fmt: skip


def appended(partition: int, op: int, offset: int) -> cmd.Append:
    beat = Heartbeat(0, "i1", "c1", "g", "orders", partition, offset)
    return cmd.Append(op, partition, beat, record_key(beat), encode(beat))


# One stream with every kind of command, in an order a member could give them.
STREAM: list[cmd.Command] = [
    cmd.SetLease(K0, 100.5),
    cmd.SetLease(K1, 101.0),
    cmd.SetLease(K2, 101.0),
    cmd.SetLease(K2, 100.0),  # never earlier: only a revoke (0) ends a lease
    appended(0, 1, 7),
    cmd.Spawn(K0, spec(K0, 11)),
    cmd.Spawn(K1, spec(K1, 12), restart=True),
    cmd.TellChild(K0, ipc.Grant(1, True)),
    cmd.TellChild(K1, ipc.Stop()),
    cmd.SignalChild(K1, signal.SIGTERM, "stop"),
    cmd.SignalChild(K0, signal.SIGKILL, "lease ended"),
    cmd.SignalChild(ClaimKey("g", "orders", 5), signal.SIGKILL, "no child: nothing happens"),
    cmd.TellChild(ClaimKey("g", "orders", 5), ipc.Stop()),
    cmd.SetLease(K0, 0.0),
    cmd.DropLease(K1),
    cmd.DropLease(ClaimKey("g", "orders", 5)),
    appended(1, 2, 9),
    cmd.LookupStart(K1),
    cmd.Discover(),
    cmd.FindLogEnd(),
    cmd.Log("warning", "claim_lost", {"topic": "orders"}),
    cmd.Log("info", "noted", {}),
    cmd.Observe(obs.ReleaseSeen(K1)),
    cmd.Observe(obs.GroupView(2, 0, 1)),
]
EXIT = cmd.Exit(3, "refused")


@dataclass
class Effects:
    """What a shell did with the stream, in terms both shells have."""

    appends: list[tuple[int, int, bytes, bytes]] = field(default_factory=list)
    leases: dict[ClaimKey, float] = field(default_factory=dict)
    spawned: dict[ClaimKey, ipc.ChildSpec] = field(default_factory=dict)
    signalled: list[tuple[ClaimKey, int]] = field(default_factory=list)
    told: list[tuple[ClaimKey, ipc.ToChild]] = field(default_factory=list)
    answers: list[tuple[Any, ...]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    releases_seen: list[ClaimKey] = field(default_factory=list)
    exit_code: int | None = None


def answer(i: inp.Input) -> tuple[Any, ...]:
    """An answer without its time (each shell has its own clock)."""
    if isinstance(i, inp.StartFound):
        return ("StartFound", i.key, i.offset)
    if isinstance(i, inp.PartitionsFound):
        return ("PartitionsFound", tuple(i.partitions), i.coordination_partitions)
    if isinstance(i, inp.LogEndFound):  # (where each log ends is its own: the partitions asked)
        return ("LogEndFound", tuple(sorted(i.ends)))
    return (type(i).__name__,)


class Recorded(MemoryLog):
    """The in-memory log, remembering what was submitted."""

    def __init__(self, topic: MemoryTopic) -> None:
        super().__init__(topic)
        self.submitted: list[tuple[int, int, bytes, bytes]] = []

    def submit(self, op: int, partition: int, key: bytes, value: bytes) -> None:
        self.submitted.append((op, partition, key, value))
        super().submit(op, partition, key, value)


class Releases(Observer):
    def __init__(self) -> None:
        self.seen: list[ClaimKey] = []

    def release_seen(self, key: ClaimKey) -> None:
        self.seen.append(key)


class Jobs:
    """The runtime's background pool, kept: the test runs each job itself."""

    def __init__(self) -> None:
        self.jobs: list[Callable[[], inp.Input]] = []

    def submit(self, job: Callable[[], inp.Input]) -> None:
        self.jobs.append(job)


def runtime_effects(monkeypatch: pytest.MonkeyPatch) -> Effects:
    """The stream through the supervisor's runtime, with stand-in children and jobs run here."""
    started: list[FakeChild] = []
    patch_children(monkeypatch, started)
    signalled: list[tuple[ClaimKey, int]] = []
    told: list[tuple[ClaimKey, ipc.ToChild]] = []
    signal_group, signal_child, send = (
        FakeChild.signal_group,
        FakeChild.signal_child,
        FakeChild.send,
    )

    def signalling(child: FakeChild, sig: int) -> None:
        signalled.append((key_of(child.spec), sig))
        signal_group(child, sig)

    def signalling_alone(child: FakeChild, sig: int) -> None:  # (a TERM: the child alone)
        signalled.append((key_of(child.spec), sig))
        signal_child(child, sig)

    def sending(child: FakeChild, message: ipc.ToChild) -> bool:
        told.append((key_of(child.spec), message))
        return send(child, message)

    monkeypatch.setattr(FakeChild, "signal_group", signalling)
    monkeypatch.setattr(FakeChild, "signal_child", signalling_alone)
    monkeypatch.setattr(FakeChild, "send", sending)
    log = Recorded(initialised(MemoryTopic(2, lambda: int(time.time() * 1000))))
    observer, jobs = Releases(), Jobs()
    sup = Supervisor(config(), log, FakeTopics(2), MP, observer)  # type: ignore[arg-type]
    sup.background = jobs  # type: ignore[assignment]
    try:
        with capture_logs() as logs:
            sup._run(list(STREAM))
            started_off_the_loop(sup)
        done = Effects(
            appends=log.submitted,
            leases={k: lease.deadline for k, lease in sup.leases.items()},
            spawned={k: h.spec for k, h in sup.children.items()},  # type: ignore[attr-defined]
            signalled=list(signalled),
            told=list(told),
            answers=[answer(job()) for job in jobs.jobs],
            warnings=[e["event"] for e in logs if e["log_level"] in ("warning", "error")],
            releases_seen=observer.seen,
        )
        sup._run([EXIT])
        done.exit_code = sup.exit_code
        return done
    finally:
        for child in started:
            child.close()


def started_off_the_loop(sup: Supervisor) -> None:
    """Let the runtime's children start (`supervisor.childstarts`: off the loop) and hear what
    the stream told and signalled them meanwhile, as its loop would."""
    deadline = time.monotonic() + 10
    while sup._starting:
        assert time.monotonic() < deadline, "the children's starts did not end"
        select.select([sup.starts.fileno()], [], [], 0.05)
        for done in sup.starts.results():
            sup._started(done)


def per_child(effects: list[tuple[ClaimKey, Any]]) -> list[tuple[ClaimKey, Any]]:
    """Effects in order per child: a child still starting hears what waited for it once it
    has started, so the order across children is the order of their starts."""
    return sorted(effects, key=lambda effect: str(effect[0]))


def key_of(spec: ipc.ChildSpec) -> ClaimKey:
    """The claim a child's spec is for (a partition's: the tests here start no slice)."""
    return ClaimKey(spec.group_id, spec.topic, spec.partition)


def sim_effects(monkeypatch: pytest.MonkeyPatch) -> Effects:
    """The stream through the simulator's node at one virtual time."""
    signalled: list[tuple[ClaimKey, int]] = []
    told: list[tuple[ClaimKey, ipc.ToChild]] = []
    die, receive = SimChild.die, SimChild.receive

    def dying(child: SimChild, code: int, t: float) -> None:
        signalled.append((child.key, -code))
        die(child, code, t)

    def receiving(child: SimChild, message: ipc.ToChild, t: float) -> None:
        told.append((child.key, message))
        receive(child, message, t)

    monkeypatch.setattr(SimChild, "die", dying)
    monkeypatch.setattr(SimChild, "receive", receiving)
    violations: list[str] = []
    rng = random.Random(1)
    node = SimNode(
        name="g:c1:i1",
        settings=member_settings(config(), 2),
        log=VirtualLog(2, rng),
        data=lambda key: DataPartition(backlog=0, rate=0.0),
        partitions=lambda: [K0, K1],
        rng=rng,
        on_handled=lambda child, offset, t: None,
        on_failed=lambda child, offset, t: None,
        on_died=lambda child, code, t: None,
        on_violation=lambda name, detail: violations.append(f"{name}: {detail}"),
        speed=100.0,
    )
    node._run(list(STREAM), 10.0)
    assert not violations, violations
    events = {c.event for c in STREAM if isinstance(c, cmd.Log)}
    done = Effects(
        appends=[(f.op, f.partition, f.key, f.value) for f in node.in_flight],
        leases={k: cell.deadline for k, cell in node.leases.items()},
        spawned={k: child.spec for k, child in node.children.items()},
        signalled=list(signalled),
        told=list(told),
        answers=[answer(i) for _, i in node.answers],
        warnings=[w for line in node.trace if (w := line.split()[2]) in events],
        releases_seen=node.releases_seen,
    )
    node._run([EXIT], 10.0)
    done.exit_code = node.exit_code
    return done


def test_the_stream_has_every_command() -> None:
    """The contract's stream covers the whole union: a new command joins it, or this fails."""
    assert {type(c) for c in [*STREAM, EXIT]} == set(typing.get_args(cmd.Command))


def test_both_shells_carry_a_stream_out_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """One command stream, the runtime and the simulator: the same effects, one by one."""
    runtime, sim = runtime_effects(monkeypatch), sim_effects(monkeypatch)
    assert runtime.appends == sim.appends and len(sim.appends) == 2
    assert runtime.leases == sim.leases == {K0: 0.0, K2: 101.0}
    assert runtime.spawned == sim.spawned == {K0: spec(K0, 11), K1: spec(K1, 12)}
    assert per_child(runtime.told) == per_child(sim.told)
    assert per_child(sim.told) == [(K0, ipc.Grant(1, True)), (K1, ipc.Stop())]
    assert per_child(runtime.signalled) == per_child(sim.signalled)
    assert per_child(sim.signalled) == [(K0, signal.SIGKILL), (K1, signal.SIGTERM)]
    assert runtime.answers == sim.answers
    assert sim.answers == [
        ("StartFound", K1, 0),
        ("PartitionsFound", (K0, K1), 2),
        ("LogEndFound", (0, 1)),
    ]
    assert runtime.warnings == sim.warnings == ["claim_lost"]
    assert runtime.releases_seen == sim.releases_seen == [K1]
    assert runtime.exit_code == sim.exit_code == EXIT.code


def matched_commands(method: Callable[..., object]) -> tuple[set[str], bool]:
    """The command classes a method's ``match`` names (``case cmd.X(...)``), and whether it
    ends in ``case _: assert_never(...)``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    names: set[str] = set()
    total = False
    for node in ast.walk(tree):
        if not isinstance(node, ast.match_case):
            continue
        pattern = node.pattern
        if isinstance(pattern, ast.MatchClass) and isinstance(pattern.cls, ast.Attribute):
            names.add(pattern.cls.attr)
        elif isinstance(pattern, ast.MatchAs) and pattern.pattern is None:
            calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
            total = any(getattr(c.func, "id", "") == "assert_never" for c in calls)
    return names, total


@pytest.mark.parametrize("method", [Supervisor._run, SimNode._run], ids=["runtime", "sim"])
def test_each_interpreter_names_every_command(method: Callable[..., object]) -> None:
    """Every member of the `Command` union has its case, and the match ends in assert_never."""
    names, total = matched_commands(method)
    assert names == {c.__name__ for c in typing.get_args(cmd.Command)}
    assert total


def test_the_ast_check_sees_a_command_left_out() -> None:
    """The check above can fail: an interpreter without Exit's case, or without the
    assert_never, is caught."""

    def partial(c: cmd.Command) -> None:
        match c:
            case cmd.Append():
                pass

    names, total = matched_commands(partial)
    assert names == {"Append"} and not total
