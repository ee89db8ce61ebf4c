"""Least privilege as data: the Kafka ACLs each role needs, printed, applied, and documented.

One table (`ROLES`) says, for each role, which operations on which resources it needs and why;
`marshal-admin acls` prints it for one principal (or creates it through the Admin API with
``--apply``), and docs/operating.md's table is rendered from it (`docs_table`; a test keeps the
page in step). Every grant was found by trying, on a broker with the StandardAuthorizer and
``allow.everyone.if.no.acl.found=false``: each role's commands pass with exactly these, and a
test per role shows what else it is refused.

Names in a grant stand for the fleet's: ``{coordination}`` is the coordination topic,
``{topic}`` each data topic (``--topic``, repeatable), ``{group}`` the group, ``{dlq}`` each
dead-letter topic (``--dlq-topic``, only given for a fleet that dead-letters). Decisions:

- The idempotent producer needs IdempotentWrite on the cluster, which Write on any topic
  implies (Kafka 3.0 and later): no cluster grant for it. No transactional ids are used.
- The consumers that only read set throw-away group ids (librdkafka wants one, all starting
  ``marshal-``) that never join or commit. librdkafka still looks their coordinator up, about
  every second while refused: reading works without, but the broker's authorizer log fills
  with denials, so Describe on groups prefixed ``marshal-`` is granted (optional).
- Write on the coordination topic cannot be narrowed to a group or to a kind of record (Kafka
  ACLs know topics, not record contents): a worker principal can write what an operator can.
  The fold stops a worker from pausing its group (only ``admin_client_ids`` may) and ignores
  its records about other groups; only separate coordination topics, each with its own
  principals, stop a writer that means harm (docs/operating.md, the residual risk).
- Cluster DescribeConfigs is optional for a worker and for init: without it the heartbeat
  check cannot run, and they say so once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import click
from confluent_kafka import KafkaException

# confluent_kafka.admin re-exports these without an __all__, which mypy --strict refuses.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from marshal_workers.clients.rdkafka import error_text
from marshal_workers.common.errors import ConfigError, MarshalError
from marshal_workers.config.toolconfig import FleetSettings, fleet_options
from marshal_workers.log.topicadmin import admin_client

CLUSTER_NAME: Final = "kafka-cluster"
_RESOURCE_TYPES: Final = {
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "cluster": ResourceType.BROKER,  # librdkafka's name for the cluster resource
}
_UPPER_SNAKE: Final = re.compile(r"([a-z])([A-Z])")


@dataclass(frozen=True, slots=True)
class Grant:
    """Operations on one resource (``{placeholder}`` names stand for the fleet's)."""

    resource: str  # topic, group or cluster
    name: str
    operations: tuple[str, ...]
    why: str
    optional: bool = False  # the role works without it (and says what it could not do)
    prefixed: bool = False  # ``name`` is a prefix of the resources' names


@dataclass(frozen=True, slots=True)
class Acl:
    """One ALLOW ACL for one principal, as Kafka stores it (literal resource names)."""

    principal: str
    resource: str
    name: str
    operation: str
    prefixed: bool = False

    def line(self) -> str:
        """As `marshal-admin acls` prints it."""
        prefix = " (prefixed)" if self.prefixed else ""
        return f"ALLOW {self.principal} {self.operation} {self.resource} {self.name}{prefix}"


COORDINATION = "{coordination}"
TOPIC = "{topic}"
GROUP = "{group}"
DLQ = "{dlq}"
SCRATCH_GROUPS = "marshal-"
_SCRATCH = Grant(
    "group", SCRATCH_GROUPS, ("Describe",),
    "throw-away group ids of consumers that never join or commit", optional=True, prefixed=True,
)  # fmt: skip

ROLES: Final[Mapping[str, tuple[Grant, ...]]] = {
    "worker": (
        Grant("topic", COORDINATION, ("Read", "Write", "Describe", "DescribeConfigs"),
              "fold and write claims; the topic's settings are checked at start"),
        Grant("topic", TOPIC, ("Read", "Describe"), "the children read records and watermarks"),
        Grant("group", GROUP, ("Read",), "the positions mirrored to the group's offsets"),
        Grant("topic", DLQ, ("Write", "Describe"), "dead letters (on_failure dlq only)"),
        Grant("cluster", CLUSTER_NAME, ("DescribeConfigs",),
              "the heartbeat-interval check reads the brokers' failure detection", True),
        _SCRATCH,
    ),
    "operator": (
        Grant("topic", COORDINATION, ("Read", "Write", "Describe"),
              "release-group, set-position, group-settings --change and --move, skip-record, "
              "retry-record"),
        Grant("topic", TOPIC, ("Describe",), "watermarks and offsets by time"),
        Grant("group", GROUP, ("Read",), "set-position commits the group's new offsets"),
        _SCRATCH,
    ),
    "reader": (
        Grant("topic", COORDINATION, ("Read", "Describe"), "status, dump, group-settings"),
        Grant("topic", TOPIC, ("Describe",), "status's lag (watermarks)"),
        _SCRATCH,
    ),
    "auditor": (
        Grant("topic", COORDINATION, ("Read", "Describe", "DescribeConfigs"),
              "marshal-audit reads the log (Spark's Kafka source) and checks its timestamps "
              "are the broker's"),
        _SCRATCH,
    ),
    "init": (
        Grant("topic", COORDINATION, ("Create", "Describe", "DescribeConfigs", "Read", "Write"),
              "create the topic, check its settings, record and read its partition count"),
        Grant("cluster", CLUSTER_NAME, ("DescribeConfigs",),
              "the heartbeat-interval check reads the brokers' failure detection", True),
        _SCRATCH,
    ),
}  # fmt: skip
ROLE_NAMES: Final = tuple(ROLES)


def acls_for(
    role: str,
    principal: str,
    coordination_topic: str,
    *,
    group: str | None = None,
    topics: Sequence[str] = (),
    dlq_topics: Sequence[str] = (),
    optional: bool = True,
) -> list[Acl]:
    """The ACLs ``principal`` needs for ``role`` on this fleet (ConfigError if one it needs is
    not named: a worker's group). A grant on data or dead-letter topics is left out when none
    is named; ``optional`` grants are included unless ``optional`` is False."""
    if role not in ROLES:
        raise ConfigError(f"unknown role {role!r}: one of {', '.join(ROLE_NAMES)}")
    if not principal.startswith("User:") or principal == "User:":
        raise ConfigError(f"--principal {principal!r}: write it as User:NAME")
    names: dict[str, Sequence[str]] = {
        COORDINATION: (coordination_topic,),
        TOPIC: topics,
        DLQ: dlq_topics,
        GROUP: (group,) if group else (),
        CLUSTER_NAME: (CLUSTER_NAME,),
        SCRATCH_GROUPS: (SCRATCH_GROUPS,),
    }
    out: list[Acl] = []
    for grant in ROLES[role]:
        if grant.optional and not optional:
            continue
        if grant.name == GROUP and not group:
            raise ConfigError(f"the {role} role needs --group (the group it works for)")
        for name in names[grant.name]:
            out.extend(
                Acl(principal, grant.resource, name, op, grant.prefixed) for op in grant.operations
            )
    return out


def _cell(name: str) -> str:
    return {
        COORDINATION: "`__marshal` (the coordination topic)",
        TOPIC: "data topics",
        DLQ: "dead-letter topics (`on_failure = dlq`)",
        GROUP: "group `G` (the group id)",
        CLUSTER_NAME: "the cluster",
        SCRATCH_GROUPS: "groups prefixed `marshal-`",
    }[name]


def docs_table() -> str:
    """docs/operating.md's table of the roles' ACLs (Markdown), from `ROLES`."""
    lines = ["| Role | Resource | Operations | What for |", "|---|---|---|---|"]
    for role, grants in ROLES.items():
        for i, grant in enumerate(grants):
            ops = ", ".join(grant.operations) + (" (optional)" if grant.optional else "")
            first = f"`{role}`" if i == 0 else ""
            lines.append(f"| {first} | {_cell(grant.name)} | {ops} | {grant.why} |")
    return "\n".join(lines)


def render(acls: Iterable[Acl]) -> list[str]:
    """One line per ACL, as `marshal-admin acls` prints them."""
    return [acl.line() for acl in acls]


def apply_acls(admin: Any, acls: Sequence[Acl], timeout_s: float = 30.0) -> None:
    """Create ``acls`` through the Admin API (ALLOW, any host); MarshalError
    naming the first Kafka refused (creating ACLs needs Alter on the cluster)."""
    bindings = [
        AclBinding(
            _RESOURCE_TYPES[acl.resource],
            acl.name,
            ResourcePatternType.PREFIXED if acl.prefixed else ResourcePatternType.LITERAL,
            acl.principal,
            "*",
            getattr(AclOperation, _UPPER_SNAKE.sub(r"\1_\2", acl.operation).upper()),
            AclPermissionType.ALLOW,
        )
        for acl in acls
    ]
    if not bindings:
        return
    futures = admin.create_acls(bindings, request_timeout=timeout_s)
    for binding, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            raise MarshalError(f"cannot create the ACL {binding}: {error_text(exc)}") from None
        except TimeoutError:
            raise MarshalError(f"no answer creating the ACL {binding}") from None


@click.command("acls")
@fleet_options
@click.option(
    "--role", type=click.Choice(ROLE_NAMES), required=True, help="What the principal does."
)
@click.option("--principal", required=True, metavar="User:NAME", help="Whom the ACLs allow.")
@click.option(
    "--group", default=None, help="The group it works for [default: the --config file's]."
)
@click.option("--topic", "topics", multiple=True, metavar="TOPIC", help="A data topic (repeat).")
@click.option(
    "--dlq-topic",
    "dlq_topics",
    multiple=True,
    metavar="TOPIC",
    help="A dead-letter topic the workers write (on_failure dlq; repeat).",
)
@click.option(
    "--apply",
    "apply_them",
    is_flag=True,
    help="Create them through the Admin API (as a principal allowed to: Alter on the cluster).",
)
def acls(
    fleet: FleetSettings,
    role: str,
    principal: str,
    group: str | None,
    topics: tuple[str, ...],
    dlq_topics: tuple[str, ...],
    apply_them: bool,
) -> None:
    """Print exactly the ACLs ROLE needs (one per line: ALLOW PRINCIPAL OPERATION RESOURCE
    NAME), or create them with --apply. The table is docs/operating.md's."""
    wanted = acls_for(
        role,
        principal,
        fleet.coordination_topic,
        group=group or fleet.group,
        topics=topics,
        dlq_topics=dlq_topics,
    )
    for line in render(wanted):
        click.echo(line)
    if not topics and role not in {"auditor", "init"}:
        click.echo("acls: no --topic given: no grant on data topics", err=True)
    if apply_them:
        apply_acls(admin_client(fleet.bootstrap_servers, fleet.kafka), wanted)
        click.echo(f"acls: created {len(wanted)} ACL(s) for {principal}", err=True)
