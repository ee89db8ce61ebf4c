"""Placed groups on a real broker: a member and `status` read their group's partitions only.

On a coordination topic whose topic record is version 2 (`marshal-admin init` on a new topic),
a new group is created placed: its first member records its settings on the group's home
partition, and every member (and `marshal-admin status`) then follows that home and the
group's window, not every partition. A version-1 topic keeps every group spread, as before
placement. A reader from before placement refuses a version-2 topic.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from marshal_workers.admin.connection import Connection, read_records
from marshal_workers.admin.dump import dump_line, group_of_record, run_dump
from marshal_workers.admin.status_read import StatusReader
from marshal_workers.log.kafkalog import KafkaLog
from marshal_workers.protocol.placement import home
from marshal_workers.protocol.wire import CoordRecord
from tests.integration.fleet import REPO, Fleet, MakeFleet
from tests.integration.test_fleet import assert_ledger_sound, stop_all

pytestmark = pytest.mark.kafka

COORDINATION = 8
# main before placement reached the runtime: its readers know version-1 topic records only
BEFORE_PLACEMENT = "58d70cb"


def located(member_log: Path) -> dict[str, object]:
    """The member's `group_located` line (where it found its group, what it follows)."""
    for line in member_log.read_text(errors="replace").splitlines():
        if '"group_located"' in line:
            found: dict[str, object] = json.loads(line)
            return found
    raise AssertionError(f"no group_located line in {member_log}")


def claim_partitions(fleet: Fleet) -> set[int]:
    """The coordination partitions that hold claims of the fleet's topic (every partition is
    read: the test's reader follows them all)."""
    fleet.reader.poll(0.5)
    return {
        p
        for p, world in fleet.reader.worlds.items()
        for key in world.claims
        if key.topic == fleet.topic
    }


def wait_handled(fleet: Fleet, timeout: float = 90) -> None:
    fleet.wait_for(fleet.handled_everything, timeout, "every record handled")


def group_with_home_apart(avoid: set[int]) -> str:
    """A group name whose home (of COORDINATION partitions) is none of ``avoid``."""
    while True:
        name = f"g_{uuid.uuid4().hex[:8]}"
        if home(name, COORDINATION) not in avoid:
            return name


class TestPlacedGroup:
    def test_members_and_status_read_home_and_window_only(self, make_fleet: MakeFleet) -> None:
        """Two members of a new group on a version-2 topic: it is placed at its home with a
        window of one; each member follows that one partition; every claim is coordinated
        there; status reads it only; the ALO ledger skips nothing."""
        fleet = make_fleet(coordination_partitions=COORDINATION, placed=True, partitions=4)
        at = home(fleet.group, COORDINATION)
        a = fleet.start("a")
        b = fleet.start("b")
        fleet.wait_split([2, 2])
        fleet.produce(400)
        wait_handled(fleet)
        for member in (a, b):
            line = located(member.log_path)
            assert line["placement"] == f"{at}:1:{COORDINATION}:0", line
            assert line["followed"] == [at], line
        assert claim_partitions(fleet) == {at}
        status = fleet.admin("status", "--group", fleet.group, "--json")
        assert status.returncode == 0, status.stderr
        shown = json.loads(status.stdout)
        held = sorted(c["partition"] for c in shown["claims"] if c["topic"] == fleet.topic)
        assert held == [0, 1, 2, 3], shown
        conn = Connection(fleet.bootstrap, fleet.coordination, heartbeat_interval_ms=1000)
        reader = StatusReader(conn, fleet.group, 30.0)
        try:
            assert reader.log.followed == frozenset({at})
            status_now = reader.refresh()
            assert (len(status_now.claims), status_now.members) == (4, ("a", "b"))
            assert sorted(reader.reader.worlds) == [at]
        finally:
            reader.close()
        paused = fleet.admin("release-group", "--group", fleet.group, "--for", "30")
        assert paused.returncode == 0, paused.stderr
        assert "on its coordination partition" in paused.stdout, paused.stdout
        fleet.reader.poll(0.5)
        assert [p for p, w in fleet.reader.worlds.items() if fleet.group in w.pauses] == [at]
        lifted = fleet.admin("release-group", "--group", fleet.group, "--for", "0")
        assert lifted.returncode == 0, lifted.stderr
        fleet.wait_split([2, 2])
        stop_all(fleet)
        assert_ledger_sound(fleet, alo=True)

    def test_dump_of_a_placed_group_reads_its_partitions_only(
        self, make_fleet: MakeFleet, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """`dump --group` of a placed group follows its home only (every partition before: on
        a topic many groups share, a group's dump cost the whole log), and prints the same
        lines as the group's records read from the whole log."""
        fleet = make_fleet(coordination_partitions=COORDINATION, placed=True, partitions=4)
        at = home(fleet.group, COORDINATION)
        fleet.start("a")
        fleet.wait_split([4])
        stop_all(fleet)
        conn = Connection(fleet.bootstrap, fleet.coordination, heartbeat_interval_ms=1000)
        whole = [
            dump_line(r, e)
            for r, e in read_records(conn, 30.0)
            if group_of_record(r, e) == fleet.group
        ]
        followed: set[frozenset[int]] = set()  # what each log read followed when it polled
        poll = KafkaLog.poll

        def spy(log: KafkaLog, timeout_s: float) -> list[CoordRecord]:
            followed.add(log.followed)
            return poll(log, timeout_s)

        monkeypatch.setattr(KafkaLog, "poll", spy)
        lines = list(run_dump(conn, False, 30.0, group=fleet.group))
        assert followed == {frozenset({at})}, followed
        assert lines == whole and len(lines) >= 4, lines

    def test_members_started_together_agree_on_one_placement(self, make_fleet: MakeFleet) -> None:
        """Four members of a new group started at once: whichever creates it, every one takes
        the placement recorded on home and none is refused (a late scan once took the first
        creator's records for a group from before, and exited 2)."""
        fleet = make_fleet(coordination_partitions=COORDINATION, placed=True, partitions=8)
        at = home(fleet.group, COORDINATION)
        members = [fleet.start(name) for name in ("a", "b", "c", "d")]
        fleet.wait_split([2, 2, 2, 2])
        for member in members:
            assert member.proc.poll() is None, member.log_tail()
            assert located(member.log_path)["followed"] == [at]
        fleet.reader.poll(0.5)
        recorded = fleet.reader.worlds[at].group_settings[fleet.group]
        assert recorded.placement is not None and recorded.placement.first == at
        stop_all(fleet)

    def test_an_explicit_span_is_recorded_and_followed(self, make_fleet: MakeFleet) -> None:
        """coordination_span 3: the group's window is three partitions from its home; the
        member follows those three (home among them), and the claims are on them."""
        fleet = make_fleet(coordination_partitions=COORDINATION, placed=True, partitions=6)
        at = home(fleet.group, COORDINATION)
        window = sorted({(at + i) % COORDINATION for i in range(3)})
        a = fleet.start("a", "--coordination-span", "3")
        fleet.wait_split([6])
        line = located(a.log_path)
        assert line["placement"] == f"{at}:3:{COORDINATION}:0", line
        assert line["followed"] == window, line
        assert claim_partitions(fleet) <= set(window)
        late = fleet.start("b", "--coordination-span", "2")
        assert late.wait(60) == 2, late.log_tail()
        assert "coordination_span is 2 here but 3" in late.log_path.read_text()
        stop_all(fleet)

    def test_two_groups_share_the_topic_on_their_own_partitions(
        self, make_fleet: MakeFleet
    ) -> None:
        """Two placed groups on one coordination topic: each member follows its own group's
        home only, each group's claims are there, and an AMO ledger of each has no record
        twice."""
        first = make_fleet(
            coordination_partitions=COORDINATION, placed=True, partitions=4, mode="amo"
        )
        other = group_with_home_apart({home(first.group, COORDINATION)})
        second = make_fleet(coordination=first.coordination, group=other, partitions=4, mode="amo")
        members = [f.start(name) for f in (first, second) for name in ("a", "b")]
        first.wait_split([2, 2])
        second.wait_split([2, 2])
        first.produce(300)
        second.produce(300)
        wait_handled(first)
        wait_handled(second)
        for fleet, pair in ((first, members[:2]), (second, members[2:])):
            at = home(fleet.group, COORDINATION)
            assert claim_partitions(fleet) == {at}
            for member in pair:
                assert located(member.log_path)["followed"] == [at]
        stop_all(first)
        stop_all(second)
        for fleet in (first, second):
            rows = fleet.ledger()
            assert len(rows) == len({(r.partition, r.offset) for r in rows}), "handled twice"


class TestSpreadGroups:
    def test_a_version_1_topic_keeps_new_groups_spread(self, make_fleet: MakeFleet) -> None:
        """On a version-1 topic a new group is spread as before placement: its member follows
        every partition and writes spread settings on each."""
        fleet = make_fleet(coordination_partitions=4)
        a = fleet.start("a")
        fleet.wait_split([8])
        line = located(a.log_path)
        assert line["placement"] == "spread", line
        assert line["followed"] == [0, 1, 2, 3], line
        fleet.reader.poll(0.5)
        for world in fleet.reader.worlds.values():
            settings = world.group_settings[fleet.group]
            assert settings.placement is None
        stop_all(fleet)

    def test_enable_placement_places_only_groups_created_after(self, make_fleet: MakeFleet) -> None:
        """`init --enable-placement` on a version-1 topic: a group that ran before stays
        spread; a group created afterwards is placed."""
        old = make_fleet(coordination_partitions=COORDINATION)
        first = old.start("a")
        old.wait_split([8])
        stop_all(old)
        enabled = old.admin("init", "--enable-placement")
        assert enabled.returncode == 0, enabled.stderr
        assert "new groups are placed" in enabled.stdout
        again = old.start("a")
        old.wait_split([8])
        assert located(again.log_path)["placement"] == "spread"
        new = make_fleet(coordination=old.coordination, partitions=2)
        placed = new.start("n")
        new.wait_split([2])
        at = home(new.group, COORDINATION)
        assert located(placed.log_path)["followed"] == [at]
        stop_all(old)
        stop_all(new)
        assert first.proc.returncode == 0


class TestOlderReaders:
    def test_a_reader_from_before_placement_refuses_a_version_2_topic(
        self, make_fleet: MakeFleet, tmp_path: Path
    ) -> None:
        """The package as it was before placement, started as a member on a version-2 topic:
        it counts the topic record malformed, finds no recorded partition count, exits 2."""
        old = tmp_path / "old"
        old.mkdir()
        tree = subprocess.run(
            ["git", "-C", str(REPO), "archive", BEFORE_PLACEMENT, "marshal_workers"],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=tree, check=True)
        (old / "nothing_handled.py").write_text("def handle(record, ctx):\n    pass\n")
        fleet = make_fleet(coordination_partitions=2, placed=True, partitions=2)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")}
        env["PYTHONPATH"] = str(old)
        env["XDG_RUNTIME_DIR"] = str(tmp_path)
        started = time.monotonic()
        command = [
            sys.executable, "-c", "from marshal_workers.supervisor.cli import main; main()",
            "--handler", "nothing_handled:handle", "--mode", "alo", "--topic", fleet.topic,
            "--group", fleet.group, "--bootstrap-servers", fleet.bootstrap,
            "--coordination-topic", fleet.coordination, "--heartbeat-interval", "1",
        ]  # fmt: skip
        run = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=env,
            cwd=old,
            timeout=120,
            check=False,
        )
        assert run.returncode == 2, (run.stdout, run.stderr, time.monotonic() - started)
        assert "has no recorded partition count" in run.stderr
