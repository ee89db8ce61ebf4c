"""The Marshal protocol, pure: the coordination log's wire format, the fold (`rationalizer`)
every reader agrees on, and the facts derived from it (members, leases, poison records, group
status, the Go fleet's fold).

Runs wherever the log is read: the supervisor, the tools, the simulator (never the child,
which needs only `modes`). Imports nothing of the project and does no I/O and reads no clock
(the purity test, tests/unit/test_pure_core.py, checks every module).
"""
