"""Bytes the broker sent each system's processes during a run of `bench/hot.py`.

Sampled from the kernel, so every system is measured the same way and none is instrumented:
``ss`` reports, for every TCP socket to the broker's port, the bytes received on it and the
process that owns it. A socket's last figure counts (a process that ends takes its sockets
with it, so the run samples about once a second and just before it stops the members). The
processes are split in two: the workers (every process of a share group or the plain loop;
marshal-run's children) and marshal-run's supervisors, whose sockets read the coordination
topic and the data topic's metadata. Divided by the records handled, the workers' figure is
the broker's bytes out per handled record; against the plain loop (one read of the
partition) it says how many times the partition was read.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field

import psutil

_PID = re.compile(r"pid=(\d+)")
_RECEIVED = re.compile(r"bytes_received:(\d+)")
SS_TIMEOUT_S = 5.0


def sockets_to(port: int) -> dict[tuple[int, str], int]:
    """Bytes received on each established TCP socket whose peer is ``port`` on loopback, by
    (owning pid, local address)."""
    try:
        out = subprocess.run(
            ["ss", "-tinpH", "state", "established", "dport", "=", f":{port}"],
            capture_output=True,
            text=True,
            timeout=SS_TIMEOUT_S,
            check=False,
        ).stdout
    except subprocess.TimeoutExpired:  # a loaded machine: this sample is missed, not the run
        return {}
    found: dict[tuple[int, str], int] = {}
    lines = out.splitlines()
    for head, info in zip(lines[::2], lines[1::2], strict=False):
        pid, received = _PID.search(head), _RECEIVED.search(info)
        fields = head.split()
        if pid is None or len(fields) < 4:
            continue
        found[(int(pid.group(1)), fields[2])] = int(received.group(1)) if received else 0
    return found


@dataclass
class BrokerBytes:
    """Samples of one run: ``roots`` are the members' pids; ``supervised`` says whether the
    roots are marshal-run supervisors (their own sockets then count apart)."""

    port: int
    roots: list[int]
    supervised: bool
    seen: dict[tuple[int, str], int] = field(default_factory=dict)
    tree: set[int] = field(default_factory=set)

    def sample(self) -> None:
        """Note every process of the run and the bytes each socket to the broker has had."""
        for pid in self.roots:
            self.tree.add(pid)
            try:
                self.tree.update(c.pid for c in psutil.Process(pid).children(recursive=True))
            except psutil.Error:
                continue
        for (pid, local), received in sockets_to(self.port).items():
            if pid in self.tree:
                key = (pid, local)
                self.seen[key] = max(self.seen.get(key, 0), received)

    def figures(self, handled: int) -> dict[str, float]:
        """Bytes the workers and the supervisors received, in all and per handled record."""
        roots = set(self.roots) if self.supervised else set()
        workers = sum(b for (pid, _), b in self.seen.items() if pid not in roots)
        supervisors = sum(b for (pid, _), b in self.seen.items() if pid in roots)
        per = max(handled, 1)
        return {
            "worker_bytes": workers,
            "worker_bytes_per_record": workers / per,
            "supervisor_bytes_per_record": supervisors / per,
        }
