"""Which threads of a process may take a signal (Linux: each thread's blocked mask in /proc)."""

from __future__ import annotations

from pathlib import Path

from marshal_workers.common.stacks import in_signal_mask


def threads_taking(pid: int, signum: int) -> list[int]:
    """The threads of process ``pid`` that do not block ``signum`` (their ``SigBlk``)."""
    tasks = sorted(Path(f"/proc/{pid}/task").iterdir(), key=lambda t: int(t.name))
    return [int(t.name) for t in tasks if not in_signal_mask(t / "status", "SigBlk", signum)]
