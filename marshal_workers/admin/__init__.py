"""`marshal-admin`: the operator's commands (status, watch, pause, positions, poison records,
group settings, the coordination topic, the demo, the local Kafka).

A tool, in its own process. Imports `protocol`, `log`, `config`, `clients`, `common`, `fleet`
(the checks and the offsets sink it shares with the supervisor) and `localkafka`; never the
supervisor, the child or `childlink` (test_package_rules).
"""
