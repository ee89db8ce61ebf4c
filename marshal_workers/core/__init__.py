"""The member's sans-I/O core: one member of a group as a pure state machine, fed inputs
(records folded, child exits, timers) and answering with commands (appends, spawns, signals).

Runs in the supervisor process (`supervisor.runtime` drives it) and in the simulator. Pure:
imports only `protocol`, `common` and the pure parts of `ipc` (`messages`, `exits`); no I/O,
no clock (tests/unit/project/test_pure_core.py).
"""
