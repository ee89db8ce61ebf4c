"""The children's scheduling group (`childlink.schedgroup`): the fork server leads a session of
its own, and a child set up gives that session's autogroup its nice, once, where there is one.

Busy children in the supervisor's session weighed, as one autogroup, as much as any other
session of the host, whatever their nice: 64 CPU-bound slice children on 2 cores kept another
session's process waiting for seconds (docs/benchmarks.md, "Busy children starved the host's
other sessions"). The first tests use files standing in for ``/proc/self/autogroup``; the last
fork a real fork server and child and, where the kernel has autogroups, look at the real ones.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from marshal_workers.childlink import schedgroup
from marshal_workers.childlink.schedgroup import GroupNice, session_group_nice, settle_soon

REPO = Path(__file__).resolve().parents[3]
HAS_AUTOGROUP = os.path.exists(schedgroup.AUTOGROUP)  # (init's own reads empty: not a test)


def autogroup_file(tmp_path: Path, nice: int) -> str:
    path = tmp_path / "autogroup"
    path.write_text(f"/autogroup-4711 nice {nice}\n")
    return str(path)


class TestReading:
    def test_the_nice_is_read_from_the_kernel_s_line(self, tmp_path: Path) -> None:
        assert session_group_nice(autogroup_file(tmp_path, 7)) == 7

    @pytest.mark.parametrize("text", ["", "/autogroup-1 nice", "/autogroup-1 weight 3", "a b c"])
    def test_anything_else_reads_as_none(self, tmp_path: Path, text: str) -> None:
        (tmp_path / "autogroup").write_text(text)
        assert session_group_nice(str(tmp_path / "autogroup")) is None

    def test_a_kernel_without_autogroups_reads_as_none(self, tmp_path: Path) -> None:
        assert session_group_nice(str(tmp_path / "missing")) is None


class TestGroupNice:
    def test_a_child_of_the_fork_server_s_session_lowers_its_group_once(
        self, tmp_path: Path
    ) -> None:
        path = autogroup_file(tmp_path, 0)
        group = GroupNice(10, os.getsid(0), path)
        assert not group.done
        assert group.settle() and group.done and group.error is None
        assert Path(path).read_text() == "10"

    def test_a_group_lowered_already_is_not_written_again(self, tmp_path: Path) -> None:
        """Every child of the member tries; the first one's write is enough."""
        path = autogroup_file(tmp_path, 12)
        assert GroupNice(10, os.getsid(0), path).settle()
        assert Path(path).read_text() == "/autogroup-4711 nice 12\n"

    @pytest.mark.parametrize("leader", [None, -1])
    def test_a_child_in_another_session_leaves_it_alone(
        self, tmp_path: Path, leader: int | None
    ) -> None:
        """A spawned child (no fork server: ``None``), or one whose fork server could not lead
        a session of its own, is in the supervisor's session: its group must keep its weight."""
        path = autogroup_file(tmp_path, 0)
        group = GroupNice(10, leader, path)
        assert group.done and group.settle()
        assert Path(path).read_text() == "/autogroup-4711 nice 0\n"

    def test_child_nice_0_writes_nothing(self, tmp_path: Path) -> None:
        path = autogroup_file(tmp_path, 0)
        assert GroupNice(0, os.getsid(0), path).settle()
        assert Path(path).read_text() == "/autogroup-4711 nice 0\n"

    def test_no_autogroup_is_nothing_to_do(self, tmp_path: Path) -> None:
        group = GroupNice(10, os.getsid(0), str(tmp_path / "missing"))
        assert group.settle() and group.error is None

    def test_too_soon_is_tried_again_and_a_refusal_is_given_up(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The kernel refuses a change of any group's nice within 0.1 s of the last one (host
        wide, without CAP_SYS_ADMIN): not done, to be tried again. Any other refusal is
        reported (a warning) and not tried again. (The kernel answers at the write.)"""
        path = autogroup_file(tmp_path, 0)
        refuse_writes(monkeypatch, [errno.EAGAIN, errno.EPERM])
        group = GroupNice(10, os.getsid(0), path)
        assert not group.settle() and not group.done and group.error is None
        assert group.settle() and group.done and group.error
        assert group.settle()  # given up: no third write
        assert Path(path).read_text() == "/autogroup-4711 nice 0\n"


def refuse_writes(monkeypatch: pytest.MonkeyPatch, refusals: list[int]) -> None:
    """The module's writes to the autogroup file fail with these errnos, in turn, then succeed."""
    real_open = open

    class Refusing:
        def __init__(self, file: Any) -> None:
            self.file = file

        def __enter__(self) -> Refusing:
            return self

        def __exit__(self, *exc: object) -> None:
            self.file.close()

        def write(self, text: str) -> int:
            if refusals:
                code = refusals.pop(0)
                raise OSError(code, os.strerror(code))
            self.file.truncate()
            return int(self.file.write(text))

    def opening(file: str, mode: str = "r", **kwargs: Any) -> Any:
        if "w" in mode:  # as the kernel's file: opening it for writing does not empty it
            return Refusing(real_open(file, "r+", **kwargs))
        return real_open(file, mode, **kwargs)

    monkeypatch.setattr(schedgroup, "open", opening, raising=False)


class TestSettleSoon:
    def test_done_at_once_needs_no_thread(self, tmp_path: Path) -> None:
        seen: list[GroupNice] = []
        group = GroupNice(10, os.getsid(0), autogroup_file(tmp_path, 0))
        assert settle_soon(group, seen.append) is None
        assert seen == [group] and group.error is None

    def test_too_soon_is_tried_again_from_a_thread_until_it_is_done(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Not after the child's next batch (a slow handler's may take minutes): every
        ``retry_s``, from a daemon thread, which then reports."""
        path = autogroup_file(tmp_path, 0)
        refuse_writes(monkeypatch, [errno.EAGAIN, errno.EAGAIN])
        seen: list[GroupNice] = []
        group = GroupNice(10, os.getsid(0), path)
        thread = settle_soon(group, seen.append, retry_s=0.01)
        assert thread is not None and thread.daemon
        thread.join(5)
        assert seen == [group] and group.done and group.error is None
        assert Path(path).read_text() == "10"

    def test_too_soon_for_ever_is_given_up_and_reported(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = autogroup_file(tmp_path, 0)
        refuse_writes(monkeypatch, [errno.EAGAIN] * 10)
        seen: list[GroupNice] = []
        group = GroupNice(10, os.getsid(0), path)
        thread = settle_soon(group, seen.append, retry_s=0.001, retries=3)
        assert thread is not None
        thread.join(5)
        assert seen == [group] and group.done and group.error and "too soon" in group.error
        assert Path(path).read_text() == "/autogroup-4711 nice 0\n"


class TestLeaveSession:
    SCRIPT = (
        "import os, sys\n"
        "from marshal_workers.childlink.schedgroup import leave_session\n"
        "print(leave_session(sys.argv[1]), os.getsid(0) == os.getpid())\n"
    )

    def run(self, path: str) -> list[str]:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        done = subprocess.run(
            [sys.executable, "-c", self.SCRIPT, path],
            capture_output=True, text=True, env=env, check=True, timeout=60,
        )  # fmt: skip
        return done.stdout.split()

    def test_without_autogroups_the_process_stays_in_its_session(self, tmp_path: Path) -> None:
        """No gain there, and the fork server stays in the supervisor's process group."""
        assert self.run(str(tmp_path / "missing")) == ["False", "False"]

    def test_with_them_it_leads_a_session_of_its_own(self, tmp_path: Path) -> None:
        assert self.run(autogroup_file(tmp_path, 0)) == ["True", "True"]


class TestForkServerSession:
    # What a child of the fork server reports: its session, the fork server's pid, and the nice
    # of its session's autogroup before and after it settles (None: no autogroup here).
    PROBE = (
        "import os\n"
        "from marshal_workers.childlink.forkserver import FORK_SERVER_PID\n"
        "from marshal_workers.childlink.schedgroup import GroupNice, session_group_nice\n\n"
        "def report(conn):\n"
        "    before = session_group_nice()\n"
        "    group = GroupNice(10, FORK_SERVER_PID)\n"
        "    while not group.settle():\n"
        "        pass\n"
        "    after = session_group_nice()\n"
        "    conn.send((os.getsid(0), FORK_SERVER_PID, before, after, group.error))\n"
    )
    PARENT = (
        "import os, sessionprobe\n"
        "from marshal_workers.childlink.forkserver import fork_server\n"
        "from marshal_workers.childlink.schedgroup import session_group_nice\n"
        "if __name__ == '__main__':\n"
        "    mine_before = session_group_nice()\n"
        "    ctx = fork_server()\n"
        "    mine, theirs = ctx.Pipe()\n"
        "    p = ctx.Process(target=sessionprobe.report, args=(theirs,))\n"
        "    p.start()\n"
        "    theirs.close()\n"
        "    if not mine.poll(30):\n"
        "        raise SystemExit(f'no report; the child exited {p.exitcode}')\n"
        "    got = mine.recv()\n"
        "    print(repr((*got, os.getsid(0), mine_before, session_group_nice())))\n"
        "    p.join(30)\n"
    )

    def test_the_children_share_a_session_of_their_own_lowered_as_they_are(
        self, tmp_path: Path
    ) -> None:
        """A child of the fork server is in the fork server's session, not the supervisor's; a
        child that settles gives that session's autogroup its nice, and the supervisor's keeps
        its own (here the test's parent process plays the supervisor)."""
        (tmp_path / "sessionprobe.py").write_text(self.PROBE)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
        done = subprocess.run(
            [sys.executable, "-c", self.PARENT],
            capture_output=True, text=True, env=env, check=True, timeout=90,
        )  # fmt: skip
        report = eval(done.stdout)
        session, server, before, after, error, parent_session, parent_was, parent_is = report
        assert server is not None, done.stdout
        if not HAS_AUTOGROUP:  # nothing to gain: the fork server stays in the parent's session
            assert session == parent_session != server, done.stdout
            assert (before, after, error) == (None, None, None), done.stdout
            return
        assert session == server != parent_session, done.stdout
        assert error is None, done.stdout
        assert (before, after) == (0, 10), done.stdout  # a new session's group starts at 0
        assert parent_is == parent_was, done.stdout  # the supervisor's group: as it was
