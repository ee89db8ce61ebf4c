"""The child (worker) process: one claimed partition, its consumer, the user's handler, the
failure policy, dead letters, AMO grants, and the fencing that ends it when its lease does.

Runs in the child process only (started from the fork server). Imports `handler`, `ipc`,
`childlink`, `clients`, `common` and of the protocol its modes, lease rule, slicing and AMO
reservation sizer (`protocol.reservations`); never the fold (`protocol.rationalizer`), the
coordination log (`log`), the member's core (`core`) or the supervisor.
"""
