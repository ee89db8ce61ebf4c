"""A real local Apache Kafka (KRaft) for development and tests.

Start one with `start_cluster(StartOptions(directory=..., nodes=1|3))`, which returns a
`LocalKafka` handle (`.bootstrap`, `.kill_node`, `.restart_node`, `.leader_of`, `.stop`);
stop one with `stop_cluster(directory)`; look with `cluster_status(directory)`. The
`kafka` click group (`marshal-admin kafka start|stop|status|fetch`) calls the same code.

A tool (run by `marshal-admin kafka`, the tests and the benchmarks). Imports `clients`
and `common` only.
"""

from marshal_workers.localkafka.cluster import (
    ClusterStatus,
    LocalKafka,
    StartOptions,
    cluster_status,
    start_cluster,
    stop_cluster,
)
from marshal_workers.localkafka.jars import resolve_jars
from marshal_workers.localkafka.paths import KAFKA_VERSION

__all__ = [
    "KAFKA_VERSION",
    "ClusterStatus",
    "LocalKafka",
    "StartOptions",
    "cluster_status",
    "resolve_jars",
    "start_cluster",
    "stop_cluster",
]
