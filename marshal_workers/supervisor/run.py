"""`run(config)`: start a supervisor, run its loop until it stops, and return the exit code.

Before anything starts: the handler is imported (exit 3 if it cannot be), the coordination
topic is opened and its settings checked (a fatal difference refuses to run; a heartbeat
interval too small for the cluster's failure detection is warned about), and this group's
client id is locked on this host (`hostlock`: two workers with one id would take each other's
claims over). The supervisor's start then checks what the group must agree on (the recorded
partition count, the group's settings) before it claims anything. Nothing is printed before a
start-up error but its one line.
"""

from __future__ import annotations

import faulthandler
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.context import ForkServerContext
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from marshal_workers.supervisor.metrics import MetricsServer

from marshal_workers.childlink import listenerdirs
from marshal_workers.childlink.forkserver import fork_server
from marshal_workers.clients.rdkafka import RDKAFKA_GATE, RDKAFKA_LOG
from marshal_workers.common.errors import EXIT_OK, MarshalError
from marshal_workers.common.logs import configure_logging
from marshal_workers.common.workdir import working_directory_on_path
from marshal_workers.config.runconfig import RunConfig
from marshal_workers.fleet.brokercheck import cluster_heartbeat_check
from marshal_workers.handler.loading import load_handler
from marshal_workers.log.kafkalog import KafkaLog
from marshal_workers.log.topicadmin import admin_client, describe_topic, diff_topic_config
from marshal_workers.supervisor.datatopics import DataTopics
from marshal_workers.supervisor.hostlock import host_lock
from marshal_workers.supervisor.observe import Observer, Observers
from marshal_workers.supervisor.offsets import OffsetCommitter
from marshal_workers.supervisor.runtime import Supervisor
from marshal_workers.supervisor.signals import SignalQueue
from marshal_workers.supervisor.slowcalls import SlowCallLog
from marshal_workers.supervisor.systemd import SystemdNotify

StartupWarning = tuple[str, dict[str, str]]  # an event and its fields, logged once started
TMP_SWEEP_AFTER_S = 5.0  # dead fork servers' directories: removed this long after the start,
# off the way to the first claims and children (`childlink.listenerdirs`)


def check_coordination_topic(config: RunConfig) -> list[StartupWarning]:
    """Refuse a coordination topic whose settings break the safety argument; the warnings on
    others (and on a heartbeat interval too small for the cluster), for the caller to log once
    the supervisor has started: before a start-up error nothing is printed but its line."""
    warnings: list[StartupWarning] = []
    admin = admin_client(config.bootstrap_servers, config.kafka)
    info = describe_topic(admin, config.bootstrap_servers, config.coordination_topic)
    if info is None:
        raise MarshalError(
            f"coordination topic {config.coordination_topic} does not exist on "
            f"{config.bootstrap_servers}: run `marshal-admin init`"
        )
    diffs = diff_topic_config(
        info.config, info.replication_factor, heartbeat_interval_s=config.heartbeat_interval
    )
    for diff in diffs:
        if diff.fatal:
            raise MarshalError(f"{config.coordination_topic}: {diff}")
        warnings.append(("coordination_topic_setting", {"difference": str(diff)}))
    said = cluster_heartbeat_check(
        admin, config.heartbeat_interval, topic=config.coordination_topic
    )
    if said is not None:
        warnings.append((said[0], {"detail": said[1]}))
    return warnings


def operator_observers(config: RunConfig) -> tuple[list[Observer], MetricsServer | None]:
    """systemd notification (if $NOTIFY_SOCKET is set) and metrics (if --metrics-port is), with
    the metrics' HTTP server, not started yet."""
    built: list[Observer] = []
    notify = SystemdNotify.from_environment()  # also keeps NOTIFY_SOCKET from the children
    if notify is not None:
        built.append(notify)
    server = None
    if config.metrics_port is not None:
        from marshal_workers.supervisor.metrics import Metrics, MetricsServer  # noqa: PLC0415 (prometheus)

        metrics = Metrics(config.group, config.client_id, config.heartbeat_interval)
        server = MetricsServer(metrics, config.metrics_host, config.metrics_port)
        built.append(metrics)
    return built, server


def run(config: RunConfig, observers: Sequence[Observer] = ()) -> int:
    """Run a supervisor until it stops; return the process exit code."""
    configure_logging(json=config.log_json)
    faulthandler.enable(all_threads=True)  # SIGABRT (the systemd watchdog) prints every stack
    structlog.contextvars.bind_contextvars(pid=os.getpid())  # every supervisor line says its pid
    log = structlog.get_logger().bind(group=config.group, client_id=config.client_id)
    RDKAFKA_GATE.hold()  # librdkafka's lines wait until started: a start-up error is one line
    try:
        return _run(config, observers, log)
    finally:
        RDKAFKA_GATE.release()  # (a failed start: what was held is dropped)


def _run(config: RunConfig, observers: Sequence[Observer], log: Any) -> int:
    """`run` from the handler's import to the supervisor's end."""
    working_directory_on_path()  # before the fork server starts: it and the children inherit it
    # (`marshal-run` started it already, before its imports: `launch`; here it is kept)
    load_handler(config.handler)
    with ThreadPoolExecutor(1, thread_name_prefix="marshal-check") as pool:
        # The topic's settings are checked while the log opens (each takes its own round trips
        # to the broker); a refusal by the check is the one line, whatever else failed.
        checked = pool.submit(check_coordination_topic, config)
        try:
            with host_lock(config.group, config.client_id):
                extra, server = operator_observers(config)  # takes NOTIFY_SOCKET out of env
                children = fork_server()  # (if not running yet) it inherits this env
                coordination = KafkaLog(
                    config.bootstrap_servers,
                    config.coordination_topic,
                    client_id=f"marshal-{config.client_id}",
                    extra_config=config.kafka,
                    quick_start=True,  # a short fetch wait while the group is located
                )
                try:
                    warnings = checked.result()
                except BaseException:
                    coordination.close()
                    raise
                return _supervise(
                    config, observers, log, extra, server, children, coordination, warnings
                )
        except BaseException:
            refused = checked.exception()  # (waits for the check)
            if refused is None:
                raise
            raise refused from None


def _remove_dead_listener_dirs(log: Any) -> None:
    """Remove what the fork servers of killed supervisors left in the temporary directory
    (`childlink.listenerdirs`); off the loop, `TMP_SWEEP_AFTER_S` after the start."""
    try:
        removed = listenerdirs.remove_dead()
    except Exception as exc:  # never the supervisor's end: a line, and the thread ends
        log.warning("fork_server_dirs_not_removed", error=f"{type(exc).__name__}: {exc}")
        return
    if removed:
        log.info("fork_server_dirs_removed", count=removed)


def _supervise(
    config: RunConfig,
    observers: Sequence[Observer],
    log: Any,
    extra: list[Observer],
    server: MetricsServer | None,
    children: ForkServerContext,
    coordination: KafkaLog,
    warnings: Sequence[StartupWarning] = (),
) -> int:
    """Run the supervisor on the opened log until it stops; its exit code. The start-up
    checks' ``warnings`` are logged once it has started."""
    committer = OffsetCommitter.for_kafka(  # best effort: for kafka-consumer-groups
        config.bootstrap_servers, config.group, config.heartbeat_interval, config.kafka
    )
    slow = SlowCallLog(log, config.handler_timeout)  # a call past half its timeout, said
    observer = Observers([*observers, committer, slow, *extra])
    topics = DataTopics(
        config.bootstrap_servers, config.group, config.topics, config.kafka, config.slicing
    )
    signals = SignalQueue()
    supervisor = Supervisor(
        config,
        coordination,
        topics,
        children,
        observer,
        wake_fd=signals.fileno(),
    )
    try:
        if server is not None:
            server.start()  # /healthz answers during the catch-up already
        supervisor.start()
        # Logged once started: before a start-up error nothing is printed but its line.
        log.info(
            "supervisor_started",
            mode=config.mode.value,
            topics=list(config.topics),
            instance_id=config.instance_id,
            heartbeat_interval=config.heartbeat_interval,
        )
        if server is not None:
            log.info("metrics_serving", host=config.metrics_host, port=server.port)
        sweep = threading.Timer(TMP_SWEEP_AFTER_S, _remove_dead_listener_dirs, args=(log,))
        sweep.name, sweep.daemon = "marshal-tmp", True
        sweep.start()
        held = RDKAFKA_GATE.release()
        if held is not None:
            RDKAFKA_LOG.handle(held)  # how many lines the start-up held, and the last
        for event, fields in warnings:
            log.warning(event, **fields)
        while not supervisor.done:
            supervisor.step(signals.take())
    finally:
        supervisor.kill_all()  # nothing outlives the supervisor
        signals.close()
        topics.close()
        committer.close()
        coordination.close()
        if server is not None:
            server.close()
    code = supervisor.exit_code if supervisor.exit_code is not None else EXIT_OK
    received = coordination.received  # with statistics.interval.ms in the [kafka] table
    cost: dict[str, int] = {}
    if received is not None:
        cost = {"coordination_bytes": received[0], "coordination_record_bytes": received[1]}
    log.info("supervisor_stopped", exit_code=code, **cost)
    reason = supervisor.member.exit_reason
    if code != EXIT_OK and reason:  # a refusal to go on: its one line, and its exit code
        raise MarshalError(reason, code)
    return code
