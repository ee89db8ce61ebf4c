"""`marshal-sim`: a deterministic fleet simulator (real member cores, virtual time, faults).

A tool, in its own process. May import every layer below it (`core`, `protocol`, the pure
parts of `ipc`, `child.grants`); runs no Kafka and starts no process.
"""
