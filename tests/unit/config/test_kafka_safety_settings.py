"""What safety needs of a Kafka client is pinned, and a ``[kafka]`` table that changes it is
refused when the configuration is read.

The coordination producer must write with ``acks=all`` and idempotence (else an acknowledged
claim can be lost on a leader failover, and a retry can reorder or duplicate records), and
every coordination reader must fold the same records (``isolation.level=read_committed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from marshal_workers.admin import targets
from marshal_workers.clients import roles
from marshal_workers.clients.kafkaconfig import SAFE_PRODUCER, client_config
from marshal_workers.common.errors import ConfigError
from marshal_workers.config.settings import resolve
from marshal_workers.log import kafkalog
from marshal_workers.supervisor import datatopics
from tests.unit.config.test_setting_checks import RUN, UNREACHABLE, _one_error_line, _run

UNSAFE = [
    ("acks", "1"),
    ("acks", "0"),
    ("enable.idempotence", "false"),
    ("isolation.level", "read_uncommitted"),
]


@pytest.mark.parametrize(("name", "value"), UNSAFE)
def test_a_kafka_table_that_changes_safety_is_refused(
    tmp_path: Path, name: str, value: str
) -> None:
    """acks, idempotence or the isolation level changed in [kafka]: ConfigError (exit 2)
    naming the property and the file."""
    toml = tmp_path / "fleet.toml"
    toml.write_text(f'[kafka]\n"{name}" = "{value}"\n')
    with pytest.raises(ConfigError) as caught:
        resolve({}, toml, environ={})
    assert name in str(caught.value) and str(toml) in str(caught.value)
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    ("name", "value"),
    [("acks", "all"), ("acks", "-1"), ("enable.idempotence", "true"),
     ("isolation.level", "read_committed")],
)  # fmt: skip
def test_a_kafka_table_that_repeats_the_safe_value_passes(
    tmp_path: Path, name: str, value: str
) -> None:
    """Writing down the value safety needs anyway is not a change: it passes."""
    toml = tmp_path / "fleet.toml"
    toml.write_text(f'[kafka]\n"{name}" = "{value}"\n')
    assert dict(resolve({}, toml, environ={}).kafka) == {name: value}


def test_marshal_run_with_acks_1_exits_2_with_one_line(tmp_path: Path) -> None:
    """`marshal-run --config` whose [kafka] sets acks = 1: exit 2, one line naming both."""
    toml = tmp_path / "fleet.toml"
    toml.write_text(f'bootstrap_servers = "{UNREACHABLE}"\n[kafka]\n"acks" = "1"\n')
    done = _run([*RUN, "--config", str(toml)])
    line = _one_error_line(done)
    assert done.returncode == 2
    assert "acks" in line and str(toml) in line


class BuiltError(Exception):
    """Raised by the fake clients once they have recorded their configuration."""


def test_the_coordination_clients_pin_safety_over_the_users_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Even a table that skipped the check (a caller passing it straight) cannot reach the
    coordination producer or reader with acks=1, no idempotence or read_uncommitted."""
    configs: dict[str, Mapping[str, Any]] = {}

    class FakeConsumer:
        def __init__(self, config: Mapping[str, Any]) -> None:
            configs.setdefault("consumer", dict(config))

        def close(self) -> None:
            pass

    class FakeProducer:
        def __init__(self, config: Mapping[str, Any]) -> None:
            configs["producer"] = dict(config)
            raise BuiltError

    monkeypatch.setattr(roles, "Consumer", FakeConsumer)
    monkeypatch.setattr(roles, "Producer", FakeProducer)
    unsafe = {"acks": "1", "enable.idempotence": "false", "isolation.level": "read_uncommitted"}
    with pytest.raises(BuiltError):
        kafkalog.KafkaLog("127.0.0.1:1", extra_config=unsafe)
    assert configs["producer"]["acks"] == "all"
    assert configs["producer"]["enable.idempotence"] is True
    assert configs["consumer"]["isolation.level"] == "read_committed"


def test_the_layers_merge_in_the_documented_order() -> None:
    """Shared defaults < tuned < the user's table < bootstrap and fixed < pinned."""
    built = client_config(
        "k1:9092",
        {"linger.ms": "7", "group.id": "mine", "acks": "1", "bootstrap.servers": "x:1"},
        tuned={"linger.ms": 2, "fetch.wait.max.ms": 100},
        fixed={"group.id": "marshal"},
        pinned=SAFE_PRODUCER,
    )
    assert built["linger.ms"] == "7"  # the user's table over a tuned value
    assert built["fetch.wait.max.ms"] == 100  # a tuned value the user left alone
    assert built["group.id"] == "marshal"  # what the use needs over the user's table
    assert built["bootstrap.servers"] == "k1:9092"
    assert built["acks"] == "all"  # safety last
    assert built["reconnect.backoff.ms"] == 10 and built["logger"] is not None  # shared


def test_every_data_consumer_keeps_its_own_group_id_over_the_table() -> None:
    """The supervisor's and the admin's metadata consumers merged [kafka] in opposite orders;
    both now keep their own group.id and commits off whatever the table says."""
    table = {"group.id": "theirs", "enable.auto.commit": "true"}
    seen: list[dict[str, Any]] = []

    class Recording:
        def __init__(self, config: dict[str, Any]) -> None:
            seen.append(config)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(roles, "Consumer", Recording)
        datatopics.DataTopics("k1:9092", "g", ["t"], extra_config=table)
        targets.KafkaOffsetSource("k1:9092", extra_config=table)
    assert len(seen) == 2
    for config in seen:
        assert config["group.id"].startswith("marshal-") and config["enable.auto.commit"] is False


def test_bootstrap_servers_in_the_table_is_refused(tmp_path: Path) -> None:
    """[kafka] bootstrap.servers would be overridden by the setting: refused, naming both."""
    toml = tmp_path / "fleet.toml"
    toml.write_text('[kafka]\n"bootstrap.servers" = "k1:9092"\n')
    with pytest.raises(ConfigError, match=r"bootstrap\.servers.*fleet\.toml.*bootstrap_servers"):
        resolve({}, toml, environ={})


# Read from the code with `ast`: every client the package builds is built by its role's builder
# (clients/roles.py), from the one builder's config.
CLIENT_CLASSES = {"Consumer", "Producer", "AdminClient", "ShareConsumer"}
CLIENTS = set(roles.ROLES)  # the role builders
PACKAGE = Path(__file__).resolve().parents[3] / "marshal_workers"
BUNDLED_PLUGINS = PACKAGE.parent / "plugins"
NOT_CLIENTS: set[str] = set()


def _client_classes_called(source: str) -> list[str]:
    """The calls of ``source`` that build a Kafka client class directly."""
    import ast  # noqa: PLC0415

    def name(func: ast.expr) -> str:
        return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")

    return [
        ast.unparse(call)[:90]
        for call in ast.walk(ast.parse(source))
        if isinstance(call, ast.Call) and name(call.func) in CLIENT_CLASSES
    ]


def test_no_client_is_built_outside_clients() -> None:
    """No ``Producer(``, ``Consumer(`` or ``AdminClient(`` in the package or the bundled
    plugins outside ``clients/``: every client is built by its role's builder, which owns its
    pins (a new producer cannot forget acks=all)."""
    files = [*PACKAGE.rglob("*.py"), *BUNDLED_PLUGINS.rglob("*.py")]
    wrong = [
        f"{path}: {call}"
        for path in files
        if path.parent != PACKAGE / "clients"
        for call in _client_classes_called(path.read_text())
    ]
    assert not wrong, wrong
    assert _client_classes_called("x = confluent_kafka.Producer(c)")  # the scan has teeth
    assert _client_classes_called("AdminClient({'a': 1})")


def test_every_role_lays_its_pins_last(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each role's builder builds its client class with its pins over whatever it was given;
    the read-only roles build no producer."""
    built: list[tuple[str, dict[str, Any]]] = []

    def recording(kind: str) -> Any:
        return lambda config: built.append((kind, dict(config)))

    for kind in ("Producer", "Consumer", "AdminClient"):
        monkeypatch.setattr(roles, kind, recording(kind))
    unsafe = {"acks": "0", "enable.idempotence": False, "isolation.level": "read_uncommitted",
              "enable.auto.commit": True, "allow.auto.create.topics": True}  # fmt: skip
    for role, (kind, pins) in roles.ROLES.items():
        built.clear()
        getattr(roles, role)(unsafe)
        assert built[0][0] == kind, role
        assert {k: built[0][1][k] for k in pins} == dict(pins), role
    for role in ("coordination_reader", "data_consumer", "admin"):
        assert roles.ROLES[role][0] != "Producer"
    assert roles.ROLES["coordination_producer"][1]["acks"] == "all"
    assert roles.ROLES["dead_letter_producer"][1]["enable.idempotence"] is True


def test_no_client_that_asks_for_metadata_by_name_creates_a_topic() -> None:
    """The admin client (a producer handle in librdkafka, where topic creation on a metadata
    request is on by default) and the data topics' consumer ask for topics by name; on a broker
    that creates topics on such a request (Kafka's default) the admin's `status` recreated a
    deleted data topic the log still named (a review). Every role pins creation off, whatever
    the [kafka] table says."""
    for role, (_, pins) in roles.ROLES.items():
        assert pins.get("allow.auto.create.topics") is False, role


def _unbuilt_clients(source: str) -> list[str]:
    """The client constructions of ``source`` whose configuration is not the builder's: the
    argument must be a `client_config(...)` call, or a name, ``self.`` attribute or module
    function whose every assignment, return or caller's argument is one, checked the same way."""
    import ast  # noqa: PLC0415

    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    functions = {
        n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    }

    def name_of(expr: ast.expr) -> str:
        return expr.attr if isinstance(expr, ast.Attribute) else getattr(expr, "id", "")

    def enclosing(node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        while node in parents:
            node = parents[node]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                return node
        return None

    def built(expr: ast.expr | None, seen: frozenset[str] = frozenset()) -> bool:
        if expr is None:
            return False
        key = ast.dump(expr)
        if key in seen:
            return False
        seen |= {key}
        if isinstance(expr, ast.Call):
            called = name_of(expr.func)
            if called == "client_config":
                return True
            returns = [
                r.value for r in ast.walk(functions[called]) if isinstance(r, ast.Return)
            ] if called in functions else []  # fmt: skip
            return bool(returns) and all(built(r, seen) for r in returns)
        if not isinstance(expr, ast.Name | ast.Attribute):
            return False
        target = ast.unparse(expr)
        assigned = [
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Assign | ast.AnnAssign)
            and any(ast.unparse(t) == target for t in (n.targets if isinstance(n, ast.Assign)
                                                      else [n.target]))
        ]  # fmt: skip
        if assigned:
            return all(built(v, seen) for v in assigned)
        function = enclosing(expr)  # a parameter: what every caller in the module passes
        if function is None or not isinstance(expr, ast.Name):
            return False
        params = [a.arg for a in function.args.args]
        if expr.id not in params:
            return False
        index = params.index(expr.id) - (1 if params and params[0] == "self" else 0)
        calls = [
            c for c in ast.walk(tree)
            if isinstance(c, ast.Call) and name_of(c.func) == function.name
        ]  # fmt: skip
        return bool(calls) and all(
            index < len(c.args) and built(c.args[index], seen) for c in calls
        )

    return [
        ast.unparse(call)[:90]
        for call in ast.walk(tree)
        if isinstance(call, ast.Call) and name_of(call.func) in CLIENTS
        if not built(call.args[0] if call.args else None)
    ]


def test_every_client_the_package_builds_takes_the_one_builders_config() -> None:
    """Every role builder the package calls is given a `client_config` (shared defaults, the
    user's table, what the use needs, in one order), never a dict of its own (thirteen places
    once merged [kafka] in their own order)."""
    wrong = [
        f"{path.relative_to(PACKAGE)}: {call}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if str(path.relative_to(PACKAGE)) not in NOT_CLIENTS
        for call in _unbuilt_clients(path.read_text())
    ]
    assert not wrong, wrong


def test_the_client_scan_tells_a_built_config_from_a_hand_made_one() -> None:
    """The scan above on small cases: a literal dict, or a merge of the table by hand, is
    refused; the builder called directly, through a name, a helper or a parameter passes."""
    assert _unbuilt_clients("data_consumer({'bootstrap.servers': b, **table})")
    assert _unbuilt_clients("c = {**table, 'acks': 'all'}\ncoordination_producer(c)")
    assert _unbuilt_clients("def f(config):\n    return coordination_producer(config)\nf({'a': 1})")
    assert not _unbuilt_clients("data_consumer(client_config(b, table, fixed=f))")
    assert not _unbuilt_clients("c = client_config(b)\ncoordination_producer(c)")
    assert not _unbuilt_clients("def cfg(s):\n    return client_config(s.b)\ndata_consumer(cfg(s))")
    assert not _unbuilt_clients(
        "class K:\n"
        "    def __init__(self):\n"
        "        pc = client_config(b)\n"
        "        self._pc = pc\n"
        "        self._p = self._new(pc)\n"
        "    def _new(self, config):\n"
        "        return coordination_producer(config)\n"
        "    def again(self):\n"
        "        return coordination_producer(self._pc)\n"
    )
