"""Every backticked name in the package's docstrings and comments, and in README.md and
docs/*.md, that points into the package names something that exists.

The rule: a single-backticked span (``double`` backticks are literals and are skipped) is a
reference when it is a dotted Python name (``a.b``, ``a.b.c``, optionally ending in ``()`` or
``.*``) or a file name ending in ``.py``. A dotted name is checked when

- its first part (after an optional ``marshal_workers.``) is a package or module of the
  package, by its path (``core.member``), by its last part (``member``) or by the name modules
  import it as (``ipc`` for ``ipc.messages``, ``poison`` for ``protocol.recordfailures``), or a
  class or function defined at the top of a module (``ClaimGranted.token``): then every later
  part must resolve, as a module below it or as a name defined in it (a top-level name, or a
  name a class's body or its methods' ``self.x = ...`` define);
- or it looks like Python (a part has an ``_`` or a capital letter, or it ends in ``()`` or
  ``.*``) and its first part is no module Python can import: it names what the package no
  longer has (``exitpolicy.read_end``);
- or it is two lower-case words (``consume.fetch``) whose first is none of the words settings
  begin with (`SETTING_WORDS`) and whose second is no file suffix (``alerts.yml``).

Everything else is left alone: longer dotted lower-case words are settings
(``heartbeat.interval.ms``, librdkafka's properties), a part in capitals after a first part
that is none of the package's is a placeholder (``config.PROPERTY``), names whose first part
is another library (``os.killpg``, ``confluent_kafka.Consumer``) or an entry-point group
(``marshal_workers.handlers``) are not the package's, and neither are the handler's arguments
and the example files of the docs (`EXAMPLES`). A ``.py`` name with a ``/`` must exist from
the repository's root or from the package's; one without must be the name of a file of the
repository.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import subprocess
import tokenize
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "marshal_workers"
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\)|\.\*)?|[A-Za-z_]\w*\.\*")
PY_FILE = re.compile(r"[\w./-]*\w\.py")
# What the docs name in examples, not in the package: a handler's arguments (``ctx``,
# ``record``, a consumer's message ``m``) and the example handler's file.
EXAMPLES = frozenset({"ctx", "record", "m", "mypkg.py", "w1"})
# The words Kafka's, librdkafka's and Spark's settings begin with, and the suffixes of files
# that are not Python: a two-part lower-case name starting or ending so is no reference.
SETTING_WORDS = frozenset({
    "acks", "allow", "auto", "batch", "bootstrap", "broker", "cleanup", "client", "compression",
    "controller", "delete", "delivery", "enable", "fetch", "group", "heartbeat", "isolation",
    "linger", "listeners", "log", "max", "message", "metadata", "min", "node", "num", "offsets",
    "queued", "reconnect", "replica", "request", "retention", "sasl", "security", "segment",
    "session", "share", "socket", "spark", "ssl", "statistics", "topic", "transactional",
    "unclean", "zookeeper",
})  # fmt: skip
FILE_SUFFIXES = frozenset({
    "cfg", "csv", "env", "html", "ini", "json", "jsonl", "log", "md", "parquet", "png",
    "properties", "service", "toml", "txt", "yaml", "yml",
})  # fmt: skip


@cache
def modules() -> dict[str, Path]:
    """Every module and package of the package by dotted path (``core.member``)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name:
            out[name] = path
    return out


@cache
def defined(module: str) -> dict[str, frozenset[str]]:
    """The names defined at the top of ``module`` (its imports too), each with the names
    defined in its body when it is a class (methods, fields, nested classes)."""
    tree = ast.parse(modules()[module].read_text())
    names: dict[str, frozenset[str]] = {}

    def targets(node: ast.AST) -> Iterator[str]:
        for target in getattr(node, "targets", [getattr(node, "target", None)]):
            for name in ast.walk(target) if target is not None else ():
                if isinstance(name, ast.Name):
                    yield name.id

    for node in ast.walk(tree):
        if node in tree.body or _at_top(tree, node):
            if isinstance(node, ast.ClassDef):
                inner = {n.name for n in node.body if hasattr(n, "name")}
                inner |= {t for n in node.body for t in targets(n)}
                inner |= {  # what its methods set on self
                    a.attr
                    for a in ast.walk(node)
                    if isinstance(a, ast.Attribute) and isinstance(a.ctx, ast.Store)
                    and isinstance(a.value, ast.Name) and a.value.id == "self"
                }  # fmt: skip
                names[node.name] = frozenset(inner)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names[node.name] = frozenset()
            elif isinstance(node, ast.Import | ast.ImportFrom):
                for alias in node.names:
                    names[(alias.asname or alias.name).split(".")[0]] = frozenset()
            else:
                names.update(dict.fromkeys(targets(node), frozenset()))
    return names


def _at_top(tree: ast.Module, node: ast.AST) -> bool:
    """Whether ``node`` is a statement of the module's body, or inside an ``if``/``try`` there."""
    todo = list(tree.body)
    while todo:
        statement = todo.pop()
        if statement is node:
            return True
        if isinstance(statement, ast.If | ast.Try):
            todo += statement.body + statement.orelse + getattr(statement, "finalbody", [])
            todo += [s for h in getattr(statement, "handlers", []) for s in h.body]
    return False


@cache
def top_names() -> dict[str, list[str]]:
    """Each class or function defined at the top of some module, with those modules."""
    out: dict[str, list[str]] = {}
    for module, path in modules().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                out.setdefault(node.name, []).append(module)
    return out


@cache
def house_aliases() -> dict[str, set[str]]:
    """The names modules of the package give the project modules they import (``from
    marshal_workers.ipc import messages as ipc``: ``ipc`` is ``ipc.messages``)."""
    out: dict[str, set[str]] = {}
    for path in modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "marshal_workers."
            ):
                base = node.module.removeprefix("marshal_workers.")  # type: ignore[union-attr]
                for alias in node.names:
                    if alias.asname and f"{base}.{alias.name}" in modules():
                        out.setdefault(alias.asname, set()).add(f"{base}.{alias.name}")
    return out


def starts(first: str) -> list[str]:
    """The modules (or, for a class or function, the module and the name) ``first`` may mean."""
    found = [m for m in modules() if m == first or m.endswith(f".{first}")]
    found += sorted(house_aliases().get(first, set()))
    return found or [f"{m}:{first}" for m in top_names().get(first, [])]


def resolves(start: str, rest: list[str]) -> bool:
    """Whether the parts ``rest`` exist below ``start`` (a module, or ``module:Name``)."""
    module, _, name = start.partition(":")
    scope: frozenset[str] | None = None
    if name:
        scope = defined(module).get(name)
    for part in rest:
        if scope is not None:
            if part not in scope:
                return False
            scope = frozenset()  # a class's attribute: nothing is checked below it
            continue
        if f"{module}.{part}" in modules():
            module = f"{module}.{part}"
            continue
        if part not in defined(module):
            return False
        scope = defined(module)[part]
    return True


def is_reference_fine(span: str) -> bool | None:
    """True if ``span`` resolves, False if it is a reference that does not, None if it is no
    reference into the package (see the module docstring for the rule)."""
    if span in EXAMPLES or span.split(".", maxsplit=1)[0] in EXAMPLES:
        return None
    if PY_FILE.fullmatch(span):
        if "/" in span:
            return (ROOT / span).exists() or (PACKAGE / span).exists()
        return span in repository_file_names()
    if not DOTTED.fullmatch(span):
        return None
    name = span.removesuffix("()").removesuffix(".*").removeprefix("marshal_workers.")
    parts = name.split(".")
    candidates = starts(parts[0])
    if candidates:
        return any(resolves(c, parts[1:]) for c in candidates)
    if _importable(parts[0]) or parts[0] in entry_point_groups() or span in entry_point_groups():
        return None
    pythonic = span.endswith(("()", ".*")) or any("_" in p or p != p.lower() for p in parts)
    if pythonic:
        return None if any(p.isupper() for p in parts) else False  # KAFKA.PROPERTY: a placeholder
    if len(parts) == 2 and parts[0] not in SETTING_WORDS and parts[1] not in FILE_SUFFIXES:
        return False
    return None


@cache
def entry_point_groups() -> frozenset[str]:
    """The entry-point groups pyproject.toml declares (``marshal_workers.handlers``)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return frozenset(project.get("entry-points", {}))


@cache
def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@cache
def repository_file_names() -> frozenset[str]:
    """The names of the files git holds (any folder)."""
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    return frozenset(Path(p).name for p in listed)


def package_texts() -> Iterator[tuple[str, str]]:
    """(where, text) for every docstring and comment of the package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        where = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    yield f"{where}:{node.body[0].lineno}", doc
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                yield f"{where}:{token.start[0]}", token.string


def doc_texts() -> Iterator[tuple[str, str]]:
    """(where, line) for every line of README.md and docs/*.md, fenced code left out."""
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        fenced = False
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif not fenced:
                yield f"{path.relative_to(ROOT)}:{number}", line


def unresolved(texts: Iterator[tuple[str, str]]) -> list[str]:
    """Each backticked reference of ``texts`` that names nothing, as ``where: `span```."""
    found = []
    for where, text in texts:
        for span in SPAN.findall(re.sub(r"``[^`]*``", "", text)):
            if is_reference_fine(span.strip()) is False:
                found.append(f"{where}: `{span}`")
    return found


def test_the_packages_docstrings_and_comments_name_what_exists() -> None:
    """Every backticked reference in a docstring or comment of the package resolves."""
    assert unresolved(package_texts()) == []


def test_the_docs_name_what_exists() -> None:
    """Every backticked reference in README.md and docs/*.md resolves."""
    assert unresolved(doc_texts()) == []


def test_the_rule_tells_references_from_other_names() -> None:
    """Real names resolve, stale ones do not, and settings, other libraries' names and
    literals are no references (so the checks above can fail, and only where they should)."""
    for fine in ("core.member", "member.Member", "protocol.events.ClaimGranted",
                 "ledgerfile.LedgerRow.line", "marshal_workers.admin.options.checked",
                 "admin.records", "slicing.key_hash", "ClaimGranted", "core/member.py",
                 "plugins/ledger.py", "conftest.py"):  # fmt: skip
        assert is_reference_fine(fine) is not False, fine
    for stale in ("exitpolicy.read_end", "claims.is_member_key", "status.group_status",
                  "consume.fetch", "exitpolicy.*", "member.no_such_name", "claims.plan",
                  "admin.operations", "childloop.py", "child/childloop.py"):  # fmt: skip
        assert is_reference_fine(stale) is False, stale
    for other in ("heartbeat.interval.ms", "message.timestamp.type", "os.killpg",
                  "confluent_kafka.Consumer", "time.monotonic()", "marshal-admin status",
                  "acks=all"):  # fmt: skip
        assert is_reference_fine(other) is None, other
    assert unresolved(iter([("x", "see ``childloop.run`` and `exitpolicy.read_end`")])) == [
        "x: `exitpolicy.read_end`"
    ]
