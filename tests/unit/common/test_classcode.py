"""The dataclasses' generated methods compiled once per install (`common.classcode`)."""

from __future__ import annotations

import dataclasses
import importlib.util
import marshal
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import CodeType

import pytest

from marshal_workers.common import classcode
from marshal_workers.common.classcode import MethodCode, compiled_once, read_cache, write_cache

REPO = Path(__file__).resolve().parents[3]


def make_classes() -> tuple[type, ...]:
    """Dataclasses of every kind the package defines (frozen and slotted, mutable, defaults,
    factories, keyword-only, ordered), defined anew at each call."""

    @dataclasses.dataclass(frozen=True, slots=True)
    class Claim:
        topic: str
        partition: int
        token: int = 0
        tags: tuple[str, ...] = ()

    @dataclasses.dataclass(slots=True)
    class Counter:
        seen: int = 0
        names: list[str] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True, order=True, kw_only=True)
    class Position:
        offset: int
        epoch: int = -1

    @dataclasses.dataclass
    class Plain:
        value: object = None

    return Claim, Counter, Position, Plain


GENERATED = ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__", "__lt__")


def methods(cls: type) -> dict[str, CodeType]:
    """The code of the methods `dataclasses` generated for ``cls``."""
    found = {}
    for name in GENERATED:
        method = vars(cls).get(name)
        if method is not None and hasattr(method, "__code__"):
            found[name] = method.__code__
    return found


@pytest.fixture
def dataclasses_restored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The module's cache in ``tmp_path``, not the checkout's, and written (as where bytecode
    is: the tests may run under ``PYTHONDONTWRITEBYTECODE``); whatever a test leaves, the next
    one finds `dataclasses` unpatched."""
    monkeypatch.setattr(classcode, "cache_file", lambda: tmp_path / "module-cache.bin")
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    yield
    classcode.stop()
    assert "exec" not in vars(dataclasses)


@pytest.mark.usefixtures("dataclasses_restored")
class TestTheSameClasses:
    def test_cached_code_is_what_dataclasses_compiles(self, tmp_path: Path) -> None:
        """The classes made through the cache, first compiling then from the file, have
        methods of the same code (`CodeType.__eq__`: the bytecode, constants, names, lines)
        and the same annotations as classes made without it."""
        plain = make_classes()
        path = tmp_path / "cache.bin"
        for compiled in (True, False):
            cache = MethodCode(path)
            cache.start()
            try:
                cached = make_classes()
            finally:
                written = cache.stop()
            assert written is compiled
            assert (cache.compiled > 0) is compiled
            for before, after in zip(plain, cached, strict=True):
                assert methods(before) == methods(after), before.__name__
                assert methods(after), before.__name__
                for name in methods(before):
                    assert getattr(after, name).__annotations__ == (
                        getattr(before, name).__annotations__
                    ), name

    def test_no_future_flag_of_this_package_leaks_into_the_methods(self, tmp_path: Path) -> None:
        """`classcode` has ``from __future__ import annotations``, as every module here: code
        compiled there would inherit it, and the generated ``__init__``'s annotations would
        be strings. `dataclasses`' own ``exec`` inherits nothing; nor does the cache."""
        with compiled_once():
            claim = make_classes()[0]
        assert claim.__init__.__annotations__["return"] is None

    def test_the_classes_behave_alike(self, tmp_path: Path) -> None:
        cache = MethodCode(tmp_path / "cache.bin")
        cache.start()
        try:
            claim_type, counter_type, position_type, _ = make_classes()
        finally:
            cache.stop()
        claim = claim_type("orders", 3, tags=("a",))
        assert repr(claim).endswith(
            "<locals>.Claim(topic='orders', partition=3, token=0, tags=('a',))"
        )
        assert claim == claim_type("orders", 3, 0, ("a",))
        assert hash(claim) == hash(claim_type("orders", 3, 0, ("a",)))
        with pytest.raises(dataclasses.FrozenInstanceError):
            claim.token = 1  # type: ignore[misc]
        assert dataclasses.replace(claim, token=2).token == 2
        first, second = counter_type(), counter_type()
        first.names.append("x")
        assert second.names == []
        assert position_type(offset=1) < position_type(offset=2)
        with pytest.raises(TypeError):
            position_type(1)  # keyword-only


@pytest.mark.usefixtures("dataclasses_restored")
class TestPatchedOnlyInside:
    def test_dataclasses_is_as_before_after_it_even_after_an_error(self) -> None:
        with pytest.raises(ImportError), compiled_once():
            assert "exec" in vars(dataclasses)
            raise ImportError("no such module")
        assert "exec" not in vars(dataclasses)

    def test_an_inner_compiled_once_leaves_the_outer_one_on(self) -> None:
        with compiled_once():
            outer = vars(dataclasses)["exec"]
            with compiled_once():
                assert vars(dataclasses)["exec"] == outer
            assert vars(dataclasses)["exec"] == outer
        assert "exec" not in vars(dataclasses)

    def test_written_on_demand_even_where_bytecode_would_not_be(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """`supervisor.precompile` writes the file under ``PYTHONDONTWRITEBYTECODE`` (writing it
        is its point) without turning bytecode on for what it imports."""
        monkeypatch.setattr(sys, "dont_write_bytecode", True)
        with compiled_once(write=True):
            make_classes()
        assert sys.dont_write_bytecode
        assert read_cache(tmp_path / "module-cache.bin")

    def test_a_second_start_is_the_first_ones(self, tmp_path: Path) -> None:
        classcode.start()
        first = vars(dataclasses)["exec"]
        classcode.start()
        assert vars(dataclasses)["exec"] == first
        classcode.stop()
        assert "exec" not in vars(dataclasses)
        assert classcode.stop() is False  # nothing started: nothing to do

    def test_an_exec_someone_else_put_there_is_put_back(self, tmp_path: Path) -> None:
        def theirs(*args: object) -> None:
            raise AssertionError("not called")

        dataclasses.exec = theirs  # type: ignore[attr-defined]
        try:
            cache = MethodCode(tmp_path / "cache.bin")
            cache.start()
            make_classes()
            cache.stop()
            assert vars(dataclasses)["exec"] is theirs
        finally:
            del dataclasses.exec  # type: ignore[attr-defined]


@pytest.mark.usefixtures("dataclasses_restored")
class TestTheFile:
    def test_a_file_that_is_not_a_cache_of_this_interpreter_is_ignored(
        self, tmp_path: Path
    ) -> None:
        path = tmp_path / "cache.bin"
        code = compile("x = 1", "<string>", "exec")
        good = marshal.dumps({"x = 1": code, "y": "not code"})
        digest = classcode._digest(good)
        header = classcode._header()
        listed = marshal.dumps(["x = 1"])
        for content in (
            b"not marshal at all",
            marshal.dumps((header, {"x = 1": code})),  # not this layout
            b"\x00\x00\r\n" + header[4:] + digest + good,  # another magic
            header[:4] + bytes([header[4] + 1]) + digest + good,  # another -O level
            header + b"\x00" * len(digest) + good,  # another digest
            header + digest + good[:-1],  # cut short
            header + classcode._digest(listed) + listed,  # not a dict
        ):
            path.write_bytes(content)
            assert read_cache(path) == {}, content
        path.write_bytes(header + digest + good)
        assert read_cache(path) == {"x = 1": code}
        assert header.startswith(importlib.util.MAGIC_NUMBER)
        assert read_cache(tmp_path / "absent.bin") == {}

    def test_a_damaged_file_is_ignored_whatever_it_decodes_to(self, tmp_path: Path) -> None:
        """A cache with a few bytes changed (a disk's error, a write cut short and copied) is
        ignored, never raised: `marshal.loads` of damaged data raises more than `ValueError`
        (`SystemError` "bad argument to internal function", `UnicodeDecodeError`), and `read_cache`
        runs inside `marshal-run`'s imports and the fork server's start, so anything it raised
        stopped every start, with the file never rewritten. A change that still decodes is not
        used either: its code would run as the package's."""
        path = tmp_path / "cache.bin"
        cache = MethodCode(path)
        cache.start()
        make_classes()
        assert cache.stop()
        good = path.read_bytes()
        known = read_cache(path)
        assert known
        rng = random.Random(7)

        def damage(data: bytes) -> bytes:
            damaged = bytearray(data)
            while damaged == data:
                for _ in range(rng.randint(1, 4)):
                    damaged[rng.randrange(len(damaged))] = rng.randrange(256)
            return bytes(damaged)

        for _ in range(500):  # damage anywhere: the digest refuses it, nothing runs
            path.write_bytes(damage(good))
            assert read_cache(path) in ({}, known)
        path.write_bytes(good)
        assert read_cache(path) == known

    def test_whatever_decoding_raises_is_ignored(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Damaged code under a digest that matches it (written so, or a collision): what
        `marshal.loads` then raises is not only `ValueError`, `EOFError` or `TypeError`, which
        the first version caught: 198 of 3,000 random 1-4 byte changes of the package's cache
        raised `SystemError` ("bad argument to internal function") on 3.11. (Decoding such data
        for real may crash the interpreter, 3.12 and 3.13 more often: hence a stand-in.)"""
        path = tmp_path / "cache.bin"
        assert write_cache(path, {"x = 1": compile("x = 1", "<string>", "exec")})
        for error in (
            SystemError("Objects/codeobject.c:250: bad argument to internal function"),
            UnicodeDecodeError("utf-8", b"\xf8", 0, 1, "invalid start byte"),
            MemoryError(),
        ):

            def damaged(data: bytes, error: Exception = error) -> object:
                raise error

            monkeypatch.setattr(classcode.marshal, "loads", damaged)
            assert read_cache(path) == {}, error

    def test_a_file_that_is_not_a_regular_one_is_not_read(self, tmp_path: Path) -> None:
        """A FIFO at the cache's name (read, it would wait for a writer forever: every start
        would hang) or a file larger than `MAX_FILE_BYTES` is ignored at once."""
        fifo = tmp_path / "fifo.bin"
        os.mkfifo(fifo)
        started = time.monotonic()
        assert read_cache(fifo) == {}
        assert time.monotonic() - started < 5
        assert read_cache(tmp_path) == {}  # a directory
        large = tmp_path / "large.bin"
        with open(large, "wb") as out:
            out.truncate(classcode.MAX_FILE_BYTES + 1)
        assert read_cache(large) == {}

    def test_a_temporary_file_left_by_a_killed_writer_is_removed(self, tmp_path: Path) -> None:
        """A process killed while it writes (the fork server, when its supervisor dies as it
        starts) leaves its temporary file, the size of the cache: the next writer removes
        the temporaries older than `STALE_TEMPORARY_S` beside the file, not a fresh one (a
        process writing now)."""
        path = tmp_path / "cache.bin"
        stale = tmp_path / "cache.bin.4242.tmp"
        fresh = tmp_path / "cache.bin.4243.tmp"
        other = tmp_path / "another.bin.4244.tmp"
        for leftover in (stale, fresh, other):
            leftover.write_bytes(b"x" * 1000)
        old = time.time() - classcode.STALE_TEMPORARY_S - 60
        os.utime(stale, (old, old))
        os.utime(other, (old, old))
        assert write_cache(path, {"x = 1": compile("x = 1", "<string>", "exec")})
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            "another.bin.4244.tmp",
            "cache.bin",
            "cache.bin.4243.tmp",
        ]
        # A start that writes nothing removes them too: otherwise a temporary left less than
        # `STALE_TEMPORARY_S` before the last write would stay for good.
        os.utime(fresh, (old, old))
        MethodCode(path)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["another.bin.4244.tmp", "cache.bin"]

    def test_a_writer_never_removes_a_temporary_it_did_not_make(self, tmp_path: Path) -> None:
        """Its own name is unique (not only its process id, which a thread or a process in
        another PID namespace sharing the directory may have too)."""
        path = tmp_path / "cache.bin"
        theirs = tmp_path / f"cache.bin.{os.getpid()}.tmp"
        theirs.write_bytes(b"another writer's, being written")
        assert write_cache(path, {"x = 1": compile("x = 1", "<string>", "exec")})
        assert theirs.read_bytes() == b"another writer's, being written"
        assert oct(path.stat().st_mode & 0o777) == oct(0o644)

    def test_an_error_while_writing_leaves_no_temporary(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Not only `OSError`: whatever stops the write (a `KeyboardInterrupt` as the operator
        presses Ctrl-C during the imports) removes the temporary file before it goes on."""

        def interrupted(*args: object) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(classcode.os, "replace", interrupted)
        with pytest.raises(KeyboardInterrupt):
            write_cache(tmp_path / "cache.bin", {"x = 1": compile("x = 1", "<string>", "exec")})
        assert list(tmp_path.iterdir()) == []

    def test_it_writes_where_it_can_and_says_so_where_it_cannot(self, tmp_path: Path) -> None:
        texts = {"x = 1": compile("x = 1", "<string>", "exec")}
        path = tmp_path / "sub" / "cache.bin"
        assert write_cache(path, texts)
        assert read_cache(path) == texts
        blocked = tmp_path / "file"
        blocked.write_text("a file, not a directory")
        assert not write_cache(blocked / "cache.bin", texts)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "sub"]
        assert [p.name for p in (tmp_path / "sub").iterdir()] == ["cache.bin"]  # no temporary

    def test_nothing_is_written_where_bytecode_would_not_be(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(sys, "dont_write_bytecode", True)
        cache = MethodCode(tmp_path / "cache.bin")
        cache.start()
        make_classes()
        assert cache.stop() is False
        assert cache.compiled > 0
        assert not (tmp_path / "cache.bin").exists()

    def test_it_holds_at_most_max_texts(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Past `MAX_TEXTS` (texts of classes changed by upgrades pile up), the file keeps the
        texts of the process that writes it, and no other."""
        monkeypatch.setattr(classcode, "MAX_TEXTS", 5)
        path = tmp_path / "cache.bin"
        stale = {f"x = {n}": compile(f"x = {n}", "<string>", "exec") for n in range(5)}
        assert write_cache(path, stale)
        cache = MethodCode(path)
        cache.start()
        make_classes()
        assert cache.stop()
        kept = read_cache(path)
        assert set(kept) == set(cache.used)
        assert not set(kept) & set(stale)


def test_the_file_is_beside_the_packages_bytecode() -> None:
    path = classcode.cache_file()
    assert path is not None
    assert path.name == f"dataclass-methods.{sys.implementation.cache_tag}.bin"
    if sys.pycache_prefix is None:
        assert path.parent == REPO / "marshal_workers" / "__pycache__"
    optimized = subprocess.run(
        [sys.executable, "-O", "-c", "from marshal_workers.common import classcode\n"
         "print(classcode.cache_file().name)"],
        check=True, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"},
    ).stdout.strip()  # fmt: skip
    assert optimized == f"dataclass-methods.{sys.implementation.cache_tag}.opt-1.bin"


def run_python(code: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class TestTheCommands:
    def test_marshal_runs_imports_compile_nothing_once_the_install_wrote_it(
        self, tmp_path: Path
    ) -> None:
        """`python -m marshal_workers.supervisor.precompile` (the installs run it) writes the file;
        `marshal-run`'s imports (`supervisor.cli.main`, up to asking for its help here) then
        take every one of their hundreds of texts from it and compile none. Its own bytecode
        goes under a prefix of this test's (``PYTHONPYCACHEPREFIX``), not in the checkout."""
        env = {
            **os.environ,
            "PYTHONPYCACHEPREFIX": str(tmp_path),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": str(REPO),
        }
        subprocess.run(
            [sys.executable, "-m", "marshal_workers.supervisor.precompile"],
            check=True, env=env, timeout=120,
        )  # fmt: skip
        written = list(tmp_path.rglob("dataclass-methods.*.bin"))
        assert len(written) == 1
        assert list(tmp_path.rglob("*.pyc")) == []  # the cache only, no other bytecode
        probe = (
            "import sys\n"
            "from marshal_workers.common import classcode\n"
            "from marshal_workers.supervisor import cli\n"
            "stop = classcode.MethodCode.stop\n"
            "def noted(self, **options):\n"
            "    print('TEXTS', self.compiled, len(self.used))\n"
            "    return stop(self, **options)\n"
            "classcode.MethodCode.stop = noted\n"
            "cli.start_fork_server = lambda args: False\n"
            "sys.argv = ['marshal-run', '--help']\n"
            "try:\n"
            "    cli.main()\n"
            "except SystemExit:\n"
            "    pass\n"
        )
        lines = [line for line in run_python(probe, env).splitlines() if line.startswith("TEXTS")]
        assert len(lines) == 1, lines
        compiled, used = map(int, lines[0].split()[1:])
        assert compiled == 0
        assert used > 300

    def test_the_fork_server_uses_it_and_its_children_have_dataclasses_as_before(
        self, tmp_path: Path
    ) -> None:
        """The fork server compiles its preload's dataclasses' methods through the cache
        (with none written yet, it writes the file) and stops before it forks: a child finds
        `dataclasses` unpatched, so its handler's dataclasses are compiled as usual."""
        (tmp_path / "probe.py").write_text(
            "import dataclasses\n\ndef report(conn):\n    conn.send('exec' in vars(dataclasses))\n"
        )
        parent = (
            "import probe\n"
            "from marshal_workers.childlink.forkserver import fork_server\n"
            "if __name__ == '__main__':\n"
            "    ctx = fork_server()\n"
            "    mine, theirs = ctx.Pipe()\n"
            "    p = ctx.Process(target=probe.report, args=(theirs,))\n"
            "    p.start()\n"
            "    theirs.close()\n"
            "    if not mine.poll(60):\n"
            "        raise SystemExit(f'no report; the child exited {p.exitcode}')\n"
            "    print('PATCHED', mine.recv())\n"
            "    p.join(30)\n"
        )
        prefix = tmp_path / "bytecode"
        env = {**os.environ, "PYTHONPYCACHEPREFIX": str(prefix), "PYTHONPATH": str(REPO)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO)])
        out = run_python(parent, env)
        assert "PATCHED False" in out.splitlines(), out
        written = list(prefix.rglob("dataclass-methods.*.bin"))
        assert len(written) == 1
        texts = read_cache(written[0])
        assert any("__create_fn__" in text for text in texts)
        assert len(texts) > 100
