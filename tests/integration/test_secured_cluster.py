"""A fleet, the admin commands and their refusals on a secured broker: SASL/SCRAM over TLS, the
StandardAuthorizer, no access without an ACL (`secure_kafka`). Each role gets exactly the ACLs
`marshal-admin acls --role R --apply` creates; each can do its job and is refused the rest with
one line and the documented exit code."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer

from marshal_workers.admin.acls import acls_for, apply_acls
from marshal_workers.common.ledgerfile import LedgerRow, read_ledger
from marshal_workers.localkafka import LocalKafka
from marshal_workers.log.topicadmin import admin_client
from marshal_workers.protocol.members import member_key
from marshal_workers.protocol.placement import placed
from marshal_workers.protocol.slicing import Ordering, Slice
from marshal_workers.protocol.wire import Heartbeat, encode, record_key
from tests.integration.fleet import MARSHAL_ADMIN, MARSHAL_RUN, REPO, http_get

pytestmark = pytest.mark.kafka


@dataclass
class Secured:
    """One fleet's names on the secured broker, and a --config file per principal."""

    cluster: LocalKafka
    root: Path
    coordination: str
    topic: str
    group: str
    configs: dict[str, Path]

    def admin(
        self, who: str, *args: str, env: dict[str, str] | None = None, coordination: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """`marshal-admin ARGS` as ``who`` (a principal's --config), on this fleet's topic."""
        command = [str(MARSHAL_ADMIN), *args, "--config", str(self.configs[who])]
        if coordination and args[0] != "topic":  # a data topic's command knows no __marshal
            command += ["--coordination-topic", self.coordination]
        base = {k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")}
        return subprocess.run(
            command, capture_output=True, text=True, timeout=120, check=False,
            env={**base, **(env or {})},
        )  # fmt: skip

    def run_member(
        self, who: str, client_id: str, *args: str, topic: str = "", group: str = "",
        ledger: str = "ledger",
    ) -> subprocess.Popen[bytes]:  # fmt: skip
        """A `marshal-run` (ledger handler, HB 2 s) as ``who`` (on this fleet's topic and group
        unless told); its log in ``root``, its ledger in ``root / ledger``."""
        command = [
            str(MARSHAL_RUN), "--handler", "ledger", "--mode", "alo", "--topic",
            topic or self.topic, "--group", group or self.group, "--client-id", client_id,
            "--config", str(self.configs[who]), "--coordination-topic", self.coordination,
            "--heartbeat-interval", "2", "--log-format", "json", *args,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")}
        env |= {"PYTHONPATH": str(REPO), "MARSHAL_LEDGER_DIR": str(self.root / ledger),
                "XDG_RUNTIME_DIR": str(self.root / "run")}  # fmt: skip
        out = (self.root / f"{client_id}.log").open("ab")
        return subprocess.Popen(command, env=env, stdout=out, stderr=out, start_new_session=True)

    def worker_of(self, who: str, group: str, topic: str) -> None:
        """A new principal ``who`` with only the worker role's ACLs, for ``group`` and
        ``topic`` (a fleet of its own beside this one's)."""
        self.configs[who] = self.cluster.add_user(who)
        acls = acls_for("worker", f"User:{who}", self.coordination, group=group, topics=[topic])
        apply_acls(admin_client(self.cluster.bootstrap, self.cluster.client_table), acls)

    def grant(self, who: str, role: str, *, optional: bool = True) -> None:
        """Create the ACLs of ``role`` for ``who`` (as the super user)."""
        acls = acls_for(
            role, f"User:{who}", self.coordination, group=self.group, topics=[self.topic],
            optional=optional,
        )  # fmt: skip
        apply_acls(admin_client(self.cluster.bootstrap, self.cluster.client_table), acls)


def to_earliest(secured: Secured) -> tuple[str, ...]:
    """`set-position` of the fleet's group and topic to its earliest records (``--new-topic``:
    the topic is the group's only once a worker test has run)."""
    return ("set-position", "--group", secured.group, "--topic", secured.topic, "--to-earliest",
            "--new-topic")  # fmt: skip


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one stderr line of a failed command (no traceback, nothing else)."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def secured(
    secure_kafka: LocalKafka, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Secured]:
    """A fleet's topics and principals on the session's secured broker: admin (super user),
    one user per role with that role's ACLs, an intruder with none; the topic made by init,
    the group's settings recorded."""
    uid = uuid.uuid4().hex[:6]
    root = tmp_path_factory.mktemp("secured")
    configs = {"admin": secure_kafka.admin_config_file}
    names = ("init", "worker", "operator", "reader", "auditor", "intruder", "worker-nocluster")
    for who in names:
        configs[who] = secure_kafka.add_user(f"{who}-{uid}")
    fleet = Secured(
        secure_kafka, root, f"__marshal_{uid}", f"orders_{uid}", f"billing_{uid}",
        {k: v for k, v in configs.items() if v is not None},
    )  # fmt: skip
    for role in ("init", "worker", "operator", "reader", "auditor"):
        fleet.grant(f"{role}-{uid}", role)
    fleet.grant(f"worker-nocluster-{uid}", "worker", optional=False)
    done = fleet.admin("init", "init", "--partitions", "2")
    assert done.returncode == 0, done.stderr
    made = fleet.admin("admin", "topic", "create", fleet.topic, "--partitions", "2")
    assert made.returncode == 0, made.stderr
    # the group's settings recorded before any member starts (as its members run it): the
    # group is known to every test, whichever runs first or alone (they depended on the
    # worker test's member having named it)
    named = fleet.admin("admin", "group-settings", "--group", fleet.group, "--change",
                        "--heartbeat-interval", "2")  # fmt: skip
    assert named.returncode == 0, named.stderr
    yield fleet


def test_the_init_role_creates_the_topic_and_pins_its_partition_count(secured: Secured) -> None:
    """init with exactly the init role's ACLs creates the coordination topic and records its
    partition count (the count members check at start)."""
    shown = secured.admin("reader", "dump", "--json")
    assert shown.returncode == 0, shown.stderr
    verdicts = [json.loads(line)["verdict"] for line in shown.stdout.splitlines()]
    assert "TopicRecorded" in verdicts


def test_init_without_write_fails_in_one_line_naming_the_role(secured: Secured) -> None:
    """The rights init once documented (Create, Describe, DescribeConfigs) create the topic but
    cannot record its count: one line naming the role, exit 1, not a SystemError traceback;
    with the init role's rights a second init records it."""
    uid = uuid.uuid4().hex[:6]
    who = f"init-old-{uid}"
    secured.configs[who] = secured.cluster.add_user(who)
    topic = f"__marshal_old_{uid}"
    admin = admin_client(secured.cluster.bootstrap, secured.cluster.client_table)
    from marshal_workers.admin.acls import Acl  # noqa: PLC0415

    old = [
        Acl(f"User:{who}", "topic", topic, op) for op in ("Create", "Describe", "DescribeConfigs")
    ]
    apply_acls(admin, old)
    done = secured.admin(who, "init", "--partitions", "2", "--coordination-topic", topic,
                         coordination=False)  # fmt: skip
    assert done.returncode == 1
    line = one_error_line(done)
    assert "cannot record the partition count" in line and "--role init" in line
    apply_acls(admin, acls_for("init", f"User:{who}", topic))
    again = secured.admin(who, "init", "--partitions", "2", "--coordination-topic", topic,
                          coordination=False)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "recorded partition count is none, should be 2" in again.stderr


def _produce(secured: Secured, n: int, topic: str = "") -> None:
    lines = "".join(f"k{i}\tv{i}\n" for i in range(n))
    done = subprocess.run(
        [str(MARSHAL_ADMIN), "produce", topic or secured.topic, "--config",
         str(secured.configs["admin"])],
        input=lines, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def _wait(check: object, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def test_a_worker_handles_every_record_and_a_reader_sees_it(secured: Secured) -> None:
    """A member running as the worker role handles every record; the reader role's status,
    dump and group-settings show it (a command that only reads opens no producer); TERM
    stops the member cleanly, exit 0."""
    _produce(secured, 20)
    member = secured.run_member("worker", "w1")
    log = secured.root / "w1.log"
    try:

        def handled() -> bool:
            rows = (
                read_ledger(secured.root / "ledger") if (secured.root / "ledger").exists() else []
            )
            return len({(r.partition, r.offset) for r in rows}) >= 20

        _wait(handled, 60, "the worker to handle 20 records", log)
        status = secured.admin("reader", "status", "--group", secured.group, "--json")
        assert status.returncode == 0, status.stderr
        holders = {
            c["client_id"]
            for c in json.loads(status.stdout)["claims"]
            if c["topic"] == secured.topic
        }
        assert holders == {"w1"}
        dump = secured.admin("reader", "dump")
        assert dump.returncode == 0 and "ClaimGranted" in dump.stdout, dump.stderr
        settings = secured.admin("reader", "group-settings", "--group", secured.group)
        assert settings.returncode == 0 and secured.group in settings.stdout, settings.stderr
    finally:
        member.send_signal(signal.SIGTERM)
        code = member.wait(60)
    assert code == 0, log.read_text()[-3000:]
    assert "heartbeat_check_skipped" not in log.read_text()
    # the spare's consumer, made before its claim as the worker role, is its claim's child's
    # (matched by pid: the children log `child_ready` in whatever order they get set up)
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    spares = [e["child_pid"] for e in lines if e["event"] == "child_started" and e["spare"]]
    ready = {e["pid"]: e["consumer"] for e in lines if e["event"] == "child_ready"}
    assert len(spares) == 1 and ready.get(spares[0]) == "prepared", (spares, ready)


def test_a_sliced_group_reads_each_partition_once_per_host_under_least_privilege(
    secured: Secured,
) -> None:
    """Key slices read by the host's reader (`--slice-reads host`, the default) as a principal
    with only the worker role's ACLs for its own group and topic: the reader's consumer, built
    like a child's from the [kafka] table, reaches the secured broker; every record is handled
    once, by the child of its key's slice, and no feed is lost."""
    uid = uuid.uuid4().hex[:6]
    who, group, topic = f"slicer-{uid}", f"sliced_{uid}", f"hot_{uid}"
    secured.worker_of(who, group, topic)
    made = secured.admin("admin", "topic", "create", topic, "--partitions", "2")
    assert made.returncode == 0, made.stderr
    records = 60
    _produce(secured, records, topic)
    ledger = secured.root / f"ledger-{uid}"
    member = secured.run_member(
        who, "s1", "--ordering", "key", "--workers-per-partition", "4",
        topic=topic, group=group, ledger=ledger.name,
    )  # fmt: skip
    log = secured.root / "s1.log"
    try:

        def rows() -> list[LedgerRow]:
            return [r for r in read_ledger(ledger) if r.topic == topic] if ledger.exists() else []

        _wait(lambda: len({(r.partition, r.offset) for r in rows()}) >= records, 90,
              f"the sliced member to handle {records} records", log)  # fmt: skip
    finally:
        member.send_signal(signal.SIGTERM)
        code = member.wait(60)
    text = log.read_text()
    assert code == 0, text[-3000:]
    handled = rows()
    assert len(handled) == records  # each record once
    slices = {Slice(Ordering.KEY, 4, i) for i in range(4)}
    for row in handled:
        (part,) = [s for s in slices if s.takes_hashed(row.offset, row.key_hash)]
        assert row.slice == part.name, row
    assert len({(r.partition, r.slice) for r in handled}) > 2  # the records spread over slices
    # read by one reader per partition on this host, each child attached to its partition's
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    readers = [e for e in lines if e["event"] == "feed_reader_started"]
    assert {r["partition"] for r in readers} == {0, 1}, readers
    attached = [e for e in lines if e["event"] == "feed_attached"]  # each child's
    children = {(e["partition"], e["pid"]) for e in attached if "feed" in e}
    by_reader = {(e["partition"], e["slice"]) for e in lines if e["event"] == "feed_child_attached"}
    assert len(children) >= 8 and len(by_reader) == 8  # 4 slices of each partition, fed
    # every child is fed, the spare too (its consumer, made before the claim, closed)
    assert {e["consumer"] for e in lines if e["event"] == "child_ready"} == {"feed"}
    for bad in ("feed_lost", "feed_reader_crashed", "child_crashed", "not allowed", "Traceback"):
        assert bad not in text, text[-3000:]


def test_a_reader_writes_nothing(secured: Secured) -> None:
    """The reader role cannot pause a group or move its position: one line saying it may not
    write, exit 1."""
    for args in (
        ("release-group", "--group", secured.group, "--for", "5"),
        to_earliest(secured),
    ):
        done = secured.admin("reader", *args)
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr  # set-position prints its plan first
        assert "may not write" in done.stderr.splitlines()[-1]


def test_a_worker_cannot_pause_its_group_create_topics_or_write_another_fleets_log(
    secured: Secured,
) -> None:
    """A worker principal writing as itself cannot pause its group (only admin client ids
    may); it cannot create a topic, nor write another fleet's coordination topic (where
    another group's settings live): one line each, exit 1."""
    pause = secured.admin("worker", "release-group", "--group", secured.group, "--for", "5",
                          "--client-id", "w1")  # fmt: skip
    assert pause.returncode == 1
    assert "w1 is not an admin client" in one_error_line(pause)
    create = secured.admin("worker", "topic", "create", "other", "--partitions", "1")
    assert create.returncode == 1 and "not allowed" in one_error_line(create)
    other = secured.admin(
        "worker", "group-settings", "--group", "other", "--change",
        "--coordination-topic", "__marshal_other", coordination=False,
    )  # fmt: skip
    assert other.returncode == 1 and "not allowed" in one_error_line(other)


def test_a_forged_takeover_by_a_fleet_principal_costs_a_member_its_claims_for_a_while(
    secured: Secured,
) -> None:
    """The log authenticates no writer: a principal with the worker role (a fleet's own host,
    compromised) may append to the coordination topic. Its one forged heartbeat of a member's
    announcement, under an instance id nobody runs, replaces the member: it goes dormant
    (`member_replaced`, /readyz 503 naming the instance, `marshal_member_dormant` 1), claims
    again once the forged instance has been silent past 2*HB (`member_resumed`, /readyz 200),
    handles what is produced after, and stops with exit 0 (a forged takeover once stopped a
    member for good: exit 2, which systemd does not restart)."""
    uid = uuid.uuid4().hex[:6]
    who, hostile, group, topic = f"m-{uid}", f"h-{uid}", f"forged_{uid}", f"fo_{uid}"
    for name in (who, hostile):
        secured.worker_of(name, group, topic)
    made = secured.admin("admin", "topic", "create", topic, "--partitions", "2")
    assert made.returncode == 0, made.stderr
    _produce(secured, 10, topic)
    ledger = secured.root / f"ledger-{uid}"
    member = secured.run_member(
        who, "f1", "--metrics-port", "0", topic=topic, group=group, ledger=ledger.name
    )
    log = secured.root / "f1.log"

    def events(name: str) -> list[dict[str, object]]:
        lines = log.read_text().splitlines()
        return [e for e in map(json.loads, (x for x in lines if x.startswith("{")))
                if e["event"] == name]  # fmt: skip

    def handled() -> int:
        rows = read_ledger(ledger) if ledger.exists() else []
        return len({(r.partition, r.offset) for r in rows if r.topic == topic})

    try:
        _wait(lambda: handled() >= 10, 60, "the member to handle 10 records", log)
        _wait(lambda: bool(events("metrics_serving")), 10, "the metrics server", log)
        port = int(str(events("metrics_serving")[0]["port"]))
        _wait(lambda: http_get(port, "/readyz")[0] == 200, 30, "the member ready", log)
        key = member_key(group, "f1")
        forged = Heartbeat(0, "forged", "f1", group, key.topic, 0, 0)
        where = placed(group, 2).partition_of(key.topic, key.partition)
        config = tomllib.loads(secured.configs[hostile].read_text())
        producer = Producer({"bootstrap.servers": config["bootstrap_servers"], **config["kafka"]})
        producer.produce(
            secured.coordination, value=encode(forged), key=record_key(forged), partition=where
        )
        assert producer.flush(30) == 0
        _wait(lambda: bool(events("member_replaced")), 30, "the member replaced", log)
        _wait(lambda: http_get(port, "/readyz")[0] == 503, 5, "/readyz 503", log)
        assert "dormant: instance forged" in http_get(port, "/readyz")[1]
        dormant = f'marshal_member_dormant{{client_id="f1",group="{group}"}} 1.0'
        assert dormant in http_get(port, "/metrics")[1]
        _wait(lambda: bool(events("member_resumed")), 60, "the member to resume", log)
        _wait(lambda: http_get(port, "/readyz")[0] == 200, 30, "the member ready again", log)
        _produce(secured, 10, topic)
        _wait(lambda: handled() >= 20, 60, "the member to handle 10 more records", log)
    finally:
        member.send_signal(signal.SIGTERM)
        code = member.wait(60)
    assert code == 0, log.read_text()[-3000:]
    assert len(events("member_replaced")) == 1


def test_an_intruder_reads_nothing(secured: Secured) -> None:
    """A principal with no ACL: status, dump and a member are each refused with one line."""
    for args in (("status", "--group", secured.group), ("dump",)):
        done = secured.admin("intruder", *args)
        assert done.returncode == 1
        assert "not allowed" in one_error_line(done)


def test_a_wrong_password_is_an_authentication_failure(secured: Secured, tmp_path: Path) -> None:
    """A wrong SASL password says authentication failed (not "Broker transport failure"),
    exit 1, and the line does not carry the password."""
    text = secured.configs["reader"].read_text()
    wrong = tmp_path / "wrong.toml"
    wrong.write_text(
        "\n".join(
            '"sasl.password" = "not-the-password-42"'
            if line.startswith('"sasl.password"')
            else line
            for line in text.splitlines()
        )
    )
    secured.configs["wrong"] = wrong
    done = secured.admin("wrong", "status", "--group", secured.group)
    assert done.returncode == 1
    line = one_error_line(done)
    assert "authentication failed" in line and "not-the-password-42" not in line


def test_the_password_may_come_from_the_environment_or_a_credential(
    secured: Secured, tmp_path: Path
) -> None:
    """The reader's --config without its password: from MARSHAL_KAFKA_SASL_PASSWORD, from
    MARSHAL_KAFKA_SASL_PASSWORD_FILE, or from a systemd credential kafka.sasl.password."""
    lines = secured.configs["reader"].read_text().splitlines()
    password = next(line for line in lines if line.startswith('"sasl.password"'))
    secret = json.loads(password.split("=", 1)[1].strip())
    bare = tmp_path / "reader-bare.toml"
    bare.write_text("\n".join(line for line in lines if line != password) + "\n")
    secured.configs["bare"] = bare
    (tmp_path / "pw").write_text(secret + "\n")
    (tmp_path / "creds").mkdir()
    (tmp_path / "creds" / "kafka.sasl.password").write_text(secret)
    for env in (
        {"MARSHAL_KAFKA_SASL_PASSWORD": secret},
        {"MARSHAL_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "pw")},
        {"CREDENTIALS_DIRECTORY": str(tmp_path / "creds")},
    ):
        done = secured.admin("bare", "dump", env=env)
        assert done.returncode == 0, (env.keys(), done.stderr)


def test_a_worker_on_a_topic_it_may_not_describe_is_told_so_not_that_it_is_missing(
    secured: Secured,
) -> None:
    """The worker's ACLs name its own topic; run on another, existing topic it exits 2 with one
    line saying it may not describe it. (The partitions were read from a metadata request for
    every topic, which leaves out those the principal may not describe: the line said the topic
    did not exist.)"""
    other = f"payments_{uuid.uuid4().hex[:6]}"
    made = secured.admin("admin", "topic", "create", other, "--partitions", "1")
    assert made.returncode == 0, made.stderr
    member = secured.run_member("worker", "w9", topic=other)
    code = member.wait(60)
    text = (secured.root / "w9.log").read_text()
    assert code == 2, text[-3000:]
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in text, text
    assert f"not authorized to describe topic '{other}' on " in lines[0]
    assert "or it does not exist" in lines[0]
    assert "see marshal-admin acls" in lines[0]


def test_a_worker_without_cluster_describe_configs_says_the_check_could_not_run(
    secured: Secured,
) -> None:
    """Without the optional Cluster DescribeConfigs a member runs, and says once that the
    heartbeat-interval check could not run and which permission it lacks."""
    member = secured.run_member("worker-nocluster", "w2")
    log = secured.root / "w2.log"
    try:
        _wait(lambda: "supervisor_started" in log.read_text(), 60, "the member to start", log)
    finally:
        member.send_signal(signal.SIGTERM)
        member.wait(60)
    skipped = [line for line in log.read_text().splitlines() if "heartbeat_check_skipped" in line]
    assert len(skipped) == 1
    assert "DescribeConfigs on the cluster" in skipped[0]


def test_acls_apply_needs_the_right_to_create_acls(secured: Secured) -> None:
    """`acls --apply` as a principal that may not create ACLs: one line, exit 1."""
    done = secured.admin("operator", "acls", "--role", "reader", "--principal", "User:x",
                         "--topic", secured.topic, "--apply")  # fmt: skip
    assert done.returncode == 1
    assert "cannot create the ACL" in done.stderr.splitlines()[-1]


def test_the_operator_role_pauses_and_repositions_but_creates_nothing(secured: Secured) -> None:
    """The operator role pauses the group, lifts it and sets its position (committing the
    group's offsets); it cannot create a topic: one line, exit 1."""
    for args in (
        ("release-group", "--group", secured.group, "--for", "2"),
        ("release-group", "--group", secured.group, "--for", "0"),
        to_earliest(secured),
    ):
        done = secured.admin("operator", *args)
        assert done.returncode == 0, (args, done.stderr)
    create = secured.admin("operator", "topic", "create", "other", "--partitions", "1")
    assert create.returncode == 1 and "not allowed" in one_error_line(create)


def test_the_operator_role_moves_a_group_and_the_reader_role_cannot(secured: Secured) -> None:
    """group-settings --move under least privilege: the reader role is refused in one line
    (exit 1) and nothing moves; the operator role moves a spread group to one partition
    (pause, settings, token base, lift) and group-settings then shows it placed."""
    group = f"moved_{secured.group}"
    made = secured.admin("operator", "group-settings", "--group", group, "--change")
    assert made.returncode == 0 and "recorded" in made.stdout, made.stderr
    before = secured.admin("reader", "group-settings", "--group", group)
    assert before.returncode == 0 and "placement=spread" in before.stdout, before.stdout
    move = ("group-settings", "--group", group, "--move", "--span", "1", "--timeout", "30")
    refused = secured.admin("reader", *move)
    assert refused.returncode == 1, refused.stderr
    assert "Traceback" not in refused.stderr
    assert "may not write" in refused.stderr.splitlines()[-1]
    moved = secured.admin("operator", *move)
    assert moved.returncode == 0 and "pause lifted" in moved.stdout, moved.stderr
    shown = secured.admin("reader", "group-settings", "--group", group)
    assert shown.returncode == 0 and "placement=" in shown.stdout, shown.stdout
    assert "placement=spread" not in shown.stdout, shown.stdout


@pytest.mark.spark
def test_the_audit_reads_a_secured_cluster_as_the_auditor_role(
    secured: Secured, tmp_path: Path
) -> None:
    """marshal-audit with the auditor's --config: its metadata reads and Spark's Kafka source
    (the [kafka] table translated for the Java client) reach the secured broker; the summary
    counts the log's records and its lines carry no password. The whole topic is audited, each
    group with the interval its settings record: the fleet's group (2 s) shares it with the
    group the operator test moved (10 s), which a given --heartbeat-interval 2 would refuse."""
    from tests.integration.fleet import MARSHAL_AUDIT  # noqa: PLC0415

    env = {k: v for k, v in os.environ.items() if not k.startswith("MARSHAL_")}
    done = subprocess.run(
        [str(MARSHAL_AUDIT), "--config", str(secured.configs["auditor"]), "--coordination-topic",
         secured.coordination, "--out", str(tmp_path / "out"), "--json"],
        capture_output=True, text=True, timeout=600, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["records"] > 0, summary
    password = json.loads(
        next(line for line in secured.configs["auditor"].read_text().splitlines()
             if line.startswith('"sasl.password"')).split("=", 1)[1]
    )  # fmt: skip
    assert password not in done.stdout + done.stderr
