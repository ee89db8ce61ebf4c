"""The child started ahead of the first claim (`supervisor.spare`), on a real broker with real
processes: it becomes the first claim's child and handles its records; a member that claims
nothing kills it; it dies with its supervisor, by TERM or by kill -9."""

from __future__ import annotations

import json
import signal
import time
import uuid
from pathlib import Path

import psutil
import pytest

from marshal_workers.supervisor.spare import KEEP_S
from tests.integration.fleet import Fleet, MakeFleet, Member, log_events

pytestmark = pytest.mark.kafka


def member_id() -> str:
    return f"spare-{uuid.uuid4().hex[:8]}"


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def spare_pid(fleet: Fleet, member: Member) -> int:
    """The pid of a member's spare, which waits for a claim: its fork server's one child."""
    fleet.wait_for(lambda: len(member.children()) == 1, 30, "the spare's start")
    (pid,) = member.children()
    return pid


def test_the_spare_becomes_the_first_claims_child(make_fleet: MakeFleet) -> None:
    """The first `child_started` is the spare's process (it says so, and no other does), and
    its consumer is the one it made before its claim (`child_ready` says ``prepared``; the
    others opened theirs); every record is handled, once."""
    fleet = make_fleet(mode="alo", hb=1.0, partitions=4)
    fleet.produce(200)
    member = fleet.start(member_id())
    fleet.wait_for(fleet.handled_everything, 60, "every record handled")
    started = log_events(member.log_path, "child_started")
    assert [e["spare"] for e in started] == [True, False, False, False], member.log_tail()
    assert len({e["child_pid"] for e in started}) == 4
    ready = {e["pid"]: e["consumer"] for e in log_events(member.log_path, "child_ready")}
    assert [ready[e["child_pid"]] for e in started] == ["prepared", "opened", "opened", "opened"]
    assert not log_events(member.log_path, "child_spare_dropped")
    rows = fleet.ledger()
    assert len({(r.partition, r.offset) for r in rows}) == 200 == len(rows)
    member.signal(signal.SIGTERM)
    assert member.wait(60) == 0, member.log_tail()


def test_a_member_that_claims_nothing_kills_its_spare(make_fleet: MakeFleet) -> None:
    """Two members, one partition: the second claims nothing, and its spare is killed within
    `KEEP_S`; the first's spare handles the partition."""
    fleet = make_fleet(mode="alo", hb=1.0, partitions=1)
    first = fleet.start(member_id())
    fleet.wait_for(lambda: bool(fleet.holders()), 30, "the partition claimed")
    second = fleet.start(member_id())
    pid = spare_pid(fleet, second)
    fleet.wait_for(
        lambda: bool(log_events(second.log_path, "child_spare_dropped")), KEEP_S + 10, "the drop"
    )
    fleet.wait_for(lambda: not alive(pid), 10, "the unused spare to die")
    assert not log_events(second.log_path, "child_started"), second.log_tail()
    for member in (second, first):
        member.signal(signal.SIGTERM)
        assert member.wait(60) == 0, member.log_tail()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["term", "kill9"])
def test_a_spare_dies_with_its_supervisor(make_fleet: MakeFleet, sig: signal.Signals) -> None:
    """A supervisor stopped (TERM) or killed (kill -9) while its spare waits for a claim:
    the spare does not outlive it. The member joins a group whose one partition is held, so
    its spare waits (`KEEP_S`)."""
    fleet = make_fleet(mode="alo", hb=1.0, partitions=1)
    holder = fleet.start(member_id())
    fleet.wait_for(lambda: bool(fleet.holders()), 30, "the partition claimed")
    member = fleet.start(member_id())
    fleet.wait_for(lambda: bool(log_events(member.log_path, "supervisor_started")), 30, "the start")
    pid = spare_pid(fleet, member)
    assert alive(pid)
    member.signal(sig)
    code = member.wait(60)
    assert code == (0 if sig is signal.SIGTERM else -signal.SIGKILL), member.log_tail()
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid), "the spare outlived its supervisor"
    holder.signal(signal.SIGTERM)
    assert holder.wait(60) == 0, holder.log_tail()


def test_what_the_handlers_module_sets_at_import_stands_in_the_spare_too(
    make_fleet: MakeFleet, tmp_path: Path
) -> None:
    """The handler's module sets the garbage collector's thresholds at its import; every child,
    the spare (which imports it before its claim is known) included, handles with them: the
    child's own settings come before the import in both (a review: the spare set them after)."""
    fleet = make_fleet(mode="alo", hb=1.0, partitions=3)
    fleet.produce(30)
    seen = tmp_path / "thresholds"
    member = fleet.start(
        member_id(),
        handler="tests.integration.import_settings:handle",
        env={"IMPORT_SETTINGS_DIR": str(seen)},
    )
    fleet.wait_for(lambda: seen.exists() and len(list(seen.iterdir())) == 3, 60, "3 children")
    started = log_events(member.log_path, "child_started")
    assert [e["spare"] for e in started] == [True, False, False], member.log_tail()
    for path in seen.iterdir():
        assert json.loads(path.read_text()) == [1234, 5, 6], path.name
    member.signal(signal.SIGTERM)
    assert member.wait(60) == 0, member.log_tail()
