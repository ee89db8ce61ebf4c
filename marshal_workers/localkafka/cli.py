"""The `kafka` command group (`marshal-admin kafka ...`, `python -m marshal_workers.localkafka`).

Parsing only: each command calls `start_cluster`, `stop_cluster`, `cluster_status` or
`resolve_jars`. Progress goes to stderr; `start` prints `bootstrap.servers=...` as the last
line of stdout. Failures are MarshalErrors, printed as one line by the entry point.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from marshal_workers.common.consolescripts import run_command
from marshal_workers.common.errors import EXIT_OK, EXIT_RUNTIME, MarshalError
from marshal_workers.localkafka import process, registry
from marshal_workers.localkafka.backend import BACKENDS
from marshal_workers.localkafka.cluster import (
    ClusterStatus,
    LocalKafka,
    StartOptions,
    cluster_status,
    start_cluster,
    stop_cluster,
)
from marshal_workers.localkafka.jars import resolve_jars
from marshal_workers.localkafka.paths import DIR_ENV, default_cache_dir, default_cluster_dir
from marshal_workers.localkafka.state import load_state, state_path


def _progress(message: str) -> None:
    """Print a progress line to stderr."""
    click.echo(message, err=True)


_dir_option = click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Cluster directory (default: $MARSHAL_KAFKA_DIR or ./.marshal/kafka).",
)


@click.group("kafka", context_settings={"help_option_names": ["-h", "--help"]})
def kafka() -> None:
    """A real local Apache Kafka (KRaft, 127.0.0.1 only) for development, demos and tests."""


@kafka.command()
@_dir_option
@click.option("--nodes", type=click.Choice(["1", "3"]), default=None, help="Cluster size (1).")
@click.option(
    "--backend",
    type=click.Choice(BACKENDS),
    default=None,
    help="Where Kafka comes from (default: $MARSHAL_KAFKA_BACKEND or auto).",
)
@click.option("--timeout", type=float, default=None, help="Seconds to wait for readiness (120).")
@click.option(
    "--fresh",
    is_flag=True,
    help="Format a brand-new cluster even if one is recorded in --dir (its data is lost).",
)
@click.option(
    "--secure",
    is_flag=True,
    help="SASL/SCRAM-SHA-512 over TLS (a CA and certificates made now), the StandardAuthorizer, "
    "no access without an ACL; the super user admin's --config file is printed.",
)
def start(
    directory: Path | None,
    nodes: str | None,
    backend: str | None,
    timeout: float | None,
    fresh: bool,
    secure: bool,
) -> None:
    """Start a cluster (or find the running one); print bootstrap.servers=... last.

    A recorded cluster with dead nodes keeps its data: only the dead nodes are started again,
    from their own data and ports. --fresh formats a new one instead. A secured cluster also
    prints config=FILE: the admin's --config (bootstrap servers and [kafka] table)."""
    options = StartOptions(
        directory=directory or default_cluster_dir(),
        nodes=int(nodes) if nodes else None,
        backend=backend,
        timeout=timeout,
        fresh=fresh,
        secure=secure,
    )
    cluster = start_cluster(options, progress=_progress)
    registry.remember(cluster.directory)  # so that `stop` run elsewhere finds it
    if cluster.admin_config_file is not None:
        click.echo(f"config={cluster.admin_config_file}")
    click.echo(f"bootstrap.servers={cluster.bootstrap}")


@kafka.command()
@_dir_option
@click.argument("name")
def user(directory: Path | None, name: str) -> None:
    """Create (or reset) the SCRAM user NAME on a secured cluster, with a new password; print
    config=FILE, its --config (bootstrap servers and [kafka] table, mode 0600). It may do
    nothing until an ACL allows it (marshal-admin acls)."""
    where = directory or default_cluster_dir()
    found = cluster_status(where)
    if found is None or not found.running:
        raise MarshalError(f"no running local Kafka in {where.resolve()}: kafka start --secure")
    handle = LocalKafka(found.directory, found.state)
    click.echo(f"config={handle.add_user(name)}")


@kafka.command()
@_dir_option
def stop(directory: Path | None) -> None:
    """Stop the cluster and forget it; return once its JVMs are gone.

    Without --dir (or $MARSHAL_KAFKA_DIR) and no cluster in ./.marshal/kafka, it stops the one
    cluster this user started elsewhere (`kafka start` notes each). Exit 1 if it stops nothing,
    saying where it looked."""
    where = (directory or default_cluster_dir()).resolve()
    if state_path(where).exists():
        _stop_and_forget(where)
        return
    if directory is not None or os.environ.get(DIR_ENV):
        raise MarshalError(f"no local Kafka recorded in {where}: nothing stopped", EXIT_RUNTIME)
    others = [d for d in registry.started() if d != where]
    if len(others) == 1:
        _progress(f"kafka: no local Kafka in {where}; stopping the one started in {others[0]}")
        _stop_and_forget(others[0])
        return
    if not others:
        raise MarshalError(
            f"no local Kafka recorded in {where}, nor among those this user started "
            f"({registry.registry_path()}): nothing stopped (name one with --dir)",
            EXIT_RUNTIME,
        )
    raise MarshalError(
        f"no local Kafka recorded in {where}; this user started {len(others)} elsewhere: "
        f"{', '.join(map(str, others))}: nothing stopped (name one with --dir)",
        EXIT_RUNTIME,
    )


def _stop_and_forget(where: Path) -> None:
    """Stop the cluster in ``where``, forget it, and check that its JVMs are gone."""
    state = load_state(where)
    stop_cluster(where, progress=_progress)
    registry.forget(where)
    nodes = [] if state is None else [n for n in state.nodes if not n.container_id]
    left = [n.pid for n in nodes if process.is_alive(n)]
    if left:
        raise MarshalError(f"kafka: node process(es) {left} still run after the stop", EXIT_RUNTIME)


@kafka.command()
@_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
def status(directory: Path | None, as_json: bool) -> None:
    """Show the nodes, pids and ports; exit 0 if every node is alive, else 1."""
    where = directory or default_cluster_dir()
    found = cluster_status(where)
    if as_json:
        data = found.to_json() if found else {"directory": str(where.resolve()), "running": False}
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(_describe(found, where))
    # sys.exit, not ctx.exit: with standalone_mode=False click returns ctx.exit's code
    # from main() instead of exiting, and the entry points do not look at it.
    sys.exit(EXIT_OK if found is not None and found.running else EXIT_RUNTIME)


def _describe(found: ClusterStatus | None, where: Path) -> str:
    """Human lines for `status`."""
    if found is None:
        return f"kafka: not running (nothing recorded in {where.resolve()})"
    state = found.state
    word = "running" if found.running else "NOT running (some nodes are dead)"
    if (found.directory / "secure").is_dir():
        word += ", secured (SASL_SSL, ACLs required)"
    lines = [
        f"kafka: {word}; {len(state.nodes)} node(s), backend {state.backend}, in {found.directory}",
        f"bootstrap.servers={state.bootstrap}",
    ]
    for node in state.nodes:
        alive = "alive" if found.alive.get(node.node_id) else "dead"
        runs = f"container {node.container_id[:12]}" if node.container_id else f"pid {node.pid}"
        lines.append(
            f"  node {node.node_id}: {runs}, broker {node.bootstrap}, "
            f"controller port {node.controller_port}, {alive}"
        )
    return "\n".join(lines)


@kafka.command()
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Jar cache (default: $MARSHAL_KAFKA_CACHE or ~/.cache/marshal-workers/kafka-VERSION).",
)
def fetch(cache_dir: Path | None) -> None:
    """Resolve the pinned Kafka jars into the cache (for CI installs); print their directory."""
    libs = resolve_jars(cache_dir or default_cache_dir(), progress=_progress)
    click.echo(str(libs))


def main() -> None:
    """Entry point of `python -m marshal_workers.localkafka`."""
    run_command(kafka, "python -m marshal_workers.localkafka")
