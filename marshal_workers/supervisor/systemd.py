"""systemd integration: the sd_notify protocol, spoken by an `Observer` of the supervisor.

Under ``Type=notify`` systemd passes ``$NOTIFY_SOCKET`` (a unix datagram socket; a leading
``@`` names one in the abstract namespace) and, with ``WatchdogSec=``, ``$WATCHDOG_USEC``. A
datagram of newline-separated ``KEY=VALUE`` lines reports the service's state. No library is
needed: `Notifier` is a socket and ``sendto``.

`SystemdNotify` sends:

- ``READY=1`` on `ready()`: the coordination log is caught up and the claim loop runs;
- ``WATCHDOG=1`` from `tick()`, every half ``$WATCHDOG_USEC``, and only while the loop calls
  it with ``healthy`` true: a loop that hangs or keeps failing its leases stops the pings, and
  systemd ends the service (``WatchdogSignal=``, SIGABRT by default: faulthandler then prints
  every thread's stack) and restarts it;
- ``STATUS=`` a one-line summary of the claims, at most every `STATUS_INTERVAL_S`;
- ``RELOADING=1`` (with ``MONOTONIC_USEC``) on SIGHUP and ``READY=1`` once every child has
  been replaced; ``STOPPING=1`` when the supervisor begins to stop.

`from_environment` reads the variables once and removes ``NOTIFY_SOCKET`` and the watchdog
variables from the environment, so children (and whatever handlers start) never notify; the
unit's ``NotifyAccess=main`` refuses them anyway. Without ``$NOTIFY_SOCKET`` nothing is sent.
A failed send is logged once and never raised: systemd's absence must not stop the work.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping, MutableMapping

import structlog

from marshal_workers.protocol.members import is_member_key
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.supervisor.launch import NOTIFY_ENV
from marshal_workers.supervisor.observe import ClaimSnapshot, Observer

STATUS_INTERVAL_S = 3.0
STATUS_MAX_LISTED = 8

Clock = Callable[[], float]


class Notifier:
    """Sends sd_notify datagrams to one socket (``@name``: the abstract namespace)."""

    def __init__(self, address: str) -> None:
        if not address or not (address.startswith(("/", "@"))):
            raise ValueError(f"unsupported NOTIFY_SOCKET {address!r}: want a path or @name")
        self.address = "\0" + address[1:] if address.startswith("@") else address
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._sock.setblocking(False)
        self._warned = False

    def send(self, *assignments: str) -> bool:
        """Send ``KEY=VALUE`` lines as one datagram; False (logged once) if it failed."""
        try:
            self._sock.sendto("\n".join(assignments).encode(), self.address)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                structlog.get_logger().warning("sd_notify_failed", error=str(exc))
            return False
        return True

    def close(self) -> None:
        """Close the socket."""
        self._sock.close()


def watchdog_interval(environ: Mapping[str, str], pid: int) -> float | None:
    """Seconds between watchdog pings (half of ``$WATCHDOG_USEC``), or None if it is not for
    this process (unset, invalid, or ``$WATCHDOG_PID`` names another process)."""
    owner = environ.get("WATCHDOG_PID")
    if owner and owner != str(pid):
        return None
    try:
        usec = int(environ.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    return usec / 2e6 if usec > 0 else None


def claims_status(claims: Mapping[ClaimKey, ClaimSnapshot], stopping: bool = False) -> str:
    """One line for systemctl status: the data claims held and the shortest lease left (of
    those that have one: not lost, not revoked)."""
    held = sorted(
        (s for k, s in claims.items() if not is_member_key(k)),
        key=lambda s: (s.key.topic, s.key.partition),
    )
    prefix = "stopping: " if stopping else ""
    if not held:
        return f"{prefix}0 claims"
    names = [f"{s.key.topic}/{s.key.partition}" for s in held[:STATUS_MAX_LISTED]]
    if len(held) > STATUS_MAX_LISTED:
        names.append(f"+{len(held) - STATUS_MAX_LISTED} more")
    leases = [s.lease_remaining for s in held if s.lease_remaining is not None]
    shortest = f"; lease min {min(leases):.1f}s" if leases else ""
    reloading = sum(1 for s in held if s.phase == "reloading")
    extra = f"; reloading {reloading}" if reloading else ""
    noun = "claim" if len(held) == 1 else "claims"
    return f"{prefix}{len(held)} {noun}: {','.join(names)}{shortest}{extra}"


class SystemdNotify(Observer):
    """Tells systemd the supervisor's state (see the module docstring)."""

    def __init__(
        self,
        notifier: Notifier,
        watchdog_s: float | None = None,
        clock: Clock = time.monotonic,
        status_interval_s: float = STATUS_INTERVAL_S,
    ) -> None:
        self.notifier = notifier
        self.watchdog_s = watchdog_s
        self.clock = clock
        self.status_interval_s = status_interval_s
        self._next_watchdog = 0.0
        self._next_status = 0.0
        self._stopping = False
        self._replacer: str | None = None

    @classmethod
    def from_environment(
        cls, environ: MutableMapping[str, str] | None = None, clock: Clock = time.monotonic
    ) -> SystemdNotify | None:
        """The observer for ``$NOTIFY_SOCKET`` (None if unset), taking the variables out of
        ``environ`` (default: this process's) so that children do not inherit them."""
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        watchdog_s = watchdog_interval(env, os.getpid())
        for name in NOTIFY_ENV:
            env.pop(name, None)
        if not address:
            return None
        try:
            notifier = Notifier(address)
        except ValueError as exc:
            structlog.get_logger().warning("systemd_notify_disabled", reason=str(exc))
            return None
        return cls(notifier, watchdog_s, clock)

    def ready(self) -> None:
        self.notifier.send("READY=1", "STATUS=caught up; claiming")

    def tick(self, claims: Mapping[ClaimKey, ClaimSnapshot], healthy: bool) -> None:
        now = self.clock()
        if self.watchdog_s is not None and healthy and now >= self._next_watchdog:
            self._next_watchdog = now + self.watchdog_s
            self.notifier.send("WATCHDOG=1")
        if now >= self._next_status:
            self._next_status = now + self.status_interval_s
            self.notifier.send(f"STATUS={self._status(claims)}")

    def _status(self, claims: Mapping[ClaimKey, ClaimSnapshot]) -> str:
        if self._replacer is not None and not self._stopping:
            return (
                f"dormant: instance {self._replacer} of this client id took its place; "
                "claiming again once that one falls silent"
            )
        return claims_status(claims, self._stopping)

    def dormant(self, instance: str) -> None:
        self._replacer = instance
        self._next_status = 0.0

    def resumed(self) -> None:
        self._replacer = None
        self._next_status = 0.0

    def reloading(self) -> None:
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.notifier.send("RELOADING=1", f"MONOTONIC_USEC={usec}", "STATUS=reloading children")

    def reloaded(self) -> None:
        self._next_status = 0.0
        self.notifier.send("READY=1")

    def stopping(self) -> None:
        self._stopping = True
        self._next_status = 0.0
        self.notifier.send("STOPPING=1", "STATUS=stopping: children finish their batch")
