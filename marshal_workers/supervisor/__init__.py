"""The supervisor process (``marshal-run``): one member of a group on one host.

`runtime.Supervisor` feeds the member's sans-I/O core (`marshal_workers.core`) from Kafka, the
children's pipes and signals, and carries out its commands; around it the host's concerns
(signals, host lock, systemd, metrics, data topics, offsets). Runs in the supervisor process
only. May import every layer below it: common, protocol, clients, config, ipc, childlink,
handler, log, core and fleet (the checks and the offsets sink it shares with the tools), and of
the child only its entry point (`child.entry`, to start children: `childprocess`). No tool
imports it.
"""
