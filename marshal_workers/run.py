"""`run(config)`: start a supervisor, run its loop until it stops, and return the exit code.

Before anything starts: the handler is imported (exit 3 if it cannot be), the coordination
topic is opened and its settings checked (a fatal difference refuses to run), and this group's
client id is locked on this host (`hostlock`: two workers with one id would take each other's
claims over).
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
from collections.abc import Sequence

import structlog

from marshal_workers.config import RunConfig
from marshal_workers.coordination import Coordinator
from marshal_workers.datatopics import DataTopics
from marshal_workers.errors import EXIT_OK, EXIT_RUNTIME, MarshalError
from marshal_workers.gofleet import GoFleetGuard
from marshal_workers.handler import load_handler
from marshal_workers.hostlock import host_lock
from marshal_workers.kafkalog import KafkaLog
from marshal_workers.logs import configure_logging
from marshal_workers.metrics import Metrics, MetricsServer
from marshal_workers.observe import Observer, Observers
from marshal_workers.offsets import OffsetCommitter
from marshal_workers.rationalizer import RationalizerConfig
from marshal_workers.reader import LogReader
from marshal_workers.signals import SignalQueue
from marshal_workers.supervisor import CoordinationChangedError, Supervisor
from marshal_workers.systemd import SystemdNotify
from marshal_workers.topicadmin import admin_client, describe_topic, diff_topic_config


def check_coordination_topic(config: RunConfig) -> None:
    """Refuse a coordination topic whose settings break the safety argument; warn on others."""
    log = structlog.get_logger()
    info = describe_topic(
        admin_client(config.bootstrap_servers, config.kafka),
        config.bootstrap_servers,
        config.coordination_topic,
    )
    if info is None:
        raise MarshalError(
            f"coordination topic {config.coordination_topic} does not exist on "
            f"{config.bootstrap_servers}: run `marshal-admin init`"
        )
    for diff in diff_topic_config(info.config, info.replication_factor):
        if diff.fatal:
            raise MarshalError(f"{config.coordination_topic}: {diff}")
        log.warning("coordination_topic_setting", difference=str(diff))


def operator_observers(config: RunConfig) -> tuple[list[Observer], MetricsServer | None]:
    """systemd notification (if $NOTIFY_SOCKET is set) and metrics (if --metrics-port is), with
    the metrics' HTTP server, not started yet."""
    built: list[Observer] = []
    notify = SystemdNotify.from_environment()  # also keeps NOTIFY_SOCKET from the children
    if notify is not None:
        built.append(notify)
    server = None
    if config.metrics_port is not None:
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
    load_handler(config.handler)
    check_coordination_topic(config)
    with host_lock(config.group, config.client_id):
        extra, server = operator_observers(config)
        coordination = KafkaLog(
            config.bootstrap_servers,
            config.coordination_topic,
            client_id=f"marshal-{config.client_id}",
            extra_config=config.kafka,
        )
        reader = LogReader(
            coordination,
            RationalizerConfig(
                config.heartbeat_interval_ms,
                num_partitions=coordination.num_partitions,
                partitioner=config.partitioner,
                admin_client_ids=config.admin_client_ids,
            ),
            on_malformed=GoFleetGuard(config.group, config.coordination_topic),
        )
        committer = OffsetCommitter.for_kafka(  # best effort: for kafka-consumer-groups
            config.bootstrap_servers, config.group, config.heartbeat_interval, config.kafka
        )
        observer = Observers([*observers, committer, *extra])
        topics = DataTopics(config.bootstrap_servers, config.group, config.topics, config.kafka)
        signals = SignalQueue()
        supervisor = Supervisor(
            config,
            Coordinator(config, coordination, reader, observer),
            topics,
            multiprocessing.get_context("spawn"),
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
            while not supervisor.done:
                supervisor.step(signals.take())
        except CoordinationChangedError as exc:
            log.error("refusing_to_run", reason=str(exc))
            return EXIT_RUNTIME
        finally:
            supervisor.kill_all()  # nothing outlives the supervisor
            signals.close()
            topics.close()
            committer.close()
            coordination.close()
            if server is not None:
                server.close()
        log.info("supervisor_stopped")
    return EXIT_OK
