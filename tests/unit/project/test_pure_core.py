"""The pure core (every module of `marshal_workers/protocol/`, of the member's sans-I/O core
in `marshal_workers/core/` and of the child-supervisor messages in `marshal_workers/ipc/`) does
no I/O and reads no clock: none of it imports anything that could, directly or through the
package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "marshal_workers"
# Every module of protocol/, core/ and ipc/, found on disk: a new module is covered without a row.
CORE = sorted(
    f"{package}.{p.stem}"
    for package in ("protocol", "core", "ipc")
    for p in (PACKAGE / package).glob("*.py")
    if p.stem != "__init__"
)
ALLOWED_STDLIB = {
    "__future__",
    "collections",
    "copy",
    "dataclasses",
    "enum",
    "functools",
    "hashlib",
    "typing",
    "itertools",
    "math",
    "bisect",
    "heapq",  # the pending writes' sent bytes, by when they expire (`core.pending`)
    "traceback",  # failures formats an exception it is given
    "random",  # the member core's jitter, seeded per instance (runs replay)
    "signal",  # the names of signals in the member core's inputs and commands; it sends none
    "datetime",  # formats a log time it is given (the status view); never asks the clock (below)
    "zlib",  # crc32 of a record key (its slice, `protocol.slicing`); nothing is compressed
    "marshal",  # the feed's frames (`ipc.feedwire`): bytes to values and back, no I/O
    "struct",  # a frame's length
}
CLOCK_CALLS = {"now", "today", "utcnow", "time", "monotonic", "perf_counter"}
# Not core, but pure too, so the core may import them: exit codes and their exception.
PURE_SUPPORT = ["common.errors"]


SUBPACKAGES = {
    f"marshal_workers.{p.name}" for p in PACKAGE.iterdir() if (p / "__init__.py").exists()
}


def imports_of(module: str) -> set[str]:
    tree = ast.parse((PACKAGE / f"{module.replace('.', '/')}.py").read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module in SUBPACKAGES:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == "marshal_workers":
            names.update(f"marshal_workers.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.ImportFrom):  # from . import x
            names.update(f"marshal_workers.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("module", CORE)
def test_core_module_imports_nothing_that_does_io(module: str) -> None:
    """Only pure stdlib modules and other core modules (transitively)."""
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for name in imports_of(current):
            if name.startswith("marshal_workers"):
                inner = name.removeprefix("marshal_workers").lstrip(".") or "__init__"
                pure = inner in CORE or inner in PURE_SUPPORT
                assert pure, f"{current} imports {name}, which is not pure"
                todo.append(inner)
            else:
                assert name.split(".")[0] in ALLOWED_STDLIB, f"{current} imports {name}"


@pytest.mark.parametrize("module", CORE)
def test_core_module_never_asks_the_clock(module: str) -> None:
    """No pure module calls now(), today(), utcnow(), time() or monotonic(): a time is always
    an input (datetime is allowed above for formatting a time it is given)."""
    tree = ast.parse((PACKAGE / f"{module.replace('.', '/')}.py").read_text())
    calls = {
        node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
    }
    assert not calls & CLOCK_CALLS, f"{module} calls {sorted(calls & CLOCK_CALLS)}"
