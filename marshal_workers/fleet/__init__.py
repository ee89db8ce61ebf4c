"""What a member and the operator's tools both do against the cluster besides claiming: the
checks of the group's recorded settings and of the coordination topic's partition count
(`groupcheck`), the check of the heartbeat interval against the brokers' failure detection
(`brokercheck`), and commits of the group's positions to Kafka's offsets (`offsetsink`).

Runs in the supervisor (``marshal-run``) and in ``marshal-admin``. Imports `common`,
`protocol`, `clients`, `config` and `log` only; never the core, the child or the supervisor.
"""
