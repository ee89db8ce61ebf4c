"""The supervisor process (``marshal-run``): one member of a group on one host.

`runtime.Supervisor` feeds the member's sans-I/O core (`marshal_workers.core`) from Kafka, the
children's pipes and signals, and carries out its commands; around it the host's concerns
(signals, host lock, systemd, metrics, data topics, offsets, broker checks). Runs in the
supervisor process only. May import every layer below it: common, protocol, clients, config,
ipc, handler, log, core and child (to start children). Importing this package imports nothing
else: a tool that needs one of its modules (offsets, brokercheck) does not pay for the runtime.
"""
