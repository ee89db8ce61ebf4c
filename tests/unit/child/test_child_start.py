"""How a child is started and configured: its consumer's prefetch bounds, the parent it
watches, multiprocessing told not to re-run the parent's main script, and the fork server's
imports frozen before it forks."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from dataclasses import replace
from importlib.machinery import ModuleSpec
from pathlib import Path

import psutil
import pytest

from marshal_workers.child import consumer as consumer_module
from marshal_workers.child.consumer import (
    FETCH_PARTITION_BYTES,
    PREFETCH_BATCHES,
    PREFETCH_KBYTES,
    Prepared,
    consumer_config,
    open_consumer,
)
from marshal_workers.child.fencing import parent_to_watch
from marshal_workers.childlink.forkserver import SERVER_OF_ENV
from marshal_workers.ipc.messages import ChildSpec
from marshal_workers.protocol.modes import Mode
from marshal_workers.supervisor.childprocess import main_not_rerun

REPO = Path(__file__).resolve().parents[3]


def spec(**kafka: str) -> ChildSpec:
    return ChildSpec(
        handler="marshal_workers.plugins.ledger:handle",
        mode=Mode.ALO,
        bootstrap_servers="127.0.0.1:9",
        group_id="g",
        client_id="c",
        instance_id="c-1",
        topic="t",
        partition=3,
        start_offset=0,
        fencing_token=1,
        batch_size=200,
        kafka_config=tuple(kafka.items()),
    )


class TestConsumerConfig:
    def test_prefetch_is_bounded_to_a_few_batches(self) -> None:
        """librdkafka's defaults would queue 100,000 messages or 64 MB for the one partition."""
        config = consumer_config(spec())
        assert config["queued.min.messages"] == PREFETCH_BATCHES * 200
        assert config["queued.max.messages.kbytes"] == PREFETCH_KBYTES
        assert config["max.partition.fetch.bytes"] == FETCH_PARTITION_BYTES

    def test_small_batches_still_prefetch_a_thousand_records(self) -> None:
        config = consumer_config(replace(spec(), batch_size=1))
        assert config["queued.min.messages"] == 1000

    def test_the_operators_kafka_settings_win_but_commits_stay_off(self) -> None:
        config = consumer_config(
            spec(**{"queued.min.messages": "50000", "enable.auto.commit": "true"})
        )
        assert config["queued.min.messages"] == "50000"
        assert config["enable.auto.commit"] is False
        assert config["client.id"] == "c-t-3"

    def test_the_operators_fetch_back_off_wins(self) -> None:
        """A [kafka] table that sets fetch.queue.backoff.ms gets its own value."""
        assert consumer_config(spec())["fetch.queue.backoff.ms"] != "25"
        config = consumer_config(spec(**{"fetch.queue.backoff.ms": "25"}))
        assert config["fetch.queue.backoff.ms"] == "25"


class TestPreparedConsumer:
    """A spare's consumer, made before its claim from the member's template (its topic and
    partition unknown); no broker: the clients are made and assigned, never asked anything
    (``127.0.0.1:9``), and the specs give their start offset."""

    def template(self) -> ChildSpec:
        return replace(spec(), topic="", partition=0, start_offset=None)

    def test_it_differs_from_the_claim_s_consumer_in_its_client_id_alone(self) -> None:
        prepared = consumer_config(self.template(), spare=True)
        claims = consumer_config(spec())
        assert prepared.pop("client.id") == "c-spare"
        assert claims.pop("client.id") == "c-t-3"
        assert prepared == claims

    def test_a_claim_that_fits_is_assigned_the_prepared_consumer(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """It is assigned the claim's partition, and asks for the topic's metadata at once
        (`learn_leader`: else it waited up to a second for librdkafka's next scan)."""
        looked_up: list[str] = []
        monkeypatch.setattr(
            consumer_module, "learn_leader", lambda c, topic: looked_up.append(topic)
        )
        prepared = Prepared(self.template())
        try:
            assert prepared.consumer.assignment() == []  # nothing read before the claim
            consumer, position = open_consumer(spec(), prepared)
            assert consumer is prepared.consumer and position == 0
            assert [(tp.topic, tp.partition) for tp in consumer.assignment()] == [("t", 3)]
            assert looked_up == ["t"]
        finally:
            prepared.consumer.close()

    @pytest.mark.parametrize(
        "other",
        [
            {"group_id": "another"},
            {"batch_size": 10},
            {"kafka_config": (("fetch.wait.max.ms", "7"),)},
        ],
    )
    def test_a_claim_that_asks_for_another_configuration_gets_its_own(
        self, other: dict[str, object], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        looked_up: list[str] = []
        monkeypatch.setattr(
            consumer_module, "learn_leader", lambda c, topic: looked_up.append(topic)
        )
        prepared = Prepared(self.template())
        claim = replace(spec(), **other)  # type: ignore[arg-type]
        assert not prepared.fits(claim)
        consumer, _ = open_consumer(claim, prepared)
        try:
            assert consumer is not prepared.consumer and looked_up == []
            with pytest.raises(RuntimeError):  # closed
                prepared.consumer.assignment()
        finally:
            consumer.close()


class TestParentToWatch:
    def test_a_spawned_child_watches_the_supervisor_itself(self) -> None:
        assert parent_to_watch(os.getppid()) == os.getppid()

    def test_a_forked_child_watches_the_fork_server_between_it_and_the_supervisor(self) -> None:
        """Here the test process plays the fork server, and its parent the supervisor."""
        script = (
            "import os, sys\n"
            "from marshal_workers.child.fencing import parent_to_watch\n"
            "print(parent_to_watch(int(sys.argv[1])))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script, str(os.getppid())],
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stdout.strip() == str(os.getpid())

    def test_a_child_of_another_process_is_orphaned(self) -> None:
        """Neither the parent nor the grandparent is the supervisor: the chain is broken."""
        assert parent_to_watch(os.getpid()) is None


class TestMainNotRerun:
    @pytest.mark.parametrize("had_spec", [True, False])
    def test_the_main_modules_spec_is_put_back(self, had_spec: bool) -> None:
        main = sys.modules["__main__"]
        before = main.__dict__.get("__spec__", "absent")
        sentinel = ModuleSpec("some_script", None)
        try:
            if had_spec:
                main.__spec__ = sentinel
            else:
                main.__dict__.pop("__spec__", None)
            with main_not_rerun():
                assert main.__spec__.name == "__main__"
            if had_spec:
                assert main.__spec__ is sentinel
            else:
                assert "__spec__" not in main.__dict__
        finally:
            if before == "absent":
                main.__dict__.pop("__spec__", None)
            else:
                main.__spec__ = before


class TestForkServerGuard:
    def test_the_fork_server_dies_with_the_supervisor_at_once(self) -> None:
        """The process started with MARSHAL_FORK_SERVER_OF set to its parent's pid (the fork
        server) is SIGKILLed by the kernel when that parent dies: without it the fork server
        finds out on its pipe and takes its interpreter's shutdown to exit (half a second under
        load, measured), its children handling records all the while."""
        server = (
            "import time\n"
            "import marshal_workers.childlink.forkserver\n"
            "print('ready', flush=True)\n"
            "time.sleep(30)\n"
        )
        parent = (
            "import os, subprocess, sys, time\n"
            f"os.environ[{SERVER_OF_ENV!r}] = str(os.getpid())\n"
            "p = subprocess.Popen([sys.executable, '-c', sys.argv[1]], stdout=subprocess.PIPE,"
            " text=True)\n"
            "assert p.stdout.readline().strip() == 'ready'\n"
            "print(p.pid, flush=True)\n"
            "time.sleep(30)\n"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", parent, server], stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None
            server_pid = int(proc.stdout.readline())
            proc.kill()
            proc.wait(10)
            deadline = time.monotonic() + 5
            while psutil.pid_exists(server_pid) and time.monotonic() < deadline:
                with contextlib.suppress(psutil.Error):
                    if psutil.Process(server_pid).status() == psutil.STATUS_ZOMBIE:
                        break
                time.sleep(0.01)
            gone = not psutil.pid_exists(server_pid) or (
                psutil.Process(server_pid).status() == psutil.STATUS_ZOMBIE
            )
            assert gone, "the fork server outlived its supervisor"
        finally:
            proc.kill()
            with contextlib.suppress(ProcessLookupError, NameError):
                os.kill(server_pid, 9)

    def test_only_the_fork_server_takes_the_guard(self) -> None:
        """The module always consumes the variable; it sets SIGKILL as the parent-death signal
        only in the process whose parent the variable names (the fork server), nowhere else
        (the supervisor, a child)."""
        script = (
            "import ctypes, os\n"
            "import marshal_workers.childlink.forkserver as c\n"
            "sig = ctypes.c_int(-1)\n"
            "ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0)  # PR_GET_PDEATHSIG\n"
            "print(os.environ.get(c.SERVER_OF_ENV), sig.value)\n"
        )
        for owner, expected in (("1", "None 0"), (str(os.getpid()), "None 9")):
            env = {**os.environ, SERVER_OF_ENV: owner}  # 1: not this process's parent
            done = subprocess.run(
                [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
            )
            assert done.stdout.strip() == expected


class TestForkServerFreeze:
    # What a fork-server child reports: how many objects are frozen, and whether the function
    # the last of the child's preloaded modules defines is among them (the permanent generation
    # is the one `gc.get_objects` does not list); each `is_tracked`, or the check says nothing.
    PROBE = (
        "import gc, sys\n\n"
        "def report(conn):\n"
        "    last = sys.modules['marshal_workers.child.feedentry'].reader_entry\n"
        "    listed = any(o is last for o in gc.get_objects())\n"
        "    conn.send((gc.get_freeze_count(), gc.is_tracked(last), listed))\n"
    )
    PARENT = (
        "import freezeprobe\n"
        "from marshal_workers.childlink.forkserver import fork_server\n"
        "if __name__ == '__main__':\n"
        "    ctx = fork_server()\n"
        "    mine, theirs = ctx.Pipe()\n"
        "    p = ctx.Process(target=freezeprobe.report, args=(theirs,))\n"
        "    p.start()\n"
        "    theirs.close()\n"
        "    if not mine.poll(30):\n"
        "        raise SystemExit(f'no report; the child exited {p.exitcode}')\n"
        "    print(*mine.recv())\n"
        "    p.join(30)\n"
    )

    def test_a_forked_child_inherits_the_fork_servers_imports_frozen(self, tmp_path: Path) -> None:
        """The fork server freezes what its imports made before it forks (`childlink.preloaded`,
        imported last): a child's collections then never traverse the inherited modules (19 ms of
        a child's start). The last of the child's modules is frozen too (imported before the
        freeze: with it earlier in the list the function is listed), and so is the bulk of them
        (about 25,000 objects; the fork server's own modules alone are about 10,000). Unfrozen, a
        forked child finds nothing in the permanent generation."""
        (tmp_path / "freezeprobe.py").write_text(self.PROBE)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
        done = subprocess.run(
            [sys.executable, "-c", self.PARENT],
            capture_output=True, text=True, env=env, check=True, timeout=90,
        )  # fmt: skip
        frozen, tracked, listed = done.stdout.split()
        assert (tracked, listed) == ("True", "False"), done.stdout
        assert int(frozen) > 20_000, done.stdout

    def test_nothing_is_frozen_outside_the_fork_server(self) -> None:
        """Imported anywhere but the fork server (here a plain process, as the supervisor or a
        spawned child would), the module freezes nothing; nor does a call in a forked child, which
        inherits the module imported (`forkserver.FORK_SERVER_PID` is the server's pid there)."""
        script = (
            "import gc\n"
            "import marshal_workers.childlink.preloaded as p\n"
            "print(p.freeze_imports(), gc.get_freeze_count())\n"
        )
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True, text=True, env=env, check=True, timeout=60,
        )  # fmt: skip
        assert done.stdout.split() == ["False", "0"]

    def test_a_forked_child_does_not_freeze_again(self, tmp_path: Path) -> None:
        """In a child of the fork server the module is inherited imported; calling it there
        freezes nothing more (the child's own freeze after setup is `child.loop`'s)."""
        (tmp_path / "freezeprobe.py").write_text(
            "import gc\n"
            "from marshal_workers.childlink import preloaded\n\n"
            "def report(conn):\n"
            "    before = gc.get_freeze_count()\n"
            "    conn.send((preloaded.freeze_imports(), gc.get_freeze_count() - before, 0))\n"
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
        done = subprocess.run(
            [sys.executable, "-c", self.PARENT],
            capture_output=True, text=True, env=env, check=True, timeout=90,
        )  # fmt: skip
        assert done.stdout.split() == ["False", "0", "0"]
