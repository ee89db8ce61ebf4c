"""The child's watchdog, run in the test's thread with a fake exit (no broker, no child)."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar, NoReturn

import pytest
from hypothesis import given
from hypothesis import strategies as st

from marshal_workers.child.fencing import (
    REASON_LEASE_EXPIRED,
    REASON_PARENT_GONE,
    FirstFence,
    Watchdog,
    fence_on_resume,
)
from marshal_workers.childlink.callstate import WATCHDOG_TICK_S, watchdog_tick
from marshal_workers.childlink.sharedlease import SharedLease
from marshal_workers.common import leaseclock
from tests.threadmasks import threads_taking
from tests.unit.child import stopped_fencer

MP = multiprocessing.get_context("spawn")
SLACK_S = 0.5 + WATCHDOG_TICK_S  # how late a deadline's fence may come on a busy host


class FencedError(Exception):
    """What the fake fence raises instead of ending the process."""


def watch(lease: SharedLease, parent_pid: int | None = None) -> tuple[str, float]:
    """Run a watchdog over ``lease`` until it fences; why and when (on the lease clock)."""
    calls: list[tuple[str, float]] = []

    def fence(reason: str) -> NoReturn:
        calls.append((reason, leaseclock.now()))
        raise FencedError

    dog = Watchdog(lease, os.getppid() if parent_pid is None else parent_pid, fence)
    with pytest.raises(FencedError):
        dog.run()
    [call] = calls
    return call


class TestLeaseDeadline:
    def test_fences_at_the_deadline_not_before(self) -> None:
        """The fence comes at the deadline (within the slack), never before it."""
        lease = SharedLease(MP)
        lease.extend_to(leaseclock.now() + 0.3)
        reason, at = watch(lease)
        assert reason == REASON_LEASE_EXPIRED
        assert lease.deadline <= at < lease.deadline + SLACK_S

    def test_follows_extensions(self) -> None:
        """Extensions written while it runs move the fence to the last deadline."""
        lease = SharedLease(MP)
        lease.extend_to(leaseclock.now() + 1.0)
        until = leaseclock.now() + 0.6

        def heartbeats() -> None:  # each extension outlasts a scheduling stall under load
            while leaseclock.now() < until:
                lease.extend_to(leaseclock.now() + 1.0)
                time.sleep(0.05)

        supervisor = threading.Thread(target=heartbeats)
        supervisor.start()
        _, at = watch(lease)
        supervisor.join()
        assert at >= lease.deadline >= until

    def test_revoke_fences_promptly(self) -> None:
        """A revoked lease (deadline 0) is fenced within a tick or so (no handler timeout: the
        longest tick; the supervisor's kill of the group comes with a revoke)."""
        lease = SharedLease(MP)
        lease.extend_to(leaseclock.now() + 60)
        revoked_at: list[float] = []

        def revoke() -> None:
            revoked_at.append(leaseclock.now())
            lease.revoke()

        revoker = threading.Timer(0.2, revoke)
        revoker.start()
        reason, at = watch(lease)
        revoker.join()
        assert reason == REASON_LEASE_EXPIRED
        assert 0 <= at - revoked_at[0] < 0.5 + watchdog_tick(None)


class TestResume:
    """SIGCONT after a stop: the lease is looked at in the main thread, before the code it
    interrupted runs on (a call in progress when the process was stopped past its lease must
    not finish)."""

    @pytest.fixture(autouse=True)
    def default_sigcont(self) -> Iterator[None]:
        signal.signal(signal.SIGCONT, signal.SIG_DFL)
        yield
        signal.signal(signal.SIGCONT, signal.SIG_DFL)

    @staticmethod
    def fence(calls: list[str]) -> Callable[[str], NoReturn]:
        def fence(reason: str) -> NoReturn:
            calls.append(reason)
            raise FencedError

        return fence

    @staticmethod
    def work_after_continue(turns: list[int]) -> int:
        """Send this process SIGCONT, then count 100,000 turns of pure Python in ``turns``."""
        turns.append(0)
        os.kill(os.getpid(), signal.SIGCONT)
        for _ in range(100_000):
            turns[0] += 1
        return turns[0]

    @pytest.mark.parametrize("deadline", ["passed", "revoked"])
    def test_a_continue_past_the_lease_fences_before_the_call_goes_on(self, deadline: str) -> None:
        lease = SharedLease(MP)
        if deadline == "passed":
            lease.extend_to(leaseclock.now() - 0.001)
        else:
            lease.extend_to(leaseclock.now() + 60)
            lease.revoke()
        calls: list[str] = []
        assert fence_on_resume(lease, self.fence(calls))
        turns: list[int] = []
        with pytest.raises(FencedError):
            self.work_after_continue(turns)
        assert calls == [REASON_LEASE_EXPIRED]
        assert turns[0] < 1_000, "the work went on after the continue"

    def test_a_continue_within_the_lease_goes_on(self) -> None:
        lease = SharedLease(MP)
        lease.extend_to(leaseclock.now() + 60)
        calls: list[str] = []
        assert fence_on_resume(lease, self.fence(calls))
        assert self.work_after_continue([]) == 100_000
        assert calls == []

    def test_a_continue_within_the_lease_restarts_an_interrupted_system_call(self) -> None:
        """SA_RESTART: a blocking read that SIGCONT interrupts goes on (C code that does not
        retry on EINTR must not see a stop and continue within the lease; a review)."""
        lease = SharedLease(MP)
        lease.extend_to(leaseclock.now() + 60)
        assert fence_on_resume(lease, self.fence([]))
        libc = ctypes.CDLL(None, use_errno=True)
        read_end, write_end = os.pipe()
        try:
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGCONT)).start()
            threading.Timer(0.5, os.write, (write_end, b"x")).start()
            buf = ctypes.create_string_buffer(1)
            got = libc.read(read_end, buf, 1)  # blocks in C; Python does not retry it
            assert got == 1, f"read returned {got}, errno {ctypes.get_errno()}"
        finally:
            os.close(read_end)
            os.close(write_end)

    def test_a_process_the_handler_forked_does_not_fence(self) -> None:
        """The handler is inherited by a fork; only the child that set it fences."""
        lease = SharedLease(MP)
        lease.extend_to(leaseclock.now() - 1)
        assert fence_on_resume(lease, self.fence([]))
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the forked process)
            try:
                os.kill(os.getpid(), signal.SIGCONT)
                for _ in range(100_000):
                    pass
            except FencedError:
                os._exit(5)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0

    def test_a_sigcont_blocked_in_the_main_thread_is_unblocked(self) -> None:
        """A mask inherited with SIGCONT blocked would leave the signal to other threads."""
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCONT})
        try:
            lease = SharedLease(MP)
            lease.extend_to(leaseclock.now() + 60)
            assert fence_on_resume(lease, self.fence([]))
            assert signal.SIGCONT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCONT})

    def test_a_plugins_own_sigcont_handler_stays(self) -> None:
        def plugins(signum: int, frame: object) -> None:
            pass

        signal.signal(signal.SIGCONT, plugins)
        lease = SharedLease(MP)
        lease.extend_to(leaseclock.now() - 1)
        assert not fence_on_resume(lease, self.fence([]))
        assert signal.getsignal(signal.SIGCONT) is plugins


class OneFence:
    """A `FirstFence` whose words, end and wait are recorded (the end raises `FencedError`)."""

    CODES: ClassVar[dict[str, int]] = {REASON_LEASE_EXPIRED: 31, REASON_PARENT_GONE: 32}

    def __init__(
        self,
        words: Callable[[OneFence, str, str], None] | None = None,
        waited: Callable[[], object] = lambda: None,
    ) -> None:
        self.written: list[tuple[str, str]] = []
        self.ends: list[int] = []
        self.waits: list[float] = []
        self.then, self.waited = words, waited
        self.fence = FirstFence(self.words, self.CODES.__getitem__, self.end, self.wait)

    def wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.waited()

    def words(self, reason: str, by: str, code: int) -> None:
        self.written.append((reason, by))
        if self.then is not None:
            self.then(self, reason, by)

    def end(self, code: int) -> NoReturn:
        self.ends.append(code)
        raise FencedError


class TestFirstFence:
    """The watchdog and the SIGCONT handler can both fence on one continue: the first decides."""

    def test_a_second_fencer_while_the_first_writes_neither_writes_nor_changes_the_code(
        self,
    ) -> None:
        """The SIGCONT handler fences and, while its words are written, the watchdog fences too:
        one line, the first's, and the process ends with the first's code, whoever ends it."""
        second_in = threading.Event()
        first_writing = threading.Event()

        def words(fence: OneFence, reason: str, by: str) -> None:
            if by == "resume":
                first_writing.set()
                second_in.wait(5)  # the helper thread's write, waited for, lets the other run

        fences = OneFence(words, waited=second_in.set)

        def watchdog() -> None:
            first_writing.wait(5)
            with contextlib.suppress(FencedError):
                fences.fence(REASON_PARENT_GONE, "watchdog")
            second_in.set()  # (it wrote instead of waiting: let the first go on)

        other = threading.Thread(target=watchdog)
        other.start()
        with pytest.raises(FencedError):
            fences.fence(REASON_LEASE_EXPIRED, "resume")
        other.join(5)
        assert fences.written == [(REASON_LEASE_EXPIRED, "resume")]
        assert sorted(fences.ends) == [31, 31]
        assert fences.waits == [0.5]

    def test_a_second_continue_during_the_first_ones_words_gives_them_time_and_ends(
        self,
    ) -> None:
        """A second SIGCONT's handler runs in the same thread while the first's words are
        written (a helper thread writes them): it neither writes nor returns, but gives the
        words their time before it ends the process with the first's code (a review: ended at
        once, it cut the line off)."""

        def words(fence: OneFence, reason: str, by: str) -> None:
            if len(fence.written) == 1:
                fence.fence(REASON_LEASE_EXPIRED, "resume")

        fences = OneFence(words)
        with pytest.raises(FencedError):
            fences.fence(REASON_LEASE_EXPIRED, "resume")
        assert fences.written == [(REASON_LEASE_EXPIRED, "resume")]
        assert fences.waits == [0.5]
        # the second call's end, after its wait; then the first's (the fake end raises and so
        # returns through the first call: os._exit would not)
        assert fences.ends == [31, 31]

    def test_a_second_fencers_wait_that_raises_still_ends_the_process(self) -> None:
        """The watchdog fenced first; the SIGCONT handler's wait is cut by another signal
        handler's exception: it must end the process, not go back to the handler's code (a
        review)."""
        first_writing, second_done = threading.Event(), threading.Event()
        outcome: list[str] = []

        def words(fence: OneFence, reason: str, by: str) -> None:
            first_writing.set()
            second_done.wait(5)

        def alarm() -> None:
            raise TimeoutError("a plugin's alarm")

        fences = OneFence(words, waited=alarm)

        def watchdog() -> None:
            with contextlib.suppress(FencedError):
                fences.fence(REASON_PARENT_GONE, "watchdog")

        first = threading.Thread(target=watchdog)
        first.start()
        first_writing.wait(5)
        try:
            fences.fence(REASON_LEASE_EXPIRED, "resume")
        except FencedError:
            outcome.append("ended")
        except TimeoutError:
            outcome.append("back in the handler's code")
        finally:
            second_done.set()
            first.join(5)
        assert outcome == ["ended"]
        assert fences.ends == [32, 32]

    def test_words_that_raise_still_end_the_process(self) -> None:
        """Another signal handler's exception raised while the words are written (a plugin's
        SIGALRM timeout) must not take the main thread back to the handler's code with the
        fence taken (a review: the handler ran on for the other fencer's whole wait)."""

        def words(fence: OneFence, reason: str, by: str) -> None:
            raise TimeoutError("a plugin's alarm")

        fences = OneFence(words)
        with pytest.raises(FencedError):
            fences.fence(REASON_LEASE_EXPIRED, "resume")
        assert fences.ends == [31]

    def test_a_lone_fencer_writes_and_ends_with_its_own_code(self) -> None:
        fences = OneFence()
        with pytest.raises(FencedError):
            fences.fence(REASON_PARENT_GONE, "watchdog")
        assert fences.written == [(REASON_PARENT_GONE, "watchdog")]
        assert fences.ends == [32]


class TestResumeInAProcess:
    """A process stopped past its lease and continued, its watchdog's thread asleep until the
    deadline meanwhile: the SIGCONT handler fences, not the watchdog after a switch interval.
    A signal sent to a process goes to whichever of its threads runs first on the continue, and
    CPython 3.11 runs the handler of one taken by another thread only once the main thread
    drops the GIL: with the watchdog's thread able to take it, the watchdog fenced 0.2 s later
    in most runs of a review's probe, the handler's code running meanwhile."""

    FENCER = Path(__file__).with_name("stopped_fencer.py")

    LEASE_S = 1.0  # the stops below come well within it, whatever the load

    def start(self) -> subprocess.Popen[bytes]:
        root = Path(__file__).parents[3]
        proc = subprocess.Popen(
            [sys.executable, str(self.FENCER), str(self.LEASE_S)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},  # this checkout's package
        )
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        return proc

    def test_only_the_main_thread_can_take_sigcont(self) -> None:
        """Which thread takes a continue is a race among those that do not block it: the
        runtime's threads (the watchdog's, the stack dumps', the priority timer's) block it,
        the main thread not."""
        proc = self.start()
        try:
            takers = threads_taking(proc.pid, signal.SIGCONT)
            threads = len(list(Path(f"/proc/{proc.pid}/task").iterdir()))
        finally:
            proc.kill()
            proc.wait()
        assert threads >= 4, "the watchdog's, the stack dumps' and the timer's threads"
        assert takers == [proc.pid]

    @pytest.mark.parametrize("stop_after_s", [0.02, 0.07, 0.12, 0.17, 0.22, 0.27])
    def test_the_main_threads_handler_fences(self, stop_after_s: float) -> None:
        proc = self.start()
        try:
            time.sleep(stop_after_s)
            proc.send_signal(signal.SIGSTOP)
            time.sleep(self.LEASE_S + 0.3 - stop_after_s)  # past the lease
            proc.send_signal(signal.SIGCONT)
            _, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
            proc.wait()
        assert proc.returncode == stopped_fencer.CODE, err
        assert err == b"fenced by=resume\n"


class TestParent:
    def test_another_parent_pid_fences_at_once(self) -> None:
        """If the process's parent is not the one that started it, it fences as parent gone."""
        lease = SharedLease(MP)
        lease.extend_to(leaseclock.now() + 60)
        reason, _ = watch(lease, parent_pid=os.getppid() + 1_000_000)
        assert reason == REASON_PARENT_GONE


class TestTick:
    """How often the watchdog looks: often enough for its handler timeout, seldom enough for a
    CPU-bound fleet."""

    def test_the_figures(self) -> None:
        assert watchdog_tick(None) == watchdog_tick(0.0) == 1.0
        assert watchdog_tick(300.0) == watchdog_tick(8.0) == 1.0
        assert watchdog_tick(4.0) == 0.5
        assert watchdog_tick(2.0) == watchdog_tick(0.25) == 0.25
        assert watchdog_tick(0.1) == 0.1
        assert watchdog_tick(0.01) == 0.05

    @given(st.floats(min_value=0.001, max_value=1e6, allow_nan=False))
    def test_a_call_is_seen_before_its_deadline_and_shown_slow_soon_after_its_half(
        self, timeout: float
    ) -> None:
        """A call begun just after a look is seen at the next, before its deadline (the tick
        is at most the timeout, unless that is below 50 ms); the supervisor's reading of a
        call's start is at most a tick old, an eighth of the timeout when that is 2 s or more,
        so a call is shown slow by five eighths of it; never more than a second between looks,
        never less than 50 ms."""
        tick = watchdog_tick(timeout)
        assert 0.05 <= tick <= 1.0
        assert tick <= max(timeout, 0.05)
        if timeout >= 2.0:
            assert tick <= timeout / 8
        assert watchdog_tick(timeout * 2) >= tick  # a longer timeout never looks more often
