"""`marshal-sim`: a deterministic fleet simulator (real member cores, virtual time, faults).

A tool, in its own process. May import the pure layers (`core`, `protocol`, the messages of
`ipc`), `config`, `log` and `common`, never the child or `childlink`: its simulated children
size AMO reservations with the real child's rule (`protocol.reservations`). Runs no Kafka and
starts no process.
"""
