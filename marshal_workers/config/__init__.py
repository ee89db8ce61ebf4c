"""Configuration: the settings table (`settings`: flags, environment, TOML, checks), what
`marshal-run` runs with (`runconfig`), what the tools share (`toolconfig`), and time arguments.

Runs in the supervisor and the tools (the child gets its part in its `ipc.messages.ChildSpec`).
Imports only lower layers: `common`, `protocol`, `clients`.
"""
