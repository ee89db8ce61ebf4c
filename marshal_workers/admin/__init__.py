"""`marshal-admin`: the operator's commands (status, watch, pause, positions, poison records,
group settings, the coordination topic, the demo, the local Kafka).

One module per command (or click group), named for it: `init`, `status`, `dump`, `repin`,
`release_group`, `set_position`, `import_go`, `group_settings`, `records` (skip-record and
retry-record), `topic`, `produce`, `acls`, `demo`; each parses its options and calls its
operation, in the same module or, where that is large, in one named after it
(`set_position_run`, `status_read`, `status_watch`, `topic_view`, `demo_run`). They share the
click options of `options`, the coordination log's `connection` and `session`, and the parts
several operations stand on (`pause`, `targets`, `goread`); `cli` puts the commands together.

A tool, in its own process. Imports `protocol`, `log`, `config`, `clients`, `common`, `fleet`
(the checks and the offsets sink it shares with the supervisor) and `localkafka`; never the
supervisor, the child or `childlink` (test_package_rules).
"""
