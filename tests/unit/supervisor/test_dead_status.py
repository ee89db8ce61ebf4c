"""A child is taken for ended once the kernel shows it dead, whatever its stopped parent (the
fork server) reports (`childprocess.dead_status`, `ChildHandle.exitcode`)."""

from __future__ import annotations

import signal
from pathlib import Path

from marshal_workers.supervisor.childprocess import ChildHandle, dead_status

REST = " 1 1 1 0 -1 4194560" + " 0" * 42  # fields 4-51 of /proc/PID/stat, as the kernel has


def stat(proc: Path, pid: int, state: str, status: int) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "stat").write_text(f"{pid} (marshal (child)) {state}{REST} {status}\n")


def test_a_zombie_gives_the_status_the_kernel_keeps(tmp_path: Path) -> None:
    stat(tmp_path, 10, "Z", 0)  # exit 0
    stat(tmp_path, 11, "Z", 3 << 8)  # exit 3
    stat(tmp_path, 12, "Z", signal.SIGKILL)  # killed
    assert dead_status(10, str(tmp_path)) == 0
    assert dead_status(11, str(tmp_path)) == 3
    assert dead_status(12, str(tmp_path)) == -signal.SIGKILL


def test_a_living_process_is_none_and_a_gone_one_killed(tmp_path: Path) -> None:
    stat(tmp_path, 20, "S", 0)
    stat(tmp_path, 21, "T", 0)  # stopped, not dead
    assert dead_status(20, str(tmp_path)) is None
    assert dead_status(21, str(tmp_path)) is None
    assert dead_status(22, str(tmp_path)) == -signal.SIGKILL


def test_a_handle_waits_on_its_process_exit_fd() -> None:
    """`ChildHandle.sentinel` is the process's own (what the supervisor's loop waits on)."""

    class Started:
        pid = 12345
        sentinel = 7

    handle = ChildHandle(Started(), object())  # type: ignore[arg-type]
    assert handle.sentinel == 7
