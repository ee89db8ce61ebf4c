"""Every log event of every process is named in snake_case.

The names are collected from the code: each structlog call (``log.info("claim_won", ...)``,
``self._log.warning(...)``, ``ctx.log.error(...)``), each of the member core's
``ctx.say(level, "claim_won", ...)``, and each `logs.raw_line` call with a constant event
name, in the package, the plugins and the benchmarks. Standard-library loggers (names bound to
``logging.getLogger(...)``) carry librdkafka's and kafkalog's text messages, not events, and
are not checked.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCANNED = ("marshal_workers", "plugins", "bench")
LEVELS = {"debug", "info", "warning", "warn", "error", "critical", "exception", "msg", "fatal"}
SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")


def _stdlib_loggers(tree: ast.AST) -> set[str]:
    """Names (and ``self.`` attributes) bound to ``logging.getLogger(...)`` in a module."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Attribute) and func.attr == "getLogger":
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(ast.unparse(t) for t in targets)
    return names


def _named_events(node: ast.AST) -> Iterator[tuple[int, str]]:
    """Event names kept in constants (``STACK_DUMP_EVENT = "..."``) or given as the default of
    a parameter named ``event``."""
    if (
        isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        and any(ast.unparse(t).endswith("_EVENT") for t in node.targets)
    ):
        yield node.lineno, node.value.value
    if isinstance(node, ast.FunctionDef):
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        with_default = positional[len(positional) - len(args.defaults) :]
        pairs = list(zip(with_default, args.defaults, strict=True))
        pairs += [
            (a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None
        ]
        for arg, default in pairs:
            if (
                arg.arg == "event"
                and isinstance(default, ast.Constant)
                and isinstance(default.value, str)
            ):
                yield node.lineno, default.value


def events_in(path: Path, stdlib: set[str] | None = None) -> Iterator[tuple[int, str]]:
    """(line, event name) of every constant event name logged in one file; ``stdlib`` are the
    standard-library logger names of the whole tree (an imported one is skipped too)."""
    tree = ast.parse(path.read_text(), str(path))
    stdlib = _stdlib_loggers(tree) | (stdlib or set())
    for node in ast.walk(tree):
        yield from _named_events(node)
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in LEVELS and node.args:
            receiver = ast.unparse(func.value)
            if receiver in stdlib or receiver in {"logging", "warnings"}:
                continue
            if "log" not in receiver.lower():
                continue  # not a logger (argparse's parser.error, click's ctx.fail, ...)
            first = node.args[0]
        elif isinstance(func, ast.Name | ast.Attribute) and ast.unparse(func).endswith(
            ("raw_line", ".say")
        ):  # raw_line(json, event, ...) and the member core's ctx.say(level, event, ...)
            if len(node.args) < 2:
                continue
            first = node.args[1]
        else:
            continue
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            yield node.lineno, first.value


def all_events() -> list[tuple[str, int, str]]:
    """Every (file, line, event) found in the scanned trees."""
    paths = [p for top in SCANNED for p in sorted((ROOT / top).rglob("*.py"))]
    stdlib = {n for p in paths for n in _stdlib_loggers(ast.parse(p.read_text()))}
    found = []
    for path in paths:
        rel = path.relative_to(ROOT).as_posix()
        found.extend((rel, line, name) for line, name in events_in(path, stdlib))
    return found


def test_the_scan_finds_the_events() -> None:
    """The collector sees events of the supervisor's runtime, the child and the tools."""
    names = {name for _, _, name in all_events()}
    assert len(names) > 20
    assert {"supervisor_started", "stack_dump", "claim_won", "child_started"} <= names


def test_every_event_name_is_snake_case() -> None:
    """One convention, snake_case, for every event of every process."""
    bad = [f"{f}:{line}: {name!r}" for f, line, name in all_events() if not SNAKE.match(name)]
    assert bad == [], "event names not in snake_case:\n" + "\n".join(bad)


def test_the_collector_reads_multi_line_calls(tmp_path: Path) -> None:
    """Calls spread over lines, bound loggers and raw_line are all collected; stdlib loggers
    and what is no logger (argparse's ``parser.error``) are not."""
    sample = tmp_path / "m.py"
    sample.write_text(
        "import logging\n_log = logging.getLogger(__name__)\n"
        "def f(log, ctx):\n"
        "    log.bind(a=1).info(\n        'Claim won',\n        x=1,\n    )\n"
        "    ctx.log.warning('child_started')\n"
        "    raw_line(True, 'stack dump', 'warning', {})\n"
        "    _log.warning('%s (retrying)', 1)\n"
        "    parser.error('--x must be given')\n"
        "DUMP_EVENT = 'stack dump'\n"
        "def g(log, event='thread stack'): pass\n"
    )
    names = sorted(name for _, name in events_in(sample))
    assert names == ["Claim won", "child_started", "stack dump", "stack dump", "thread stack"]


def test_a_process_and_its_supervisor_name_their_events_apart() -> None:
    """What the supervisor logs about a child or a host's reader (spawned) is not what that
    process logs of itself (set up): one name for both counted every child twice in a review's
    log count (`child_started`)."""
    by_package: dict[str, set[str]] = {}
    for file, _, name in all_events():
        by_package.setdefault(file.split("/")[1], set()).add(name)
    assert by_package["supervisor"] & by_package["child"] == set()


def test_a_hosts_reader_and_its_children_name_their_events_apart() -> None:
    """The host's reader (`child/reader.py`) and the children it feeds are two processes:
    one name for both (`feed_attached`, said by each end of one attach) counted every attach
    twice in a review's log count."""
    reader, children = set(), set()
    for file, _, name in all_events():
        if file.startswith("marshal_workers/child/"):
            (reader if file == "marshal_workers/child/reader.py" else children).add(name)
    # each process's own consumer's failures: one name for one kind of event, said once
    own = {"kafka_error", "consumer_close_failed"}
    assert reader & children - own == set()
