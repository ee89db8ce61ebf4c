"""`marshal-sim`: a deterministic fleet simulator (real member cores, virtual time, faults).

A tool, in its own process. May import the layers below it (`core`, `protocol`, the pure
parts of `ipc`) but the child: its simulated children size AMO reservations with the real
child's rule (`protocol.reservations`). Runs no Kafka and starts no process.
"""
