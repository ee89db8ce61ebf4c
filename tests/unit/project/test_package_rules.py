"""The packages' import rules, read from the code's own imports with `ast`: each package imports
only the layers below it, the child never reaches the fold, the log, the core or the supervisor,
and no tool imports the fork server's module (its guard runs at import). The bundled plugins
(the repository's `plugins/` folder, installed as `marshal_workers.plugins`) run in the child and
are held to the same rules."""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path
from re import compile as re_compile

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "marshal_workers"
BUNDLED_PLUGINS = ROOT / "plugins"  # installed as marshal_workers.plugins (pyproject.toml)
PACKAGES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())

# What each package may import of the project (besides itself). Layers, lowest first: common;
# protocol; clients, config, ipc (pure messages), handler; childlink (the plumbing the messages
# travel by), core, log; child, fleet (what a member and the operator both do against the
# cluster); supervisor; the tools. A tool imports only the layers it uses: none imports the
# supervisor, the child or the plumbing between them.
ALLOWED: dict[str, set[str]] = {
    "common": set(),
    "protocol": set(),
    "clients": {"common"},
    "config": {"common", "protocol", "clients"},
    "ipc": {"common", "protocol"},
    "handler": {"common", "protocol"},
    "childlink": {"common", "protocol", "ipc"},
    "core": {"common", "protocol", "ipc"},
    "log": {"common", "protocol", "clients"},
    "child": {"common", "protocol", "clients", "ipc", "childlink", "handler"},
    "fleet": {"common", "protocol", "clients", "config", "log"},
    "supervisor": {
        "common",
        "protocol",
        "clients",
        "config",
        "ipc",
        "childlink",
        "handler",
        "core",
        "log",
        "fleet",
    },
    "localkafka": {"common", "clients"},
    "admin": {"common", "protocol", "clients", "config", "log", "fleet", "localkafka"},
    "audit": {"common", "protocol", "clients", "config", "log", "localkafka"},
    # the simulator's child sizes reservations with the real child's rule (protocol), and
    # imports nothing of the child itself; it runs no Kafka and starts no process
    "sim": {"common", "protocol", "config", "ipc", "core", "log"},
    # The bundled handlers: the public handler API, and what the child may import of the rest
    # (the ledger's file format, a record key's slice); never the clients or the ipc.
    "plugins": {"common", "protocol", "handler"},
}
# Single modules a package may import of a package its row leaves out: the supervisor starts
# its children with the child's entry point (a name that imports nothing), and imports nothing
# else of the child: the child's modules are the fork server's import, not the supervisor's.
ALLOWED_MODULES: dict[str, set[str]] = {
    "supervisor": {"child.entry", "child.feedentry"},
}
# Modules a package must not reach even through the packages it may import (transitively).
NEVER_REACHED: dict[str, set[str]] = {
    "child": {"protocol.rationalizer"},
    "plugins": {"protocol.rationalizer"},  # they run in the child
}
# All the child process loads of the protocol (directly or through ipc and handler): the
# delivery modes, the lease rule its shared lease applies, a slice's type, the AMO reservation
# sizer. Never the fold, its views, the wire format or the record failures the supervisor folds.
CHILD_PROTOCOL = {
    "protocol", "protocol.modes", "protocol.leases", "protocol.slicing", "protocol.reservations",
}  # fmt: skip


def module_path(module: str) -> Path:
    """The file of ``module`` (dotted, without the ``marshal_workers.`` prefix); a bundled
    plugin's is in the repository's `plugins/` folder, as `marshal_workers.plugins` finds it
    in a checkout."""
    base = PACKAGE / module.replace(".", "/")
    if module.startswith("plugins.") and not base.with_suffix(".py").exists():
        base = BUNDLED_PLUGINS / module.removeprefix("plugins.").replace(".", "/")
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


@cache
def project_imports(module: str) -> frozenset[str]:
    """The project modules ``module`` imports at run time (see `imports_in`)."""
    path = module_path(module)
    return imports_in(path.read_text(), module, is_package=path.name == "__init__.py")


def imports_in(
    source: str, module: str, *, is_package: bool = False, typing: bool = False
) -> frozenset[str]:
    """The project modules ``source`` (the code of ``module``) imports at run time (``if
    TYPE_CHECKING:`` excluded unless ``typing``), each as the deepest module that exists
    (``from pkg.mod import name`` gives ``pkg.mod``). A relative import counts as the absolute
    one it stands for."""
    tree = ast.parse(source)
    own_package = module.split(".") if is_package else module.split(".")[:-1]
    guards = set() if typing else {"TYPE_CHECKING", "typing.TYPE_CHECKING"}
    skipped = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) in guards
        for n in ast.walk(node)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level > 0:  # from ..log import kafkalog
            base = own_package[: len(own_package) - (node.level - 1)]
            base += node.module.split(".") if node.module else []
            names = [".".join(["marshal_workers", *base, a.name]) for a in node.names]
        for name in names:
            if not name.startswith("marshal_workers."):
                continue
            parts = name.removeprefix("marshal_workers.").split(".")
            while parts and not (module_path(".".join(parts)).exists()):
                parts.pop()
            if parts:
                found.add(".".join(parts))
    return frozenset(found)


def modules_of(package: str) -> list[str]:
    """Every module of ``package``, its ``__init__`` as the package itself (and for
    ``plugins``, the bundled plugins it installs)."""
    out = []
    for path in sorted((PACKAGE / package).rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    if package == "plugins":
        out += [f"plugins.{p.stem}" for p in sorted(BUNDLED_PLUGINS.glob("*.py"))]
    return out


def reached(module: str) -> set[str]:
    """Every project module ``module`` imports, directly or through others (and their
    packages' ``__init__``, which Python runs first)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        todo.extend(project_imports(current))
        parts = current.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
    return seen - {module}


def test_the_table_names_every_package() -> None:
    """A new package gets its row: nothing is allowed by default."""
    assert sorted(ALLOWED) == PACKAGES


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_imports_only_what_its_row_allows(package: str) -> None:
    """Direct imports between packages follow the table."""
    wrong = sorted(
        f"{module} imports {target}"
        for module in modules_of(package)
        for target in project_imports(module)
        if (other := target.split(".")[0]) != package
        and other not in ALLOWED[package]
        and target not in ALLOWED_MODULES.get(package, set())
    )
    assert not wrong, wrong


@pytest.mark.parametrize("package", sorted(NEVER_REACHED))
def test_a_package_never_reaches_what_it_must_not(package: str) -> None:
    """The child never reaches the fold (transitively)."""
    wrong = sorted(
        f"{module} reaches {target}"
        for module in modules_of(package)
        for target in reached(module) & NEVER_REACHED[package]
    )
    assert not wrong, wrong


@pytest.mark.parametrize("package", ["child", "plugins"])
def test_the_child_loads_only_its_part_of_the_protocol(package: str) -> None:
    """What runs in the child reaches only `CHILD_PROTOCOL` of the protocol (transitively):
    a new protocol module is out of the child until someone says it belongs in."""
    wrong = sorted(
        f"{module} reaches {target}"
        for module in modules_of(package)
        for target in reached(module)
        if target.split(".")[0] == "protocol" and target not in CHILD_PROTOCOL
    )
    assert not wrong, wrong


def test_a_relative_import_counts_as_the_absolute_one() -> None:
    """``from ..log import kafkalog`` in the child is the child importing the log: a relative
    import must not slip past the table."""
    assert imports_in("from ..log import kafkalog", "child.loop") == {"log.kafkalog"}
    assert imports_in("from .grants import Asked", "child.loop") == {"child.grants"}
    assert imports_in("from . import loop", "child", is_package=True) == {"child.loop"}
    assert imports_in("from ..protocol.wire import ClaimKey", "core.member") == {"protocol.wire"}


def test_the_bundled_plugins_are_held_to_the_rules() -> None:
    """The plugins/ folder's handlers count as the package that installs them."""
    assert "plugins.ledger" in modules_of("plugins")
    assert "handler" in {t.split(".")[0] for t in project_imports("plugins.ledger")}


def test_every_package_says_what_it_holds() -> None:
    """Each package's docstring says what lives there, where it runs, what it may import."""
    for package in PACKAGES:
        doc = ast.get_docstring(ast.parse(module_path(package).read_text())) or ""
        assert len(doc.splitlines()) >= 3 and "import" in doc.lower(), package


@pytest.mark.parametrize(
    "cli", ["marshal_workers.admin.cli", "marshal_workers.audit.cli", "marshal_workers.sim.cli"]
)
def test_a_tool_does_not_import_the_fork_server(cli: str) -> None:
    """Importing a tool's command line leaves childlink.forkserver (whose guard runs at import) out,
    in a fresh interpreter."""
    code = f"import sys, {cli}; print('marshal_workers.childlink.forkserver' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "False"


def test_the_supervisor_does_not_import_the_child() -> None:
    """Importing the supervisor's run (as `marshal-run` does) loads of the child its entry points
    only (a child's and a host reader's), in a fresh interpreter: the child's loop, consumer and
    fencing (psutil) are loaded by the fork server, on the other core."""
    code = (
        "import sys, marshal_workers.supervisor.run\n"
        "print(sorted(m for m in sys.modules if m.startswith('marshal_workers.child.')"
        " or m == 'psutil'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == (
        "['marshal_workers.child.entry', 'marshal_workers.child.feedentry']"
    )


def test_the_bundled_plugins_are_named_as_installed() -> None:
    """Tests, benchmarks and the package import a bundled plugin, and name it as a handler,
    by the name the wheel installs (``marshal_workers.plugins.ledger``, or its entry point
    ``ledger``), never by the checkout's top-level ``plugins.ledger``: that name exists only
    with the repository's root on sys.path, so a test driving it drives a path no install has,
    and loads a second copy of the module beside the installed one."""
    checkout_name = re_compile(r"(?<![\w.])plugins\.(?:" + "|".join(
        p.stem for p in BUNDLED_PLUGINS.glob("*.py") if p.stem != "__init__"
    ) + r")\b")  # fmt: skip
    wrong = []
    for folder in ("tests", "bench", "marshal_workers", "plugins", "configs", "systemd", "docs"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in {".py", ".toml", ".md", ".service", ".env"}:
                continue
            if path == Path(__file__):
                continue
            tree_imports = []
            if path.suffix == ".py":
                for node in ast.walk(ast.parse(path.read_text())):
                    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                        tree_imports.append(node.module)
                    elif isinstance(node, ast.Import):
                        tree_imports += [a.name for a in node.names]
            bad = [m for m in tree_imports if m == "plugins" or m.startswith("plugins.")]
            bad += checkout_name.findall(path.read_text(encoding="utf-8"))
            if bad:
                wrong.append(f"{path.relative_to(ROOT)}: {sorted(set(bad))}")
    assert not wrong, wrong


# How deep an import chain inside admin/ may go: cli -> a command's module -> its operation ->
# a shared part (pause, targets) -> the connection -> the session.
ADMIN_CHAIN_LIMIT = 5


def private_imports(module: str) -> list[str]:
    """The underscore-private names ``module`` imports from another project module."""
    path = module_path(module)
    return private_imports_in(path.read_text(), module, is_package=path.name == "__init__.py")


def private_imports_in(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """The underscore-private names (``_name``, dunders aside) ``source`` (the code of
    ``module``) imports from another project module, each as ``module: from other import
    _name``; a relative import counts as the absolute one it stands for."""
    own_package = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 0:
            if not (node.module or "").startswith("marshal_workers."):
                continue
            source = (node.module or "").removeprefix("marshal_workers.")
        else:
            base = own_package[: len(own_package) - (node.level - 1)]
            source = ".".join(base + (node.module.split(".") if node.module else []))
        for alias in node.names:
            private = alias.name.startswith("_") and not alias.name.startswith("__")
            if private and source != module:
                found.append(f"{module}: from {source} import {alias.name}")
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    """A name with a leading underscore is its module's own: no module of the package (nor a
    bundled plugin) imports one from another; what modules share is public (admin's click
    helpers live in `admin.options`)."""
    found = [line for package in PACKAGES for m in modules_of(package) for line in
             private_imports(m)]  # fmt: skip
    assert found == []


def test_a_private_import_is_found() -> None:
    """The check above sees a private name imported, absolute or relative, and lets public
    names, dunders, renames to a private name and other libraries' names pass."""
    source = (
        "from marshal_workers.admin.options import _x, __version__\n"
        "from .options import _y, z\nfrom . import _w\nfrom os import _exit\n"
        "from marshal_workers.protocol.slicing import split_topic as _split\n"
    )
    assert private_imports_in(source, "admin.status") == [
        "admin.status: from admin.options import _x",
        "admin.status: from admin.options import _y",
        "admin.status: from admin import _w",
    ]


def admin_chain(module: str, seen: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The longest chain of imports inside admin/ that starts at ``module``."""
    if module in seen:
        raise AssertionError(f"import cycle: {' -> '.join((*seen, module))}")
    inner = sorted(m for m in project_imports(module) if m.startswith("admin."))
    longest: tuple[str, ...] = ()
    for other in inner:
        chain = admin_chain(other, (*seen, module))
        if len(chain) > len(longest):
            longest = chain
    return (module, *longest)


def test_the_admin_import_chains_are_short() -> None:
    """From `admin.cli` to the deepest module it loads, an admin import chain is at most
    ADMIN_CHAIN_LIMIT imports long: a command's module calls its operation, which stands on a
    few shared parts."""
    chains = [admin_chain(m) for m in modules_of("admin") if m != "admin"]
    longest = max(chains, key=len)
    assert len(longest) - 1 <= ADMIN_CHAIN_LIMIT, " -> ".join(longest)
    assert len(longest) - 1 >= 2  # the walk does see chains (so the bound can fail)


def module_level_imports(module: str) -> frozenset[str]:
    """The project modules ``module`` names at module level: its imports outside function
    bodies (an import inside a function runs when it is called), those for the type checker
    (``if TYPE_CHECKING:``) included."""
    path = module_path(module)
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            node.body = [ast.Pass()]
    source = ast.unparse(tree)
    return imports_in(source, module, is_package=path.name == "__init__.py", typing=True)


def import_cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """The cycles of an import graph (module -> the modules it imports), each as the path
    that closes it, found by depth-first search."""
    cycles: list[list[str]] = []
    state: dict[str, str] = {}  # "open" while on the path, "done" once every import is seen

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for other in sorted(graph.get(module, frozenset())):
            if state.get(other) == "open":
                cycles.append([*path[path.index(other) :], other])
            elif other not in state:
                visit(other, [*path, other])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_level_import_cycle_inside_a_package(package: str) -> None:
    """No two modules of a package import each other at module level, directly or around a
    longer circle (an import for the type checker counts: a circle of types is a circle of
    concepts; one inside a function does not): each package's modules stand in layers."""
    inside = [m for m in modules_of(package) if m != package]
    graph = {m: frozenset(i for i in module_level_imports(m) if i in inside) for m in inside}
    assert import_cycles(graph) == []


def test_an_import_cycle_is_found() -> None:
    """The cycle finder sees a direct and a longer circle, and no circle in a chain."""
    assert import_cycles({"a": frozenset({"b"}), "b": frozenset({"a"})}) == [["a", "b", "a"]]
    chain = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset()}
    assert import_cycles(chain) == []
    circle = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"})}
    assert import_cycles(circle) == [["a", "b", "c", "a"]]
