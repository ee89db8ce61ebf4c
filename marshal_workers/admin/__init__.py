"""`marshal-admin`: the operator's commands (status, watch, pause, positions, poison records,
group settings, the coordination topic, the demo, the local Kafka).

A tool, in its own process. May import every layer below it (`supervisor` for its offsets
sink and checks) and `localkafka`; must not import `ipc.forkserver` (test_package_rules).
"""
