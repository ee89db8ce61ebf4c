"""Which threads of a process may take a signal (Linux: each thread's blocked mask in /proc)."""

from __future__ import annotations

from pathlib import Path


def threads_taking(pid: int, signum: int) -> list[int]:
    """The threads of process ``pid`` that do not block ``signum`` (their ``SigBlk``)."""
    takers = []
    for task in sorted(Path(f"/proc/{pid}/task").iterdir(), key=lambda t: int(t.name)):
        status = (task / "status").read_text()
        [blocked] = [line.split()[1] for line in status.splitlines() if line.startswith("SigBlk:")]
        if not int(blocked, 16) >> (signum - 1) & 1:
            takers.append(int(task.name))
    return takers
