"""sd_notify: datagrams on a real unix socket (a path and the abstract namespace), and what the
supervisor's observer sends when (READY, WATCHDOG only while healthy, STATUS throttled,
RELOADING/READY, STOPPING)."""

from __future__ import annotations

import os
import socket
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from marshal_workers.protocol.members import member_key
from marshal_workers.protocol.wire import ClaimKey
from marshal_workers.supervisor.observe import ClaimSnapshot
from marshal_workers.supervisor.systemd import (
    Notifier,
    SystemdNotify,
    claims_status,
    watchdog_interval,
)


class Listener:
    """A bound datagram socket standing in for systemd's notify socket."""

    def __init__(self, sock: socket.socket, address: str) -> None:
        self.sock = sock
        self.address = address  # as NOTIFY_SOCKET spells it

    def messages(self) -> list[dict[str, str]]:
        """Every datagram received so far, each as its KEY=VALUE lines."""
        out = []
        while True:
            try:
                data = self.sock.recv(4096)
            except BlockingIOError:
                return out
            out.append(dict(line.split("=", 1) for line in data.decode().splitlines()))


@pytest.fixture
def listener() -> Iterator[Listener]:
    """A notify socket at a short path (unix socket paths are limited to 108 bytes)."""
    with tempfile.TemporaryDirectory(prefix="sdn") as directory:
        path = str(Path(directory) / "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.setblocking(False)
        try:
            yield Listener(sock, path)
        finally:
            sock.close()


@pytest.fixture
def abstract_listener() -> Iterator[Listener]:
    """A notify socket in the abstract namespace (NOTIFY_SOCKET=@name)."""
    name = f"marshal-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.setblocking(False)
    try:
        yield Listener(sock, "@" + name)
    finally:
        sock.close()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def snap(
    topic: str, partition: int, lease: float | None = 1.5, phase: str = "running"
) -> ClaimSnapshot:
    return ClaimSnapshot(ClaimKey("g", topic, partition), 7, 0, lease, 4242, phase)


def claims(*snaps: ClaimSnapshot) -> dict[ClaimKey, ClaimSnapshot]:
    return {s.key: s for s in snaps}


class TestNotifier:
    def test_sends_one_datagram_of_lines_to_a_path(self, listener: Listener) -> None:
        """KEY=VALUE lines arrive as one datagram on a socket bound at a path."""
        notifier = Notifier(listener.address)
        assert notifier.send("READY=1", "STATUS=up")
        assert listener.messages() == [{"READY": "1", "STATUS": "up"}]
        notifier.close()

    def test_at_sign_means_the_abstract_namespace(self, abstract_listener: Listener) -> None:
        """NOTIFY_SOCKET=@name reaches a socket bound in the abstract namespace."""
        notifier = Notifier(abstract_listener.address)
        assert notifier.send("WATCHDOG=1")
        assert abstract_listener.messages() == [{"WATCHDOG": "1"}]
        notifier.close()

    def test_a_missing_listener_is_reported_not_raised(self, tmp_path: Path) -> None:
        """A send to a socket nobody listens on returns False and does not raise."""
        notifier = Notifier(str(tmp_path / "nobody"))
        assert not notifier.send("READY=1")
        notifier.close()

    def test_refuses_addresses_it_cannot_use(self) -> None:
        """Neither a path nor @name: refused (vsock and friends are not supported)."""
        with pytest.raises(ValueError, match="unsupported"):
            Notifier("vsock:2:1234")


class TestEnvironment:
    def test_no_notify_socket_means_no_observer(self) -> None:
        """Without NOTIFY_SOCKET nothing is built, and the watchdog variables are removed."""
        env = {"WATCHDOG_USEC": "1000000", "PATH": "/bin"}
        assert SystemdNotify.from_environment(env) is None
        assert env == {"PATH": "/bin"}

    def test_takes_the_variables_out_so_children_cannot_notify(self, listener: Listener) -> None:
        """NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID leave the environment children get."""
        env = {
            "NOTIFY_SOCKET": listener.address,
            "WATCHDOG_USEC": "4000000",
            "WATCHDOG_PID": str(os.getpid()),
            "PATH": "/bin",
        }
        notify = SystemdNotify.from_environment(env)
        assert notify is not None
        assert notify.watchdog_s == 2.0
        assert env == {"PATH": "/bin"}
        notify.notifier.close()

    def test_watchdog_interval_is_half_of_watchdog_usec_for_this_pid_only(self) -> None:
        """Half of WATCHDOG_USEC; None when unset, invalid, zero, or meant for another pid."""
        assert watchdog_interval({"WATCHDOG_USEC": "30000000"}, 10) == 15.0
        assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "10"}, 10) == 15.0
        assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "11"}, 10) is None
        assert watchdog_interval({"WATCHDOG_USEC": "soon"}, 10) is None
        assert watchdog_interval({"WATCHDOG_USEC": "0"}, 10) is None
        assert watchdog_interval({}, 10) is None


class TestObserver:
    def make(
        self, listener: Listener, watchdog_s: float | None = 1.0
    ) -> tuple[SystemdNotify, Clock]:
        clock = Clock()
        return SystemdNotify(Notifier(listener.address), watchdog_s, clock, 3.0), clock

    def test_ready_when_the_claim_loop_runs(self, listener: Listener) -> None:
        """ready() sends READY=1."""
        notify, _ = self.make(listener)
        notify.ready()
        assert listener.messages()[0]["READY"] == "1"

    def test_watchdog_every_half_period_only_while_healthy(self, listener: Listener) -> None:
        """WATCHDOG=1 at most every watchdog_s while healthy; none while unhealthy."""
        notify, clock = self.make(listener, watchdog_s=1.0)
        pings = []
        for step in range(40):  # 4 s of loop turns every 0.1 s; unhealthy from 2 s to 3 s
            clock.now = 100.0 + step * 0.1
            notify.tick({}, healthy=not 20 <= step < 30)
            if any("WATCHDOG" in m for m in listener.messages()):
                pings.append(round(clock.now - 100.0, 1))
        assert pings == [0.0, 1.0, 3.0]

    def test_no_watchdog_when_systemd_did_not_ask(self, listener: Listener) -> None:
        """Without WATCHDOG_USEC, ticks send STATUS only."""
        notify, _ = self.make(listener, watchdog_s=None)
        notify.tick({}, healthy=True)
        assert [set(m) for m in listener.messages()] == [{"STATUS"}]

    def test_status_lists_claims_at_most_every_few_seconds(self, listener: Listener) -> None:
        """STATUS= carries the claims, and is sent again only after the status interval."""
        notify, clock = self.make(listener, watchdog_s=None)
        held = claims(snap("orders", 3, 2.0), snap("orders", 0, 1.23))
        notify.tick(held, healthy=True)
        clock.now += 1.0
        notify.tick(held, healthy=True)
        clock.now += 2.5
        notify.tick(held, healthy=True)
        statuses = [m["STATUS"] for m in listener.messages()]
        assert statuses == ["2 claims: orders/0,orders/3; lease min 1.2s"] * 2

    def test_reload_sends_reloading_then_ready(self, listener: Listener) -> None:
        """RELOADING=1 with MONOTONIC_USEC on a reload, READY=1 once it is done."""
        notify, _ = self.make(listener)
        notify.reloading()
        notify.reloaded()
        first, second = listener.messages()
        assert first["RELOADING"] == "1" and int(first["MONOTONIC_USEC"]) > 0
        assert second == {"READY": "1"}

    def test_stopping(self, listener: Listener) -> None:
        """stopping() sends STOPPING=1, and later statuses say stopping."""
        notify, clock = self.make(listener, watchdog_s=None)
        notify.stopping()
        clock.now += 5
        notify.tick(claims(snap("orders", 1)), healthy=True)
        first, second = listener.messages()
        assert first["STOPPING"] == "1"
        assert second["STATUS"].startswith("stopping: 1 claim: orders/1")

    def test_a_dormant_member_says_so_at_once_and_its_claims_again_once_resumed(
        self, listener: Listener
    ) -> None:
        """Replaced by another instance of its client id, the status line says dormant and
        names that instance at the next tick (not after the status interval); resumed, it
        lists the claims again at the next tick."""
        notify, clock = self.make(listener, watchdog_s=None)
        notify.tick({}, healthy=True)
        clock.now += 0.5
        notify.dormant("inst-2")
        notify.tick({}, healthy=True)
        clock.now += 0.5
        notify.resumed()
        notify.tick(claims(snap("orders", 1)), healthy=True)
        statuses = [m["STATUS"] for m in listener.messages()]
        assert statuses[0] == "0 claims"
        assert statuses[1].startswith("dormant: instance inst-2 of this client id")
        assert statuses[2].startswith("1 claim: orders/1")


class TestStatusLine:
    def test_member_claims_are_not_listed(self) -> None:
        """The member claim is bookkeeping, not work: it is left out."""
        member = member_key("g", "c1")
        held = claims(snap("orders", 1))
        held[member] = ClaimSnapshot(member, 1, 0, 1.0, None, "running")
        assert claims_status(held) == "1 claim: orders/1; lease min 1.5s"

    def test_long_lists_are_cut_and_reloads_counted(self) -> None:
        """At most eight partitions are named; reloading claims are counted."""
        held = claims(*(snap("t", p, phase="reloading" if p < 2 else "running") for p in range(10)))
        assert claims_status(held) == (
            "10 claims: t/0,t/1,t/2,t/3,t/4,t/5,t/6,t/7,+2 more; lease min 1.5s; reloading 2"
        )

    def test_claims_without_a_lease_are_listed_but_not_timed(self) -> None:
        """A revoked lease (fast stop) or a lost claim has no lease left to show: only the
        others count for the shortest lease, and with none left the lease is not named."""
        held = claims(snap("orders", 1, lease=None, phase="lost"), snap("orders", 2, lease=2.5))
        assert claims_status(held) == "2 claims: orders/1,orders/2; lease min 2.5s"
        revoked = claims(snap("orders", 1, lease=None), snap("orders", 2, lease=None))
        assert claims_status(revoked, stopping=True) == "stopping: 2 claims: orders/1,orders/2"

    def test_no_claims(self) -> None:
        """Nothing held yet."""
        assert claims_status({}) == "0 claims"
